"""The two tasks' own rules (training/tasks.py): which text each vocabulary is learned from, what the model is
built with, when validation runs, and what an export of each task serves and records."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import VOCAB, hesitant_model

import kformer
from kformer.data.pairs import DataError
from kformer.data.text import END_ID, Tokenizer
from kformer.model import build_decoder_only, build_transformer
from kformer.model_dir import ModelDirectoryError, TrainedModel
from kformer.training.config import TrainingConfig
from kformer.training.evaluation import perplexity
from kformer.training.tasks import LANGUAGE_MODEL, TRANSLATION, require, task_of

# Each pair ten times: WordPiece keeps a word whole once it is frequent enough.
PAIRS = [("the cat sleeps", "el gato duerme")] * 10 + [("a dog runs", "un perro corre")] * 10
PAIRS += [("the bird sings", "el pájaro canta")] * 10


def test_a_translations_vocabularies_come_from_each_side_of_the_first_vocab_sample_pairs(tmp_path, capsys):
    config = TrainingConfig(source_vocab_size=50, target_vocab_size=60, vocab_sample=20)
    source, target = TRANSLATION.vocabularies(tmp_path, PAIRS, config, verbose=1)
    assert {"cat", "dog"} <= set(source.vocabulary) and not {"gato", "perro"} & set(source.vocabulary)
    assert {"gato", "perro"} <= set(target.vocabulary) and not {"cat", "dog"} & set(target.vocabulary)
    assert "bird" not in source.vocabulary and "pájaro" not in target.vocabulary  # past the first 20 pairs
    said = capsys.readouterr().out  # each side's size goes to its own learner
    assert said.count("Learning a 50-token WordPiece vocabulary from 20 sentences ...") == 1
    assert said.count("Learning a 60-token WordPiece vocabulary from 20 sentences ...") == 1
    assert Tokenizer.load(tmp_path / "source_vocab.txt").vocabulary == source.vocabulary
    assert Tokenizer.load(tmp_path / "target_vocab.txt").vocabulary == target.vocabulary

    # A run resumed in that folder reads them back instead of learning again, and says nothing.
    (tmp_path / "source_vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    again, target_again = TRANSLATION.vocabularies(tmp_path, PAIRS, config, verbose=1)
    assert again.vocabulary == VOCAB and target_again.vocabulary == target.vocabulary
    assert capsys.readouterr().out == ""

    elsewhere = tmp_path / "worker"  # a worker that is not the chief learns them and writes nothing
    elsewhere.mkdir()
    TRANSLATION.vocabularies(elsewhere, PAIRS, config, verbose=0, write=False)
    assert list(elsewhere.iterdir()) == []


def test_a_shared_vocabulary_is_one_tokenizer_learned_from_both_sides_and_written_under_both_names(tmp_path, capsys):
    config = TrainingConfig(shared_vocab=True, source_vocab_size=50, target_vocab_size=70)
    source, target = TRANSLATION.vocabularies(tmp_path, PAIRS, config, verbose=1)
    assert source is target and {"cat", "gato", "pájaro", "bird"} <= set(source.vocabulary)
    assert capsys.readouterr().out == "Learning a 70-token WordPiece vocabulary from 60 sentences ...\n"
    written = [(tmp_path / name).read_text(encoding="utf-8") for name in ("source_vocab.txt", "target_vocab.txt")]
    assert written[0] == written[1] and Tokenizer.load(tmp_path / "target_vocab.txt").vocabulary == source.vocabulary

    elsewhere = tmp_path / "worker"  # quiet when not verbose, and a worker writes neither name
    elsewhere.mkdir()
    TRANSLATION.vocabularies(elsewhere, PAIRS, config, verbose=0, write=False)
    assert list(elsewhere.iterdir()) == [] and capsys.readouterr().out == ""


def test_a_language_models_one_vocabulary_comes_from_its_first_vocab_sample_lines(tmp_path, capsys):
    lines = [spanish for _, spanish in PAIRS]
    source, target = LANGUAGE_MODEL.vocabularies(tmp_path, lines, TrainingConfig(vocab_sample=20), verbose=1)
    assert source is None and {"gato", "perro"} <= set(target.vocabulary) and "pájaro" not in target.vocabulary
    assert capsys.readouterr().out == "Learning a 8000-token WordPiece vocabulary from 20 sentences ...\n"
    assert [path.name for path in tmp_path.iterdir()] == ["target_vocab.txt"]
    elsewhere = tmp_path / "worker"
    elsewhere.mkdir()
    LANGUAGE_MODEL.vocabularies(elsewhere, lines, TrainingConfig(), verbose=0, write=False)
    assert list(elsewhere.iterdir()) == [] and capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "task, examples, settings, message",
    [
        (TRANSLATION, [(" ", "el gato"), ("", "un perro")], {}, "the source side holds no words"),
        (TRANSLATION, [("the cat", " "), ("a dog", "")], {}, "the target side holds no words"),
        (TRANSLATION, [(" ", ""), ("", " ")], dict(shared_vocab=True), "the training pairs holds no words"),
        (LANGUAGE_MODEL, [" ", ""], {}, "the training text holds no words"),
    ],
)
def test_a_side_with_nothing_to_learn_from_is_named(tmp_path, task, examples, settings, message):
    with pytest.raises(DataError, match=f"^{message} to learn a vocabulary from"):
        task.vocabularies(tmp_path, examples, TrainingConfig(**settings), verbose=0)
    assert list(tmp_path.iterdir()) == []


def test_each_task_builds_its_own_model_and_a_language_models_shared_vocab_ties_its_output():
    source, target = Tokenizer(VOCAB), Tokenizer(VOCAB[:10])
    config = TrainingConfig(shared_vocab=True)
    builder, sizes, settings = TRANSLATION.model(config, source, target)
    assert (builder, sizes, settings) == (build_transformer, (16, 10), config)
    builder, sizes, settings = LANGUAGE_MODEL.model(config, None, target)
    assert (builder, sizes) == (build_decoder_only, (10,))
    assert settings.tie_embeddings is True and settings.shared_vocab is False  # one vocabulary: output tied to input
    assert settings.model_settings() == {**TrainingConfig().model_settings(), "tie_embeddings": True}
    _, _, plain = LANGUAGE_MODEL.model(TrainingConfig(), None, target)
    assert not plain.tie_embeddings and not plain.shared_vocab


def test_validation_runs_on_the_pairs_that_fit_in_one_order_and_the_keeper_translates_them_all():
    source, target = Tokenizer(VOCAB), Tokenizer(VOCAB)
    letters = VOCAB[4:]
    short = [(" ".join(letters[i : i + 2]), " ".join(letters[i : i + 2])) for i in range(10)]
    long = [("a b c d e f", "a b c d e f")]
    batches = dict(batch_size=4, batch_tokens=None, max_length=4)
    assert TRANSLATION.validation([], source, target, batches, None) == (None, None)
    valid, keeper = TRANSLATION.validation(short + long, source, target, batches, "best.weights.h5")
    first, again = ([labels.numpy().tolist() for _, labels in valid] for _ in range(2))
    assert sum(len(batch) for batch in first) == 10  # the long pair is not in the val_loss batches ...
    assert first == again  # every epoch's val_loss from the same batches: not shuffled
    assert keeper.sources == [s for s, _ in short] + ["a b c d e f"] and keeper.max_length == 4  # ... but translated
    assert keeper.tokenizers[0] is source and keeper.tokenizers[1] is target and keeper.path == "best.weights.h5"
    valid, keeper = TRANSLATION.validation(long, source, target, batches, None)
    assert valid is None and keeper.sources == ["a b c d e f"]  # no pair fits: no val_loss, still chrF
    assert LANGUAGE_MODEL.validation(short, None, target, batches, None) == (None, None)
    assert TRANSLATION.results(None, target, short, TrainingConfig()) == {}
    assert LANGUAGE_MODEL.results(None, target, [], TrainingConfig()) == {}


@pytest.fixture(scope="module")
def hesitant():
    """An untrained translator whose [END] is about as likely as a letter: its hypotheses end at different lengths."""
    return TrainedModel(hesitant_model(), Tokenizer(VOCAB), Tokenizer(VOCAB), {"kind": "translator", "max_length": 12})


def test_a_translation_export_serves_the_search_the_runner_was_asked_for_and_records_its_penalty(hesitant):
    runner = TRANSLATION.runner(hesitant, beam_size=3, length_penalty=1.5)
    assert (runner.beam_size, runner.length_penalty, runner.xla) == (3, 1.5, False)
    plain = TRANSLATION.runner(hesitant)  # greedy, the translator's own penalty and no XLA unless asked
    assert (plain.beam_size, plain.length_penalty, plain.xla) == (1, kformer.Translator(hesitant).length_penalty, False)
    assert TRANSLATION.runner(hesitant, xla=True).xla is True
    assert TRANSLATION.manifest(runner) == {
        "max_output_ratio": runner.max_output_ratio,
        "extra_output_tokens": 10,
        "length_penalty": 1.5,
    }
    functions = TRANSLATION.id_functions(runner)
    assert set(functions) == {"translate_ids", "search_ids"}
    ids = tf.constant([[4, 5, 6], [7, 8, 0]], tf.int32)
    searched = functions["search_ids"](ids)
    tokens, log_probs = (searched[name].numpy() for name in ("output_tokens", "log_probs"))
    lengths = np.count_nonzero(tokens, axis=-1)  # [END] counted, [PAD] not
    np.testing.assert_allclose(searched["scores"].numpy(), log_probs / ((5 + lengths) / 6) ** 1.5, rtol=1e-5)
    assert (np.diff(searched["scores"].numpy(), axis=1) <= 1e-6).all() and len(set(lengths.ravel())) > 1
    best = functions["translate_ids"](ids)
    assert set(best) == {"output_tokens", "log_probs"}
    width = best["output_tokens"].shape[1]
    np.testing.assert_array_equal(best["output_tokens"].numpy(), tokens[:, 0, :width])  # the search's first
    assert (tokens[:, 0, width:] == 0).all()


def test_a_language_model_export_generates_greedily_and_refuses_a_translators_settings(hesitant):
    keras.utils.set_random_seed(1)
    model = build_decoder_only(len(VOCAB), d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0)
    lm = TrainedModel(model, None, Tokenizer(VOCAB), {"kind": "language_model", "max_length": 12})
    runner = LANGUAGE_MODEL.runner(lm, max_new_tokens=5)
    assert runner.max_new_tokens == 5 and LANGUAGE_MODEL.manifest(runner) == {"max_new_tokens": 5}
    assert LANGUAGE_MODEL.runner(lm).max_new_tokens == kformer.Generator(lm).max_new_tokens  # its default
    held_out = ["a b c d", "e f g"]  # the end of training reports the perplexity on them, to two decimals
    measured = perplexity(model, lm.target_tokenizer, held_out, 12)
    assert LANGUAGE_MODEL.results(model, lm.target_tokenizer, held_out, TrainingConfig(max_length=12)) == {
        "val_perplexity": round(measured, 2)
    }
    assert round(measured, 2) != round(measured, 3)  # the rounding is seen
    ((name, generate),) = LANGUAGE_MODEL.id_functions(runner).items()
    prompt = tf.constant([[4, 5]], tf.int32)
    assert name == "generate_ids"
    np.testing.assert_array_equal(generate(prompt)["output_tokens"].numpy(), runner.generate_ids(prompt).numpy())
    for settings, flags in [
        (dict(beam_size=2), "--beam"),
        (dict(beam_size=2, length_penalty=0.6), "--beam and --length-penalty"),
        (dict(length_penalty=0.0), "--length-penalty"),
        (dict(xla=True), "--xla"),
    ]:
        with pytest.raises(ValueError) as error:
            LANGUAGE_MODEL.runner(lm, **settings)
        assert str(error.value) == (
            f"{flags}: for translators only; a language model exports greedy generation in the graph loop "
            "(--max-tokens sets its length)."
        )
    assert task_of(lm) is LANGUAGE_MODEL and task_of(hesitant) is TRANSLATION
    assert require(hesitant, TRANSLATION, "here", "go") is hesitant
    with pytest.raises(ModelDirectoryError) as error:
        require(lm, TRANSLATION, "models/lm", "use `kformer generate`")
    assert str(error.value) == "models/lm: holds a language model, not a translator; use `kformer generate`."
    assert END_ID == 3  # the ids above: [PAD] [UNK] [START] [END], then the letters
