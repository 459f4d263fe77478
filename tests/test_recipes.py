"""The recipe's choices around model.fit: keeping the best translator, and starting from a trained one."""

import json

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf
from conftest import VOCAB, copy_task_model, train_command

from kformer import Translator
from kformer.cli import main
from kformer.data.corpus import builtin_splits
from kformer.data.text import Tokenizer
from kformer.model import Transformer
from kformer.model_dir import RunDirectory, load
from kformer.training.callbacks import Backup, CheckpointAverage
from kformer.training.config import ConfigError, TrainingConfig
from kformer.training.evaluation import BestTranslations
from kformer.training.jobs import _callbacks, train_translator
from kformer.training.objectives import compile_for_training

LETTERS = VOCAB[4:]


def letter_pairs(count, seed):
    rng = np.random.default_rng(seed)
    sentences = [" ".join(rng.choice(LETTERS, rng.integers(2, 7))) for _ in range(count)]
    return [(s, s) for s in sentences]


@pytest.mark.slow  # moved from the default suite to keep it within 8 minutes
def test_the_best_translating_weights_are_kept_not_the_last_even_across_a_restart(tmp_path):
    trained = copy_task_model()  # copies letter sequences: chrF 100 on copy pairs
    model = trained.model
    pairs = letter_pairs(40, seed=3)
    settings = (pairs, trained.source_tokenizer, trained.target_tokenizer, 12, tmp_path / "best.weights.h5")
    keeper = BestTranslations(*settings)
    keeper.set_model(model)
    good = model.get_weights()
    sources = [s for s, _ in pairs]
    good_translations = Translator(trained, xla=False).translate(sources)
    logs = [{}, {}]
    keeper.on_epoch_end(0, logs[0])
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(0, 1.0, w.shape).astype(w.dtype) for w in good])  # a ruined later epoch
    keeper.on_epoch_end(1, logs[1])
    references = [t for _, t in pairs]
    assert logs[0]["val_chrf"] == pytest.approx(sacrebleu.corpus_chrf(good_translations, [references]).score, abs=0.01)
    assert logs[0]["val_chrf"] > 95.0 and logs[1]["val_chrf"] < 50.0
    keeper.on_train_end()
    for kept, expected in zip(model.get_weights(), good, strict=True):
        np.testing.assert_array_equal(kept, expected)
    assert Translator(trained, xla=False).translate(sources) == good_translations
    model.set_weights([np.zeros_like(w) for w in good])
    model.load_weights(tmp_path / "best.weights.h5")  # the file holds the best weights too
    for kept, expected in zip(model.get_weights(), good, strict=True):
        np.testing.assert_array_equal(kept, expected)

    # Killed after epoch 0 and resumed: the new process's keeper must beat the best from before the restart.
    assert json.loads((tmp_path / "best.json").read_text()) == {"chrf": logs[0]["val_chrf"]}
    model.set_weights([w + rng.normal(0, 1.0, w.shape).astype(w.dtype) for w in good])
    resumed = BestTranslations(*settings)
    resumed.set_model(model)
    resumed.resume()
    after_restart = {}
    resumed.on_epoch_end(2, after_restart)
    resumed.on_train_end()
    assert after_restart["val_chrf"] < 50.0 and resumed.best == logs[0]["val_chrf"]
    for kept, expected in zip(model.get_weights(), good, strict=True):  # read back from best.weights.h5
        np.testing.assert_array_equal(kept, expected)
    # Early stopping counts epochs that do not beat the whole run's best, not the best since the restart.
    backup = Backup(tmp_path / "backup")
    run = RunDirectory(tmp_path)
    callbacks = _callbacks(run, TrainingConfig(patience=2), resumed, None, backup, None, chief=True, own=[])
    stopper = next(c for c in callbacks if isinstance(c, keras.callbacks.EarlyStopping))
    stopper.set_model(model)
    stopper.on_train_begin()
    for epoch in (3, 4):
        stopper.on_epoch_end(epoch, {"val_chrf": resumed.best - 1.0})
    assert model.stop_training


