"""The decoder-only model end to end: train, load, generate (greedy and sampled), from Python and the CLI."""

import math
import string

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import count_decode_steps, run_fresh_python, to_numpy

import kformer
from kformer import Generator
from kformer.cli import main
from kformer.data.corpus import builtin_splits
from kformer.data.text import END_ID, PAD_ID, START_ID, Tokenizer
from kformer.inference.decoding import continue_prompts, sampler
from kformer.model_dir import TrainedModel
from kformer.training.config import TrainingConfig
from kformer.training.evaluation import perplexity
from kformer.training.jobs import train_language_model

LETTERS = list(string.ascii_lowercase)
PROMPTS = ["c d e", "a", "m n o p q r", "h i"]


@pytest.fixture(scope="module")
def alphabet_lm(tmp_path_factory):
    """A tiny model trained on runs of eight letters of the alphabet: its continuations are known.

    Trained well past the point where it gets them right, so that its choices are decisive
    (an undertrained one had near-ties that TFLite's float arithmetic broke the other way).
    """
    out = tmp_path_factory.mktemp("lm") / "alphabet"
    lines = [" ".join(LETTERS[i : i + 8]) for i in range(19)] * 20
    config = TrainingConfig(
        d_model=32,
        num_heads=2,
        num_layers=1,
        d_ff=64,
        dropout=0.0,
        target_vocab_size=100,
        max_length=12,
        batch_size=32,
        warmup_steps=50,
        learning_rate_scale=2.0,
        epochs=40,
        label_smoothing=0.0,
        jit_compile=False,
    )
    train_language_model(lines, out, config, verbose=0, valid_lines=VALID_LINES)
    return out


VALID_LINES = ["c d e f g h i j", "k l m n o p q r"]  # two of its training lines


@pytest.fixture(scope="module")
def random_lm():
    """Untrained, drawn from a fixed seed: its greedy runs (which some tests need long enough) do not depend on
    which tests ran before it."""
    keras.utils.set_random_seed(1)
    vocabulary = ["[PAD]", "[UNK]", "[START]", "[END]"] + LETTERS
    model = kformer.build_decoder_only(len(vocabulary), d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0)
    return TrainedModel(model, None, Tokenizer(vocabulary), {"kind": "language_model", "max_length": 16})


def test_a_trained_model_continues_its_text_exactly(alphabet_lm):
    trained = kformer.load(alphabet_lm)
    assert trained.kind == "language_model" and trained.source_tokenizer is None
    # Each training line is eight consecutive letters: the prompt's run goes on, then [END].
    assert Generator(trained).generate(PROMPTS) == ["f g h i j", "b c d e f g h", "s t", "j k l m n o"]


def numpy_perplexity(model, tokenizer, lines):
    """Each line alone, unpadded, through NumPy's log-softmax: [START] + tokens predicts tokens + [END]."""
    negative_log_likelihood, count = 0.0, 0
    for ids in tokenizer.tokenize(lines).to_list():
        logits = to_numpy(model(np.array([[START_ID] + ids]), training=False))[0].astype("float64")
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        negative_log_likelihood -= log_probs[np.arange(len(ids) + 1), ids + [END_ID]].sum()
        count += len(ids) + 1
    return np.exp(negative_log_likelihood / count)


def test_perplexity_is_exp_of_the_mean_token_log_likelihood_from_numpy(random_lm):
    lines = ["c d e", "a b c d e f g", "z"]
    expected = numpy_perplexity(random_lm.model, random_lm.target_tokenizer, lines)
    # A line of 20 tokens (21 with [END]) is over max_length=16: left out, as in training.
    with_long = [*lines, " ".join(LETTERS[:20])]
    assert perplexity(random_lm.model, random_lm.target_tokenizer, with_long, max_length=16, batch_size=2) == (
        pytest.approx(expected, rel=1e-5)
    )


