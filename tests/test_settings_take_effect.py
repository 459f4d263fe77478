"""Each setting of a job or a command changes what it should: the loss, the schedule, the epochs run, the
tokens decoded, the scores printed. Checked against what the setting means (the formula, sacreBLEU called
apart on cased, punctuated text, the rule early stopping follows), not against where the setting is stored.
"""

import csv
import json
import re
import time

import keras
import numpy as np
import pytest
import sacrebleu
from conftest import SMALL_SETTINGS, VOCAB

from kformer import Translator, build_transformer
from kformer.cli import _load_pairs, main
from kformer.data.text import END_ID, Tokenizer
from kformer.model_dir import TrainedModel, load
from kformer.training import evaluation, jobs
from kformer.training.config import TrainingConfig
from kformer.training.evaluation import BestTranslations, evaluate
from kformer.training.objectives import compile_for_training

TINY = "--d-model 16 --num-heads 2 --num-layers 1 --d-ff 32 --vocab-size 60 --max-length 8 --no-xla"


def letter_pairs(path, sources="abcdefghijkl", targets="mnopqrstuvwx"):
    """Lines "a m<TAB>m a", each source letter with each target letter, twice: a pair file of which 2% of the
    sources are held out for validation and 2% for test."""
    lines = [f"{a} {b}\t{b} {a}" for a in sources for b in targets] * 2
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def history(out):
    with open(out / "training" / "history.csv", newline="") as file:
        return list(csv.DictReader(file))


@pytest.fixture(scope="module")
def random_translator(tmp_path_factory):
    """An untrained translator's model directory (letters "a".."l"): greedy and beam search disagree on it."""
    keras.utils.set_random_seed(5)
    model = build_transformer(len(VOCAB), len(VOCAB), d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0)
    out = tmp_path_factory.mktemp("random") / "model"
    TrainedModel(model, Tokenizer(VOCAB), Tokenizer(VOCAB), {"kind": "translator", "max_length": 12}).save(out)
    return out


LETTER_SOURCES = ["a b c", "d e f g h", "i j k l a b", "c c d", "l k j i h g f", "e"]


@pytest.mark.slow
def test_the_beam_flag_of_kformer_translate_reaches_the_decoder(random_translator, capsys):
    """`--beam 4` prints what `Translator(beam_size=4)` gives, which here is not greedy's."""
    trained = load(random_translator)
    beam = Translator(trained, beam_size=4).translate(LETTER_SOURCES)
    assert beam != Translator(trained).translate(LETTER_SOURCES)  # the flag can be seen
    assert main(["translate", "--model", str(random_translator), "--beam", "4", *LETTER_SOURCES]) == 0
    assert capsys.readouterr().out.splitlines() == beam


# Cased, punctuated hypotheses: lowercasing, tokenization and chrF's word order each change the scores.
HYPOTHESES = {
    "s1": "El gato negro duerme .",
    "s2": "¿donde está la estación?",
    "s3": "Tom no lo sabe, ¿verdad?",
    "s4": "Hace 3.5 grados en MADRID.",
    "s5": "Me gusta el té",
    "s6": "¡Qué día tan bonito!",
}
REFERENCES = {
    "s1": "El gato negro duerme.",
    "s2": "¿Dónde está la estación?",
    "s3": "Tom no lo sabe, ¿verdad?",
    "s4": "Hace 3,5 grados en Madrid.",
    "s5": "Me gusta el té.",
    "s6": "¡qué día tan bonito!",
}


class CannedTranslator:
    """Stands in for `Translator` in `kformer.training.evaluation`: the hypotheses above, whatever the model."""

    def __init__(self, *args, **kwargs):
        pass

    def translate(self, sources, batch_size=64):
        return [HYPOTHESES[source] for source in sources]


def sacrebleu_scores(lowercase=False):
    hypotheses, references = list(HYPOTHESES.values()), [list(REFERENCES.values())]
    bleu = sacrebleu.metrics.BLEU(lowercase=lowercase).corpus_score(hypotheses, references).score
    return bleu, sacrebleu.metrics.CHRF().corpus_score(hypotheses, references).score