def test_a_sample_of_the_validation_split_spans_it():
    """Tatoeba's file is sorted by length: the first 1,000 validation pairs would be the shortest."""
    pairs = sorted(letter_pairs(3500, seed=5), key=lambda pair: len(pair[0]))
    keeper = BestTranslations(pairs, None, None, 12, sentences=1000)
    assert len(keeper.sources) == 1000
    mean = np.mean([len(s) for s, _ in pairs])
    assert np.mean([len(s) for s in keeper.sources]) == pytest.approx(mean, rel=0.05)
    assert len(BestTranslations(pairs, None, None, 12).sources) == 1000  # the default: 1,000 sentences an epoch
    assert len(BestTranslations(pairs[:1000], None, None, 12).sources) == 1000


@pytest.mark.slow  # 33 s: trains twice
def test_with_a_moving_average_the_average_is_scored_and_kept():
    trained = copy_task_model()
    model = trained.model
    compile_for_training(model, 32, 0.0, 10, learning_rate_scale=1e-3, ema=0.9, jit_compile=False)  # barely moves
    source = np.array([[4, 5, 6, 0]] * 40, "int32")
    decoder = np.array([[2, 4, 5, 6]] * 40, "int32")
    labels = np.array([[4, 5, 6, 3]] * 40, "int32")
    model.fit([source, decoder], labels, epochs=1, steps_per_epoch=5, batch_size=8, verbose=0)
    average = model.get_weights()  # fit put the average (of good copying weights) into the model
    rng = np.random.default_rng(1)
    ruined = [w + rng.normal(0, 1.0, w.shape).astype(w.dtype) for w in average]
    model.set_weights(ruined)  # the raw weights of a bad last step; the optimizer still holds the average
    keeper = BestTranslations(letter_pairs(20, seed=4), trained.source_tokenizer, trained.target_tokenizer, 12)
    keeper.set_model(model)
    logs = {}
    keeper.on_epoch_end(0, logs)
    assert logs["val_chrf"] > 90.0  # the average translated, not the ruined raw weights
    for now, raw in zip(model.get_weights(), ruined, strict=True):
        np.testing.assert_array_equal(now, raw)  # training goes on from its own weights
    keeper.on_train_end()
    for kept, expected in zip(model.get_weights(), average, strict=True):
        np.testing.assert_array_equal(kept, expected)