def test_perplexity_of_a_model_sure_of_the_wrong_token_is_capped_at_e_to_the_50(random_lm):
    """Not exp(200), which a float overflows not far above: a mean negative log-likelihood over 50 counts as 50."""
    vocab_size = random_lm.target_tokenizer.vocab_size
    model = kformer.build_decoder_only(vocab_size, d_model=16, num_heads=2, num_layers=1, d_ff=32)
    model.get_layer("decoder").output_projection.bias.assign(np.eye(vocab_size, dtype="float32")[1] * 200)  # [UNK]
    assert perplexity(model, random_lm.target_tokenizer, ["c d e"], max_length=16) == math.exp(50)


def test_perplexity_is_measured_with_dropout_off(random_lm):
    keras.utils.set_random_seed(2)
    tokenizer = random_lm.target_tokenizer
    model = kformer.build_decoder_only(
        tokenizer.vocab_size, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.5
    )
    lines = ["c d e", "a b c d e f g", "z"]
    expected = numpy_perplexity(model, tokenizer, lines)
    assert perplexity(model, tokenizer, lines, max_length=16) == pytest.approx(expected, rel=1e-5)


def test_training_reports_the_perplexity_of_its_held_out_lines(alphabet_lm):
    trained = kformer.load(alphabet_lm)
    result = trained.config["result"]
    assert result["val_perplexity"] == pytest.approx(
        perplexity(trained.model, trained.target_tokenizer, VALID_LINES, max_length=12), abs=0.01
    )
    # The first letter is any of the 19 starts, the other eight tokens (with [END]) certain: exp(log(19) / 9).
    assert result["val_perplexity"] == pytest.approx(19 ** (1 / 9), abs=0.02)


def test_cached_and_uncached_generation_agree(random_lm):
    prompts = tf.constant([[5, 6, 7, 0], [8, 0, 0, 0], [9, 10, 11, 12]], tf.int32)
    for settings in [{}, {"temperature": 1.0, "seed": 3}, {"temperature": 0.7, "top_p": 0.9, "seed": 4}]:
        cached = Generator(random_lm, max_new_tokens=8, **settings)  # tf.function methods hold their object weakly
        plain = Generator(random_lm, max_new_tokens=8, use_cache=False, **settings)
        np.testing.assert_array_equal(cached.generate_ids(prompts), plain.generate_ids(prompts))


def test_a_generators_defaults_are_50_greedy_tokens_through_the_cache_and_seed_0(random_lm, monkeypatch):
    """Each default against its setting given: 50 new tokens, greedy (sampling at temperature 1 writes others),
    the cached step (`use_cache=False` never calls it) and, when sampling, seed 0 (seed 1 draws others)."""
    prompts = tf.constant([[5, 6, 7], [8, 0, 0]], tf.int32)
    steps = count_decode_steps(random_lm.model.get_layer("decoder"), monkeypatch)

    def ids(**settings):
        generator = Generator(random_lm, stop_token="[UNK]", **settings)  # held: its tf.function holds it weakly
        return to_numpy(generator.generate_ids(prompts))

    default = ids()
    assert default.shape == (2, 50) and steps  # traced through the cached step
    steps.clear()
    assert np.array_equal(ids(use_cache=False), default) and not steps
    assert np.array_equal(ids(max_new_tokens=50, temperature=0.0), default)
    assert not np.array_equal(ids(temperature=1.0), default)
    sampled = ids(temperature=1.0, seed=0)
    assert np.array_equal(ids(temperature=1.0), sampled) and not np.array_equal(ids(temperature=1.0, seed=1), sampled)


def test_a_prompt_over_the_models_length_is_read_up_to_it(random_lm):
    """random_lm's max_length is 16: a prompt of 20 letters is continued as its first 16 are."""
    letters = [4 + i % 26 for i in range(20)]
    generator = Generator(random_lm, max_new_tokens=6, stop_token="[UNK]")
    cut = to_numpy(generator.generate_ids(tf.constant([letters[:16]], tf.int32)))
    np.testing.assert_array_equal(to_numpy(generator.generate_ids(tf.constant([letters], tf.int32))), cut)