def test_kformer_evaluate_gives_sacrebleus_default_scores_and_lowercase_only_when_asked(
    random_translator, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(evaluation, "Translator", CannedTranslator)
    data = tmp_path / "test.tsv"
    data.write_text("".join(f"{source}\t{reference}\n" for source, reference in REFERENCES.items()), encoding="utf-8")
    printed = {}
    for flags in ([], ["--lowercase"]):
        assert main(["evaluate", "--model", str(random_translator), "--data", str(data), "--json", *flags]) == 0
        printed[bool(flags)] = json.loads(capsys.readouterr().out)
    (cased_bleu, chrf), (lowercase_bleu, _) = sacrebleu_scores(), sacrebleu_scores(lowercase=True)
    assert cased_bleu < lowercase_bleu - 5  # the setting matters on this text
    for lowercase, bleu, exact in ((False, cased_bleu, 1), (True, lowercase_bleu, 2)):
        scores = printed[lowercase]
        assert scores["bleu"] == pytest.approx(bleu, abs=0.006) and scores["chrf"] == pytest.approx(chrf, abs=0.006)
        assert scores["exact_match"] == pytest.approx(100 * exact / 6, abs=0.006)  # s3; and s6 lowercased


def test_exact_match_is_the_percentage_of_hypotheses_equal_to_their_reference_to_two_decimals():
    assert evaluation.score(["a b"], ["a b"])["exact_match"] == 100.0  # one sentence, right
    assert evaluation.score(["a", "b", "c"], ["a", "x", "y"])["exact_match"] == 33.33
    with pytest.raises(ValueError, match=r"^2 hypotheses but 1 references\.$"):
        evaluation.score(["a", "b"], ["a"])


def test_evaluate_from_python_is_cased_unless_asked_and_translates_in_the_batches_asked(monkeypatch):
    asked = []

    class Recording(CannedTranslator):
        def translate(self, sources, batch_size=64):
            asked.append(batch_size)
            time.sleep(0.25)  # the time the result reports: measured, in tenths of a second
            return super().translate(sources, batch_size)

    monkeypatch.setattr(evaluation, "Translator", Recording)
    pairs = list(REFERENCES.items())
    for lowercase, given in ((False, {}), (True, {"lowercase": True})):
        scores = evaluate(None, pairs, batch_size=2, **given)
        bleu, chrf = sacrebleu_scores(lowercase=lowercase)
        assert scores["bleu"] == pytest.approx(bleu, abs=0.006) and scores["chrf"] == pytest.approx(chrf, abs=0.006)
        (row,) = scores["by_length"]  # every source is one word: one row, the same scores
        assert scores["seconds"] in (0.2, 0.3, 0.4, 0.5)
        assert (row["bleu"], row["chrf"], row["n"]) == (scores["bleu"], scores["chrf"], 6)
    assert asked == [2, 2]


def test_each_epochs_validation_scores_are_sacrebleus_cased_scores(monkeypatch):
    """The val_bleu and val_chrf that keep-best and early stopping read: sacreBLEU's defaults, case kept."""
    monkeypatch.setattr(evaluation, "Translator", CannedTranslator)
    model = build_transformer(len(VOCAB), len(VOCAB), d_model=8, num_heads=2, num_layers=1, d_ff=8)
    compile_for_training(model, 8)
    keeper = BestTranslations(list(REFERENCES.items()), Tokenizer(VOCAB), Tokenizer(VOCAB), 12)
    keeper.set_model(model)
    logs = {}
    keeper.on_epoch_end(0, logs)
    bleu, chrf = sacrebleu_scores()
    assert logs == {"val_bleu": pytest.approx(bleu, abs=0.006), "val_chrf": pytest.approx(chrf, abs=0.006)}


def tiny_translator(ema=None):
    keras.utils.set_random_seed(3)
    model = build_transformer(len(VOCAB), len(VOCAB), d_model=8, num_heads=2, num_layers=1, d_ff=8, dropout=0.0)
    compile_for_training(model, 8, warmup_steps=1, learning_rate_scale=50.0, ema=ema, jit_compile=False)
    return model


class Snapshot(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        self.weights = self.model.get_weights()


def test_with_a_moving_average_each_epoch_translates_the_average_and_training_goes_on_from_its_own(monkeypatch):
    seen = []

    class Recording(CannedTranslator):
        def __init__(self, trained, **kwargs):
            self.model = trained.model

        def translate(self, sources, batch_size=64):
            seen.append(self.model.get_weights())
            return super().translate(sources, batch_size)

    monkeypatch.setattr(evaluation, "Translator", Recording)
    for ema in (0.5, None):
        model = tiny_translator(ema)
        keeper = BestTranslations(list(REFERENCES.items()), Tokenizer(VOCAB), Tokenizer(VOCAB), 12)
        before, after = Snapshot(), Snapshot()  # the weights at the epoch's end, before the keeper and after it
        tokens = np.random.default_rng(0).integers(4, len(VOCAB), size=(16, 5)).astype("int32")
        model.fit([tokens, tokens], tokens, batch_size=4, epochs=1, verbose=0, callbacks=[before, keeper, after])
        translated = seen.pop()
        moved = max(np.abs(a - b).max() for a, b in zip(translated, before.weights, strict=True))
        assert moved > 1e-3 if ema else moved == 0.0  # the average is what is scored, and only with ema
        for now, raw in zip(after.weights, before.weights, strict=True):
            np.testing.assert_array_equal(now, raw)  # training goes on from its own weights


def test_a_first_epoch_of_chrf_0_is_kept_and_a_run_stopped_before_any_epoch_ends_as_it_is(monkeypatch):
    class Nothing(CannedTranslator):  # no character in common with any reference: chrF 0
        def translate(self, sources, batch_size=64):
            return ["" for _ in sources]

    monkeypatch.setattr(evaluation, "Translator", Nothing)
    model = tiny_translator()
    first = model.get_weights()
    keeper = BestTranslations(list(REFERENCES.items()), Tokenizer(VOCAB), Tokenizer(VOCAB), 12)
    keeper.set_model(model)
    keeper.on_train_end()  # stopped before its first epoch ended: the model as it is
    logs = {}
    keeper.on_epoch_end(0, logs)
    assert logs["val_chrf"] == 0.0
    model.set_weights([w + 1.0 for w in first])
    keeper.on_train_end()
    for kept, expected in zip(model.get_weights(), first, strict=True):
        np.testing.assert_array_equal(kept, expected)  # the one epoch scored is the best, chrF 0 or not


def test_each_new_best_is_written_with_its_record_and_a_tie_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(evaluation, "Translator", CannedTranslator)  # the same chrF every epoch
    model = tiny_translator()
    path = tmp_path / "best.weights.h5"
    keeper = BestTranslations(list(REFERENCES.items()), Tokenizer(VOCAB), Tokenizer(VOCAB), 12, path)
    keeper.set_model(model)
    first = model.get_weights()
    logs = {}
    keeper.on_epoch_end(0, logs)
    assert json.loads((tmp_path / "best.json").read_text()) == {"chrf": logs["val_chrf"]}
    model.set_weights([w + 1.0 for w in first])
    keeper.on_epoch_end(1, {})  # a tie: not better, so neither kept nor written
    written = tiny_translator()
    written.load_weights(path)
    for got, want in zip(written.get_weights(), first, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.filterwarnings("ignore::kformer.inference.translator.OutputLimitWarning")  # expected: no [END]
def test_each_epochs_translations_stop_at_the_models_max_length():
    """Validation translates with the run's max_length: a model that never writes [END] stops there."""
    model = tiny_translator()
    model.get_layer("decoder").output_projection.bias.assign(np.where(np.arange(len(VOCAB)) == END_ID, -1e9, 0.0))
    pairs = [("a b", "a b"), ("c", "c d")]
    scores = {}
    for max_length in (12, 40):
        trained = TrainedModel(model, Tokenizer(VOCAB), Tokenizer(VOCAB), {"max_length": max_length})
        hypotheses = Translator(trained, xla=False).translate([source for source, _ in pairs])
        scores[max_length] = evaluation.score(hypotheses, [target for _, target in pairs])["chrf"]
    assert scores[12] != scores[40]
    keeper = BestTranslations(pairs, Tokenizer(VOCAB), Tokenizer(VOCAB), 12)
    keeper.set_model(model)
    logs = {}
    keeper.on_epoch_end(0, logs)
    assert logs["val_chrf"] == scores[12]


@pytest.mark.slow
def test_a_run_given_no_budget_trains_ten_epochs_to_a_rate_of_zero_on_the_loss_it_was_given(tmp_path):
    """No --epochs and no --minutes: 10 epochs, and the budget schedule falls to zero at their last step;
    the label smoothing and gradient clipping asked for are those the model trains with."""
    pairs = [line.split("\t") for line in letter_pairs(tmp_path / "pairs.tsv").read_text().splitlines()]
    config = TrainingConfig(
        **SMALL_SETTINGS, steps_per_epoch=2, label_smoothing=0.3, clipnorm=0.5, jit_compile=False, batch_size=16
    )
    model = jobs.train_translator({"train": pairs}, tmp_path / "model", config, verbose=0).model
    assert int(model.optimizer.iterations.numpy()) == 20 and len(history(tmp_path / "model")) == 10
    schedule = keras.optimizers.schedules.deserialize(model.optimizer.get_config()["learning_rate"])
    peak = 32**-0.5 * 100**-0.5  # the paper's rate at the top of a warmup of 100 steps (shortened to 2 here)
    expected = [peak * min(1.0, step / 2) * max(0.0, 1 - step / 20) for step in range(1, 21)]
    assert [float(schedule(step)) for step in range(20)] == pytest.approx(expected, rel=1e-5, abs=1e-12)
    assert float(model.optimizer.learning_rate) == 0.0  # where the run ended

    labels, logits = np.array([[5, 9, 3, 0]]), np.random.default_rng(0).standard_normal((1, 4, 300)).astype("float32")
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    target = 0.7 * np.eye(300)[labels] + 0.3 / 300
    expected_loss = -(target * log_probs).sum(-1)[0, :3].mean()  # the three real tokens
    assert float(model.loss(labels, logits)) == pytest.approx(expected_loss, rel=1e-5)
    assert model.optimizer.clipnorm == 0.5


@pytest.mark.slow
@pytest.mark.parametrize("patience", [1, 3])
def test_early_stopping_stops_patience_epochs_after_the_best_validation_chrf(tmp_path, monkeypatch, patience):
    """The validation chrF rises for two epochs, then never again: `--patience P` stops the run after
    epoch 2 + P (Keras' rule: P epochs without a better score), out of the 20 asked for."""
    scores = iter([10.0, 20.0] + [15.0] * 20)
    monkeypatch.setattr(BestTranslations, "_translations_score", lambda self: {"chrf": next(scores), "bleu": 1.0})
    data, out = letter_pairs(tmp_path / "pairs.tsv"), tmp_path / "model"
    argv = f"--quiet train --data {data} --out {out} --epochs 20 --steps-per-epoch 1 --patience {patience} {TINY}"
    assert main(argv.split()) == 0
    assert json.loads((out / "config.json").read_text())["result"]["epochs_run"] == 2 + patience
    assert [float(row["val_chrf"]) for row in history(out)] == [10.0, 20.0] + [15.0] * patience


@pytest.mark.slow
def test_the_end_of_run_report_scores_the_test_split(tmp_path, capsys):
    """`kformer train` ends with the scores of the test split it held out (not of the validation split it
    selected the weights on), recomputed here from the saved model."""
    data = letter_pairs(tmp_path / "pairs.tsv", "abcdefghijklmnopqrst", "mnopqrstuvwxyzABCDEF")  # 20 valid, 4 test
    out = tmp_path / "model"
    assert main(f"train --data {data} --out {out} --epochs 1 --steps-per-epoch 3 {TINY}".split()) == 0
    printed = re.search(
        r"test split: BLEU ([\d.]+)  chrF ([\d.]+)  exact match ([\d.]+)%  \((\d+) sentences", capsys.readouterr().out
    ).groups()
    splits, trained = _load_pairs(str(data)), load(out)
    test, valid = (evaluate(trained, splits[name], xla=False) for name in ("test", "valid"))  # TINY: --no-xla
    expected = (f"{test['bleu']:.1f}", f"{test['chrf']:.1f}", f"{test['exact_match']:.1f}", str(test["n"]))
    assert printed == expected
    assert (valid["chrf"], valid["n"]) != (test["chrf"], test["n"])  # the report could tell the two apart