def test_the_last_checkpoints_are_averaged_at_the_end():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), "mse")
    seen = {}  # step -> weights, recorded independently of the callback under test
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: seen.update(
            {int(model.optimizer.iterations.numpy()): model.get_weights()}
        )
    )
    x = np.random.default_rng(0).standard_normal((40, 3)).astype("float32")
    model.fit(x, x[:, :2] * 3.0, batch_size=4, epochs=1, verbose=0, callbacks=[record, CheckpointAverage(3, 4)])
    # 10 steps: checkpoints at steps 4 and 8 and at the end; the last 3 of them are averaged.
    expected = [np.mean([seen[step][i] for step in (4, 8, 10)], axis=0) for i in range(2)]
    for got, want, last in zip(model.get_weights(), expected, seen[10], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert not np.allclose(got, last)


def test_an_average_is_kept_only_if_it_translates_better():
    trained = copy_task_model()
    model = trained.model
    good = model.get_weights()
    ruined = [w + np.random.default_rng(2).normal(0, 1.0, w.shape).astype(w.dtype) for w in good]
    keeper = BestTranslations(letter_pairs(20, seed=6), trained.source_tokenizer, trained.target_tokenizer, 12)
    keeper.set_model(model)
    model.set_weights(ruined)
    keeper.on_epoch_end(0, {})
    assert keeper.consider(good) > 90.0  # better than the ruined epoch: kept
    keeper.consider(ruined)  # worse: not kept
    for now, raw in zip(model.get_weights(), ruined, strict=True):
        np.testing.assert_array_equal(now, raw)  # considering leaves the model as it was
    keeper.on_train_end()
    for kept, expected in zip(model.get_weights(), good, strict=True):
        np.testing.assert_array_equal(kept, expected)


@pytest.mark.parametrize("record", [0.0, 40.0])  # a record of chrF 0 (an untrained model's) is a record too
def test_a_resumed_run_that_never_beats_its_record_ends_with_the_records_weights_and_its_own_step(tmp_path, record):
    """What `resume` reads, `on_train_end` puts back: the best weights of before the restart, and the optimizer
    state of the run as it stands (its step count), not the one saved with those weights."""
    keras.utils.set_random_seed(0)
    model = Transformer(len(VOCAB), len(VOCAB), d_model=8, num_heads=2, num_layers=1, d_ff=8)
    compile_for_training(model, 8, jit_compile=False)
    model.optimizer.build(model.trainable_variables)
    path = tmp_path / "best.weights.h5"
    keeper = BestTranslations(letter_pairs(4, seed=7), Tokenizer(VOCAB), Tokenizer(VOCAB), 12, path)
    (tmp_path / "best.json").write_text(json.dumps({"chrf": record}))
    keeper.resume()
    assert keeper.best == -1.0  # a record without its weights: nothing to go back to
    best = model.get_weights()
    model.save_weights(path)  # the record's weights, saved at step 0
    model.set_weights([w + 1.0 for w in best])  # where the resumed run is now
    model.optimizer.iterations.assign(7)
    keeper.set_model(model)
    keeper.resume()
    assert keeper.best == record
    keeper.on_train_end()  # no epoch ran: nothing beat the record
    for kept, expected in zip(model.get_weights(), best, strict=True):
        np.testing.assert_array_equal(kept, expected)
    assert int(model.optimizer.iterations.numpy()) == 7


@pytest.mark.slow
def test_a_shared_vocabulary_run_with_checkpoint_averaging(tmp_path):
    out = tmp_path / "shared"
    assert (
        main(train_command(out, "--epochs", "2", "--shared-vocab", "--average", "3", "--backup-steps", "40")[3:]) == 0
    )
    vocabulary = (out / "source_vocab.txt").read_text(encoding="utf-8").split("\n")
    assert (out / "target_vocab.txt").read_text(encoding="utf-8").split("\n") == vocabulary
    assert {"the", "el"} <= set(vocabulary)  # learned from both languages
    trained = load(out)
    assert isinstance(trained.model, Transformer) and trained.model.get_config()["share_embeddings"]
    assert trained.model.get_layer("encoder").embedding is trained.model.get_layer("decoder").embedding
    result = json.loads((out / "config.json").read_text())["result"]
    assert 0.0 <= result["val_chrf_average"] <= result["val_chrf_kept"]  # judged like an epoch; the best kept
    splits = builtin_splits()
    assert len(Translator(trained).translate([s for s, _ in splits["test"][:5]])) == 5


def write_pairs(path, pairs):
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


@pytest.mark.slow
def test_fine_tuning_starts_from_the_model_and_keeps_its_vocabularies(clean_run, tmp_path):
    base, _ = clean_run
    new_words = [("Zürich is far 🙂", "Zúrich está lejos 🙂"), ("the qwertyuiop sleeps", "el qwertyuiop duerme")]
    data = write_pairs(tmp_path / "new.tsv", builtin_splits()["train"][:400] + new_words * 20)
    out = tmp_path / "tuned"
    # A learning rate of nearly zero: after training, the weights must still be the base model's.
    argv = train_command(out, "--init-from", str(base), "--epochs", "1", "--learning-rate-scale", "1e-9")[3:]
    argv[argv.index("--data") + 1] = str(data)
    assert main(argv) == 0
    for name in ("source_vocab.txt", "target_vocab.txt"):
        assert (out / name).read_bytes() == (base / name).read_bytes()
    config = json.loads((out / "config.json").read_text())["training"]
    assert config["d_model"] == 32 and config["init_from"] == str(base)
    tuned = load(out)
    for a, b in zip(tuned.model.get_weights(), load(base).model.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert len(Translator(tuned).translate(["Zürich is far 🙂", "the qwertyuiop sleeps"])) == 2
    # Words the base model never saw fall to pieces of its vocabulary, or to [UNK] (a character it lacks).
    vocabulary = (base / "source_vocab.txt").read_text(encoding="utf-8").splitlines()
    assert not {"sleepwalker", "qwertyuiop", "q", "🙂"} & set(vocabulary)
    ids = tuned.source_tokenizer.tokenize(["sleepwalker", "qwertyuiop", "🙂"]).to_list()
    pieces = [[vocabulary[i] for i in row] for row in ids]
    assert len(pieces[0]) > 1 and "".join(p.removeprefix("##") for p in pieces[0]) == "sleepwalker", pieces
    assert pieces[1:] == [["[UNK]"], ["[UNK]"]], pieces


@pytest.mark.slow
def test_fine_tuning_learns_the_new_pairs(clean_run, tmp_path):
    """At the normal rate the tuned model moves towards the new data: its loss there falls below the base model's."""
    base, _ = clean_run
    splits = builtin_splits()
    shifted = [(s, "lo " + t[3:] if t[:3] in ("el ", "la ") else t) for s, t in splits["train"][:2000]]
    data = write_pairs(tmp_path / "shifted.tsv", shifted)
    out = tmp_path / "tuned"
    argv = train_command(out, "--init-from", str(base), "--epochs", "2")[3:]
    argv[argv.index("--data") + 1] = str(data)
    assert main(argv) == 0
    probe = [s for s, t in shifted[:200] if t.startswith("lo ")]
    translations = Translator(out).translate(probe)
    assert sum(t.startswith("lo ") for t in translations) > 0.8 * len(probe)
    assert sum(t.startswith("lo ") for t in Translator(base).translate(probe)) == 0


def test_init_from_refuses_a_flag_that_asks_for_another_architecture(tmp_path, capsys):
    base = tmp_path / "base"
    (base / "training").mkdir(parents=True)  # what the check reads; a wrong flag stops before any model loads
    (base / "config.json").write_text(json.dumps({"kind": "translator", "training": {"d_model": 32, "num_layers": 1}}))
    argv = train_command(tmp_path / "out", "--init-from", str(base), "--epochs", "1", "--num-layers", "2")[3:]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"kformer train: error: --num-layers asks for 2, but the model in {base} has 1: fine-tuning "
        "(--init-from) keeps the architecture it starts from; leave it out.\n"
    )
    assert not (tmp_path / "out").exists()


def test_init_from_refuses_another_architecture_from_python_too(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"kind": "translator", "training": {"d_model": 32, "num_layers": 1}}))
    config = TrainingConfig(init_from=str(base), num_layers=3, epochs=1)  # 2 is the default: not a request
    with pytest.raises(ConfigError, match=r"num_layers asks for 3, but the model in .* has 1: fine-tuning"):
        train_translator(builtin_splits(), tmp_path / "out", config, verbose=0)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "tf_config, chief",
    [
        (None, True),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}, True),
        ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}, False),
        ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}, True),
        ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}, False),
    ],
)
def test_only_the_chief_of_a_cluster_holds_and_writes_the_model_directory(monkeypatch, tf_config, chief):
    from kformer.training.jobs import is_chief

    if tf_config is not None:
        monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    assert is_chief(TrainingConfig(strategy="multiworker")) is chief
    assert is_chief(TrainingConfig()) is True  # one process: it writes