def test_temperature_towards_zero_is_greedy(alphabet_lm):
    greedy = Generator(alphabet_lm).generate(PROMPTS)
    assert Generator(alphabet_lm, temperature=1e-3, seed=5).generate(PROMPTS) == greedy


def continuation_logits(model, prompt, continuation):
    """The model's logits for each continuation token, from one teacher-forced pass (no cache, no loop)."""
    tokens = np.array([[START_ID, *prompt, *continuation]], "int32")
    logits = to_numpy(model(tokens))[0]  # (T, V)
    return logits[len(prompt) : len(prompt) + len(continuation)]


def test_top_k_never_leaves_the_k_most_likely_tokens(random_lm):
    prompt = [5, 6, 7]
    for seed in range(4):
        generator = Generator(random_lm, max_new_tokens=12, temperature=2.0, top_k=3, stop_token="[UNK]", seed=seed)
        output = [int(t) for t in to_numpy(generator.generate_ids(tf.constant([prompt])))[0] if t != PAD_ID]
        logits = continuation_logits(random_lm.model, prompt, output)
        for token, row in zip(output, logits, strict=True):
            row[[PAD_ID, START_ID]] = -np.inf  # no output tokens: never drawn
            assert token in np.argsort(row)[-3:]


def test_top_p_draws_only_from_the_nucleus_in_proportion():
    """p = (.35, .25, .15, .10, .08, .07), top_p .55: the nucleus is the two most likely tokens, drawn 35:25."""
    from kformer.inference.decoding import sampler

    probabilities = np.array([0.10, 0.35, 0.07, 0.25, 0.15, 0.08])  # the nucleus: ids 1 and 3
    logits = tf.constant(np.tile(np.log(probabilities), (4000, 1)), tf.float32)
    drawn = to_numpy(sampler(temperature=1.0, top_p=0.55, seed=3)(logits, tf.constant(0)))
    assert set(drawn.tolist()) == {1, 3}
    assert np.mean(drawn == 1) == pytest.approx(0.35 / 0.60, abs=0.03)


def test_the_same_seed_gives_the_same_sample_and_another_seed_another(random_lm):
    prompts = ["a b", "c", "d e f"] * 4

    def sample(seed):
        return Generator(random_lm, max_new_tokens=10, temperature=1.0, seed=seed).generate(prompts)

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)


def test_generation_stops_at_the_stop_token_and_the_budget(random_lm):
    prompt = tf.constant([[5, 6]], tf.int32)
    unlimited = Generator(random_lm, max_new_tokens=6, stop_token="[UNK]")  # a random model's greedy run
    full = [int(t) for t in to_numpy(unlimited.generate_ids(prompt))[0]]
    assert PAD_ID not in full[:3], full  # at least three tokens written, so the cuts below are real
    short = Generator(random_lm, max_new_tokens=3, stop_token="[UNK]")
    assert [int(t) for t in to_numpy(short.generate_ids(prompt))[0]] == full[:3]
    one = Generator(random_lm, max_new_tokens=1, stop_token="[UNK]")  # the least budget there is
    assert [int(t) for t in to_numpy(one.generate_ids(prompt))[0]] == full[:1]
    # Stop at the first token of the run that was not written before it (never the first one).
    at = next(i for i in range(1, 6) if full[i] not in full[:i])
    assert at < 5  # so stopping there must change the output
    stopping = Generator(random_lm, max_new_tokens=6, stop_token=random_lm.target_tokenizer.vocabulary[full[at]])
    assert [int(t) for t in to_numpy(stopping.generate_ids(prompt))[0]] == full[: at + 1] + [PAD_ID] * (5 - at)