@pytest.mark.parametrize("task, writes", [(0, True), (1, False)])
def test_fine_tuning_copies_the_vocabularies_into_out_on_the_chief_only(tmp_path, monkeypatch, task, writes):
    """--init-from under multiworker: each worker starts from the base model and its tokenizers; only the chief
    (worker 0) writes --out, which the other workers share."""
    from kformer import TrainedModel
    from kformer.training.jobs import _starting_point

    copy = copy_task_model()
    architecture = dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, norm_first=False, tie_embeddings=False)
    recorded = {"kind": "translator", "max_length": 12, "training": architecture}
    TrainedModel(copy.model, copy.source_tokenizer, copy.target_tokenizer, recorded).save(tmp_path / "base")
    cluster = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": task}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    out = tmp_path / "out"
    out.mkdir()
    base, config = _starting_point(TrainingConfig(init_from=str(tmp_path / "base"), strategy="multiworker"), out)
    assert base.source_tokenizer.vocabulary == base.target_tokenizer.vocabulary == VOCAB
    assert (config.d_model, config.num_heads, config.source_vocab_size) == (32, 4, len(VOCAB))
    assert sorted(path.name for path in out.iterdir()) == (["source_vocab.txt", "target_vocab.txt"] if writes else [])


def test_init_from_needs_a_trained_translator(tmp_path, capsys):
    argv = train_command(tmp_path / "out", "--init-from", str(tmp_path / "missing"), "--epochs", "1")[3:]
    assert main(argv) == 2
    assert "missing: no such model directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--ema", "1.5"], "--ema is a decay between 0 and 1"),
        (["--batch-tokens", "0"], "--batch-tokens must be"),
        (["--average", "1"], "--average is a number of checkpoints, 2 or more"),
        (["--epochs", "0"], "--epochs must be a positive integer, not 0."),
        (["--steps-per-epoch", "0"], "--steps-per-epoch must be a positive integer, not 0."),
        (["--minutes", "-1"], "--minutes must be a positive number, not -1.0."),
        (["--minutes", "nan"], "--minutes must be a positive number, not nan."),
        (["--num-heads", "3"], "--num-heads must divide d_model (32) into equal heads, not 3."),
        (["--batch-size", "0"], "--batch-size must be a positive integer, not 0."),
        (["--max-length", "0"], "--max-length must be a positive integer, not 0."),
        (["--vocab-size", "0"], "--vocab-size must be a positive integer, not 0."),
        (["--warmup-steps", "0"], "--warmup-steps must be a positive integer, not 0."),
        (["--dropout", "1"], "--dropout is a rate from 0 up to (not including) 1, not 1.0."),
        (["--label-smoothing", "-0.1"], "--label-smoothing is a rate from 0 up to (not including) 1, not -0.1."),
        (["--clipnorm", "0"], "--clipnorm must be a positive number, not 0.0."),
    ],
)
def test_bad_recipe_flags_are_one_usage_error(tmp_path, capsys, flags, message):
    assert main(train_command(tmp_path / "out", *flags)[3:]) == 2
    err = capsys.readouterr().err
    assert err == f"kformer train: error: {message}\n" if message.endswith(".") else message in err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_config_out_of_range_is_refused_when_made_naming_the_setting():
    from kformer.training.config import ConfigError

    for settings, name in [
        (dict(d_model=32, num_heads=3), "num_heads"),
        (dict(epochs=0), "epochs"),
        (dict(minutes=float("nan")), "minutes"),
        (dict(d_ff=64.5), "d_ff"),
        (dict(dropout=1.0), "dropout"),
        (dict(patience=-1), "patience"),
        (dict(schedule="cosine"), "schedule"),
        (dict(strategy="gpu"), "strategy"),
    ]:
        with pytest.raises(ConfigError, match=f"^{name} ") as error:
            TrainingConfig(**settings)
        assert error.value.name == name and isinstance(error.value, ValueError)
    # The edges of each range are settings people use.
    TrainingConfig(dropout=0.0, label_smoothing=0.0, patience=0, epochs=1, ema=0.999, average=2, minutes=0.01)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(patience=-1), "patience must be 0 or a positive integer, not -1."),
        (dict(patience=1.5), "patience must be 0 or a positive integer, not 1.5."),
        (dict(ema=0.0), "ema is a decay between 0 and 1 (such as 0.999), not 0.0."),
        (dict(ema=1.0), "ema is a decay between 0 and 1 (such as 0.999), not 1.0."),
        (dict(average=1), "average is a number of checkpoints, 2 or more, not 1."),
        (dict(schedule="cosine"), "schedule is one of budget, noam, not 'cosine'."),
        (dict(strategy="gpu"), "strategy is one of default, mirrored, multiworker, tpu, not 'gpu'."),
        (dict(dropout=True), "dropout is a rate from 0 up to (not including) 1, not True."),  # a bool is no number
        (dict(minutes=True), "minutes must be a positive number, not True."),
        (dict(batch_size=True), "batch_size must be a positive integer, not True."),
    ],
)
def test_each_rule_of_the_config_is_one_sentence_naming_the_setting_its_range_and_the_value(settings, message):
    """From Python, where the CLI's choices and types do not stand in front: the rule and the value given."""
    with pytest.raises(ConfigError) as error:
        TrainingConfig(**settings)
    assert str(error.value) == message
    assert error.value.describe("--x").startswith("--x ")  # the CLI names its flag the same way