def test_each_row_of_a_batch_stops_on_its_own_and_the_loop_with_the_last(alphabet_lm, monkeypatch):
    """Prompts "a" and "m n o", 4 new tokens, stop at "p": the second row stops at its first token and writes only
    [PAD] while the first runs its budget; the loop (cached by default) ends with the last token: 1 + 4 steps."""
    trained = kformer.load(alphabet_lm)
    decoder = trained.model.get_layer("decoder")
    steps = count_decode_steps(decoder, monkeypatch)

    def ids(text):
        return [trained.target_tokenizer.vocabulary.index(letter) for letter in text.split()]

    prompts = tf.constant([ids("a") + [PAD_ID] * 2, ids("m n o")], tf.int32)
    written = to_numpy(continue_prompts(decoder, prompts, 4, sampler(), stop_id=ids("p")[0])).tolist()
    assert written == [ids("b c d e"), ids("p") + [PAD_ID] * 3]
    assert len(steps) == 5


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"temperature": -1.0}, "temperature must be 0"),
        ({"temperature": float("nan")}, "temperature must be 0 .* got temperature=nan"),
        ({"temperature": float("inf")}, "temperature must be 0 .* got temperature=inf"),
        ({"top_k": -2}, "top_k must be a non-negative integer"),
        ({"top_p": 0.0}, "top_p must be in"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer"),
        ({"stop_token": "zz"}, "not in the model's vocabulary"),
    ],
)
def test_bad_settings_are_one_clear_error(random_lm, settings, message):
    with pytest.raises(ValueError, match=message):
        Generator(random_lm, **settings)