def test_every_architecture_setting_reaches_the_model_the_job_builds():
    """`model_settings` carries each setting into the model (read back from Keras' own config), and
    `--shared-vocab` builds one token table tied to the output: the paper's section 3.4."""
    from kformer.model import build_transformer
    from kformer.training.jobs import _build

    asked = dict(d_model=16, num_heads=2, num_layers=3, d_ff=24, dropout=0.2, norm_first=True, tie_embeddings=True)
    strategy = tf.distribute.get_strategy()
    model, _ = _build(strategy, TrainingConfig(**asked), build_transformer, (30, 40), steps_per_epoch=10)
    assert {name: model.get_config()[name] for name in asked} == asked
    assert not model.get_config()["share_embeddings"]

    model, _ = _build(
        strategy, TrainingConfig(d_model=16, num_heads=2, shared_vocab=True), build_transformer, (30, 30), 10
    )
    config = model.get_config()
    assert config["share_embeddings"] and config["tie_embeddings"]
    tables = [w for w in model.weights if "embedding" in w.path and w.shape == (30, 16)]
    assert len(tables) == 1, [w.path for w in model.weights]  # encoder, decoder and output share one


@pytest.mark.parametrize(
    "policy, settings, xla",
    [
        ("float32", {}, True),
        ("mixed_bfloat16", {}, False),  # bfloat16 on a CPU: faster without XLA (bench/RESULTS.md)
        ("mixed_bfloat16", dict(jit_compile=True), True),  # what the caller asks for is kept
        ("float32", dict(jit_compile=False), False),
        ("mixed_bfloat16", dict(strategy="tpu"), True),  # a TPU runs everything under XLA
    ],
)
def test_xla_unless_bfloat16_on_a_cpu_or_told(policy, settings, xla):
    from kformer.training.jobs import uses_xla

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        assert uses_xla(TrainingConfig(**settings)) is xla
    finally:
        keras.mixed_precision.set_global_policy(previous)