@pytest.mark.parametrize(
    "argv",
    [["translate", "hello"], ["evaluate", "--data", "builtin"], ["attention", "hello", "--out", "never.png"]],
)
def test_translator_commands_on_a_language_model_are_one_usage_error(alphabet_lm, tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    assert main([argv[0], "--model", str(alphabet_lm), *argv[1:]]) == 2
    assert capsys.readouterr().err == (
        f"kformer {argv[0]}: error: {alphabet_lm}: holds a language model, not a translator; "
        "for a language model use `kformer generate`.\n"
    )
    assert not (tmp_path / "never.png").exists()


@pytest.mark.parametrize(
    "request_, message",
    [
        (
            dict(formats=("ctranslate2",)),
            r"^ctranslate2: not exported for a language model; export it as saved_model, tflite, onnx\.$",
        ),
        (
            dict(formats=("onnx", "ctranslate2"), quantize=("int8",)),
            r"^--quantize applies to TFLite here \(a language model has no ctranslate2 export\); add tflite to "
            r"--formats\.$",
        ),
        (dict(formats=("tflite",), beam_size=4), "^--beam: for translators only; a language model exports greedy"),
        (dict(formats=("tflite",), length_penalty=0.0), "^--length-penalty: for translators only"),
        (dict(formats=("tflite",), xla=True, beam_size=2), "^--beam and --xla: for translators only"),
    ],
)
def test_an_export_a_language_model_cannot_have_is_refused_before_writing(alphabet_lm, tmp_path, request_, message):
    from kformer.deploy.export import ExportError, export

    with pytest.raises(ExportError, match=message):
        export(alphabet_lm, tmp_path / "deploy", verbose=False, **request_)
    assert list(tmp_path.iterdir()) == []


def test_a_language_models_export_quantizes_its_tflite_and_skips_ctranslate2(alphabet_lm, tmp_path, monkeypatch):
    """Asked for TFLite and CTranslate2 with --quantize, it goes on to write (here stopped at the disk check):
    CTranslate2 skipped, TFLite quantized."""
    import kformer.deploy.export
    from kformer.deploy.export import ExportError, export
    from kformer.model_dir import load

    def require_space(path, needed, what, error):
        raise error(f"asked for {needed} bytes")

    monkeypatch.setattr(kformer.deploy.export, "require_space", require_space)
    weight = 4 * load(alphabet_lm).model.count_params()  # TFLite's 3 models and the int8 variant: 4 bytes a weight
    with pytest.raises(ExportError, match=f"^asked for {4 * weight} bytes$"):
        export(alphabet_lm, tmp_path / "deploy", formats=("tflite", "ctranslate2"), quantize=("int8",), verbose=False)


def test_attention_maps_of_a_language_model_are_refused_by_name(random_lm):
    from kformer.teaching.plots import attention_weights

    with pytest.raises(ValueError, match="attention maps are drawn for a translator; this model is a language model"):
        attention_weights(random_lm, "a b c")


def test_a_translator_is_not_a_language_model(random_lm):
    from conftest import copy_task_model

    translator = copy_task_model()
    refusal = r"^Generator needs a language model \(kformer train --task lm\), got a "
    with pytest.raises(ValueError, match=refusal + r"translator\.$"):
        Generator(translator)
    with pytest.raises(ValueError, match=refusal + r"Transformer\.$"):
        Generator(translator.model)  # a Keras model, not a loaded model directory
    with pytest.raises(ValueError, match="use kformer.Generator"):
        kformer.Translator(random_lm)


def test_generate_from_the_command_line(alphabet_lm, capsys, monkeypatch):
    assert main(["generate", "--model", str(alphabet_lm), "c d e", "m n o p q r"]) == 0
    assert capsys.readouterr().out.splitlines() == ["f g h i j", "s t"]
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("a\nh i\n"))
    assert main(["generate", "--model", str(alphabet_lm), "--temperature", "0.5", "--top-k", "2", "--seed", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_train_lm_on_the_builtin_corpus_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "lm"
    tiny = "--d-model 16 --num-heads 2 --num-layers 1 --d-ff 32 --vocab-size 300 --max-length 12 --batch-size 32"
    argv = f"train --task lm --data builtin --out {out} --epochs 1 --steps-per-epoch 5 --no-xla {tiny}"
    assert main(argv.split()) == 0
    said = capsys.readouterr().out
    assert "Saved the language model" in said
    trained = kformer.load(out)
    assert trained.kind == "language_model"
    # Lines over 11 tokens (12 with [END]) are left out, counted by the model's own tokenizer and named as lines.
    lengths = trained.target_tokenizer.tokenize([s for _, s in builtin_splits()["train"]]).row_lengths()
    longer = int(np.sum(lengths.numpy() > 11))
    assert f"Sentences of up to 12 tokens: {longer:,} of 20,000 training lines (" in said and longer > 0
    assert main(["generate", "--model", str(out), "--max-tokens", "3", "el gato"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


@pytest.mark.slow  # moved from the default suite to keep it within 8 minutes
def test_export_of_a_language_model_runs_the_same_in_every_runtime(alphabet_lm, tmp_path):
    from kformer.deploy.export import export

    out = tmp_path / "deploy"
    manifest = export(alphabet_lm, out, max_new_tokens=8, verbose=False)
    assert manifest["kind"] == "language_model"
    assert {"tflite/generate_ids.tflite", "onnx/generate_ids.onnx", "saved_model/"} <= set(manifest["files"])
    # The default formats include CTranslate2, which has no decoder-only export here: said, not listed as written.
    assert manifest["formats"] == ["saved_model", "tflite", "onnx"]
    assert manifest["skipped"] == {"ctranslate2": "not exported for a language model"}
    assert not any(name.startswith("ctranslate2") for name in manifest["files"])
    trained = kformer.load(alphabet_lm)
    generator = Generator(trained, max_new_tokens=8)
    prompts = trained.target_tokenizer.tokenize(PROMPTS).to_tensor()  # right-padded with 0
    np.save(tmp_path / "prompts.npy", prompts.numpy())
    np.save(tmp_path / "ids.npy", to_numpy(generator.generate_ids(prompts)))
    expected = generator.generate(PROMPTS)
    run_fresh_python(
        f"""
        import numpy as np, onnxruntime, tensorflow as tf, tensorflow_text
        from ai_edge_litert.interpreter import Interpreter
        prompts, ids = np.load("prompts.npy"), np.load("ids.npy")
        loaded = tf.saved_model.load("{out}/saved_model/kformer/1")
        texts = loaded.signatures["serving_default"](texts=tf.constant({PROMPTS!r}))["continuations"].numpy()
        assert [t.decode() for t in texts] == {expected!r}, texts
        saved = loaded.signatures["generate_ids"](prompt_tokens=tf.constant(prompts))["output_tokens"].numpy()
        np.testing.assert_array_equal(saved, ids)
        interpreter = Interpreter(model_path="{out}/tflite/generate_ids.tflite")
        ops = {{op["op_name"] for op in interpreter._get_ops_details()}}
        assert not any(o.startswith("Flex") or o == "CUSTOM" for o in ops), ops
        tflite = next(iter(interpreter.get_signature_runner()(prompt_tokens=prompts).values()))
        np.testing.assert_array_equal(tflite, ids)
        session = onnxruntime.InferenceSession("{out}/onnx/generate_ids.onnx")
        np.testing.assert_array_equal(session.run(None, {{session.get_inputs()[0].name: prompts}})[0], ids)
        """,
        cwd=tmp_path,
    )


def test_prompts_utf8_cannot_encode_read_with_question_marks_and_what_is_not_strings_is_one_error(random_lm):
    """`Generator.generate` takes prompts as `Translator.translate` takes sentences (both through `utf8_batch`)."""
    generator = Generator(random_lm, max_new_tokens=6)
    assert generator.generate(["a\udcffb", "c"]) == generator.generate(["a?b", "c"])
    assert generator.generate([]) == []
    for prompts, message in (("a b", r"not one string: wrap it as \['a b'\]"), (["a", 3], "item 1 is a int: 3")):
        with pytest.raises(TypeError, match=message):
            generator.generate(prompts)


def test_the_sampler_alone_keeps_per_row_what_its_settings_say():
    """`sampler` on set probabilities, 400 draws a setting: greedy by default; `top_k` keeps the k most likely
    (the k-th included); `top_p` keeps the smallest set whose probability reaches it, each row its own
    (row 0's first token alone reaches 0.5 exactly; row 1 needs two); the default seed is 0. 400 draws miss a
    token of probability 0.05 with probability below 1e-8 (and the draws are seeded: the same each run)."""
    logits = tf.math.log(tf.constant([[0.5, 0.25, 0.15, 0.05, 0.05], [0.3, 0.25, 0.2, 0.15, 0.1]], tf.float32))

    def drawn(choose):  # {row: the tokens drawn in it}
        draws = np.array([to_numpy(choose(logits, t)) for t in range(400)])
        return [set(draws[:, row].tolist()) for row in range(2)]

    assert drawn(sampler()) == [{0}, {0}]
    assert drawn(sampler(temperature=1.0)) == [{0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}]
    assert drawn(sampler(temperature=1.0, top_k=2)) == [{0, 1}, {0, 1}]
    # Row 1's nucleus ends at 0.25, which row 0's must not take from it: each row has its own cut.
    assert drawn(sampler(temperature=1.0, top_p=0.5)) == [{0}, {0, 1}]
    assert drawn(sampler(temperature=1.0, top_p=0.75)) == [{0, 1}, {0, 1, 2}]
    first = [to_numpy(sampler(temperature=1.0)(logits, t)).tolist() for t in range(20)]
    assert first == [to_numpy(sampler(temperature=1.0, seed=0)(logits, t)).tolist() for t in range(20)]


@pytest.mark.parametrize(
    "lines, valid_lines, name",
    [("one long string", (), "lines"), (["a line", 3], (), "lines"), (["a line"], "held out", "valid_lines")],
)
def test_text_that_is_not_a_list_of_strings_is_one_clear_error_before_any_training(tmp_path, lines, valid_lines, name):
    with pytest.raises(kformer.DataError, match=rf"^{name} must be a list of strings, one line of text each\.$"):
        train_language_model(lines, tmp_path / "lm", verbose=0, valid_lines=valid_lines)
    assert not (tmp_path / "lm" / "model.keras").exists()