def test_keras_ema_is_what_the_flag_turns_on():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    compile_for_training(model, 2, ema=0.95)
    assert model.optimizer.use_ema and model.optimizer.ema_momentum == pytest.approx(0.95)
    compile_for_training(model, 2)
    assert not model.optimizer.use_ema


def test_val_bleu_and_chrf_are_sacrebleus_scores_of_evenly_spaced_validation_translations():
    """The epoch's `val_bleu` and `val_chrf` (history.csv's columns) are sacreBLEU's corpus scores of the
    greedy translations of 10 pairs spread evenly over the 31 given, computed here apart."""
    trained = copy_task_model()
    rng = np.random.default_rng(3)
    trained.model.set_weights([w + rng.normal(0, 0.07, w.shape).astype(w.dtype) for w in trained.model.get_weights()])
    pairs = letter_pairs(31, seed=7)
    keeper = BestTranslations(pairs, trained.source_tokenizer, trained.target_tokenizer, 12, sentences=10)
    keeper.set_model(trained.model)
    logs = {}
    keeper.on_epoch_end(0, logs)
    spread = [pairs[int(i)] for i in np.linspace(0, 31, 10, endpoint=False)]  # pairs 0, 3, 6, 9, 12, 15, 18, 21, 24, 27
    sources, references = [s for s, _ in spread], [t for _, t in spread]
    hypotheses = Translator(trained, xla=False).translate(sources)
    assert logs["val_bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2)
    assert logs["val_chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2)
    assert 5 < logs["val_bleu"] < 95 and logs["val_bleu"] != logs["val_chrf"]  # a partly ruined copier
