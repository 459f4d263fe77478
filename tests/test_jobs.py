"""The training job's own rules, in-process and on small Keras models: which schedule a run gets and where it
ends, the precision and seeds it sets up, which callbacks run in which order with which settings, and what
`_fit` asks of model.fit, resumes, and reports. The end-to-end runs (a whole `kformer train`, a kill and a
resume in a fresh process) are in test_cli.py, test_resilience.py and test_settings_take_effect.py.
"""

import csv
import dataclasses
import json
import random
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import VOCAB, copy_task_model, recorder

from kformer.data.pairs import DataError
from kformer.data.pipeline import batches_per_epoch
from kformer.data.stream import InMemoryPairs
from kformer.data.text import Tokenizer
from kformer.model_dir import RunDirectory, TrainedModel, load
from kformer.training import jobs
from kformer.training.callbacks import Backup, CheckpointAverage, TensorBoard, TimeBudget
from kformer.training.config import ConfigError, TrainingConfig
from kformer.training.objectives import BudgetSchedule, TransformerSchedule
from kformer.training.tasks import LANGUAGE_MODEL, TRANSLATION


def rates(schedule, steps=(1, 7, 60, 149)):
    return [float(schedule(step)) for step in steps]


def test_the_papers_schedule_is_built_with_the_runs_width_warmup_and_scale():
    config = TrainingConfig(schedule="noam", d_model=32, num_heads=2, warmup_steps=7, learning_rate_scale=2.0)
    schedule = jobs._schedule(config, 50)
    assert isinstance(schedule, TransformerSchedule)
    # The paper's formula, worked here: scale * d_model^-0.5 * min(n^-0.5, n * warmup^-1.5) at the n-th step
    # (Keras gives the schedule the count of steps done before it: n - 1).
    expected = [2.0 * 32**-0.5 * min(n**-0.5, n * 7**-1.5) for n in (2, 8, 61, 150)]
    np.testing.assert_allclose(rates(schedule), expected, rtol=1e-6)


@pytest.mark.parametrize(
    "settings, total",
    [
        (dict(epochs=3), 150),  # 3 epochs of 50 steps
        (dict(minutes=5.0), 1e9),  # unknown until the budget measures its pace
        (dict(minutes=5.0, epochs=2), 100),  # both: the epochs' end (the budget may stop it sooner)
        ({}, 500),  # neither: 10 epochs
    ],
)
def test_the_budget_schedule_falls_to_zero_where_the_run_will_end(settings, total):
    config = TrainingConfig(d_model=32, num_heads=2, warmup_steps=7, learning_rate_scale=2.0, **settings)
    schedule = jobs._schedule(config, 50)
    assert isinstance(schedule, BudgetSchedule)
    assert float(schedule.total_steps.numpy()) == total
    np.testing.assert_allclose(rates(schedule), rates(BudgetSchedule(32, total, 7, 2.0)), rtol=1e-6)


@pytest.mark.parametrize("settings, epochs", [(dict(epochs=3), 3), (dict(minutes=1.0), 10_000), ({}, 10)])
def test_the_epochs_a_run_asks_fit_for(settings, epochs):
    assert jobs._epochs(TrainingConfig(**settings)) == epochs


def test_the_setup_seeds_everything_and_sets_the_precision_only_for_the_job():
    before = keras.mixed_precision.global_policy().name
    with jobs._training_setup(TrainingConfig(seed=7, mixed_precision=True)) as (strategy, policy):
        assert policy == "mixed_bfloat16" == keras.mixed_precision.global_policy().name  # a CPU: bfloat16
        assert strategy is tf.distribute.get_strategy()
        drawn = random.random(), float(keras.random.uniform(()))
    keras.utils.set_random_seed(7)
    assert drawn[0] == random.random()
    assert drawn[1] == float(keras.random.uniform(()))
    assert keras.mixed_precision.global_policy().name == before
    with pytest.raises(RuntimeError), jobs._training_setup(TrainingConfig()) as (_, policy):
        assert policy == "float32" == keras.mixed_precision.global_policy().name
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
        raise RuntimeError("the job failed")
    assert keras.mixed_precision.global_policy().name == before  # put back after a failure too


class Keeper(keras.callbacks.Callback):
    """What the job reads of `BestTranslations`: its best chrF so far (-1: none), each epoch's val_chrf (0 here,
    for EarlyStopping to watch), and its judgement of an average (`consider`: 55.0 here)."""

    def __init__(self, best=-1.0):
        super().__init__()
        self.best = best

    def on_epoch_end(self, epoch, logs=None):
        logs["val_chrf"] = 0.0

    def consider(self, weights):
        return 55.0


def test_the_chiefs_callbacks_in_their_order_with_the_runs_settings(tmp_path):
    run = RunDirectory(tmp_path / "out")
    config = TrainingConfig(patience=3)
    keeper, own = Keeper(best=-1.0), keras.callbacks.Callback()
    budget, backup, average = TimeBudget(1.0), Backup(run.backup), CheckpointAverage(2, 10)
    chain = jobs._callbacks(run, config, keeper, budget, backup, average, True, [own])
    kinds = [CheckpointAverage, Keeper, keras.callbacks.EarlyStopping, keras.callbacks.CSVLogger, TensorBoard]
    assert [type(callback) for callback in chain] == [*kinds, keras.callbacks.Callback, TimeBudget, Backup]
    assert chain[0] is average and chain[1] is keeper and chain[-3] is own and chain[-2] is budget
    assert chain[-1] is backup
    stopper, logger, board = chain[2:5]
    assert (stopper.monitor, stopper.mode, stopper.patience, stopper.baseline) == ("val_chrf", "max", 3, None)
    assert (logger.filename, logger.append) == (str(run.history), True)
    assert (board.log_dir, board.update_freq) == (str(run.logs), 100)
    assert run.training.is_dir()
    # Resumed, the best chrF before the restart is the bar to beat; no budget, no average: neither is there.
    for best in (41.5, 0.5, 0.0):  # chrF 0 is a score too: -1 is none
        chain = jobs._callbacks(run, config, Keeper(best=best), None, backup, None, True, [])
        assert [type(callback) for callback in chain] == [*kinds[1:], Backup]
        assert chain[1].baseline == best
    chain = jobs._callbacks(run, config, None, None, backup, None, True, [])
    assert [type(callback) for callback in chain] == [keras.callbacks.CSVLogger, TensorBoard, Backup]


def test_a_worker_that_is_not_the_chief_runs_only_the_budget_and_the_backup_and_writes_nothing(tmp_path):
    run = RunDirectory(tmp_path / "out")
    budget, backup, own = TimeBudget(1.0), Backup(run.backup), keras.callbacks.Callback()
    assert jobs._callbacks(run, TrainingConfig(), Keeper(2.0), budget, backup, None, False, [own]) == [budget, backup]
    assert jobs._callbacks(run, TrainingConfig(), None, None, backup, None, False, []) == [backup]
    assert not run.root.exists()


class FitSpy:
    """model.fit, recording what it was asked (and the first value of the training data it was given)."""

    def __init__(self, model):
        self.fit, self.asked = model.fit, {}

    def __call__(self, train, **asked):
        self.asked = {**asked, "first": float(next(iter(train))[0][0, 0])}
        return self.fit(train, **asked)


def counting_data():
    """Batches of one row whose features are the batch's index: 0, 1, 2, ..."""
    return tf.data.Dataset.range(10_000).map(lambda i: (tf.fill([1, 3], tf.cast(i, tf.float32)), tf.zeros([1, 2])))


def spied_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(1e-4), keras.losses.MeanSquaredError())  # the workers' loop calls it
    spy = FitSpy(model)
    model.fit = spy
    return model, spy


def backed_up_at(run, step, epoch):
    """`run`'s backup, as a run killed after `step` in `epoch` left it."""
    model, _ = spied_model()
    model.optimizer.iterations.assign(step)
    saving = Backup(run.backup)
    saving.set_model(model)
    saving.on_train_begin()
    saving.save(epoch)


def test_fit_is_asked_for_the_runs_epochs_and_steps_and_its_result_summarised(tmp_path):
    run = RunDirectory(tmp_path)
    config = TrainingConfig(epochs=2, backup_steps=3)
    model, spy = spied_model()
    history, summary = jobs._fit(model, None, counting_data(), None, 4, run, config, 0)
    assert spy.asked == dict(
        first=0.0,
        validation_data=None,
        epochs=2,
        initial_epoch=0,
        steps_per_epoch=4,
        callbacks=spy.asked["callbacks"],
        shuffle=False,
        verbose=0,
    )
    backup = spy.asked["callbacks"][-1]
    assert type(backup) is Backup and (backup.every_steps, backup.write) == (3, True)
    losses = history.history["loss"]
    assert 0.0 <= summary["seconds"] < 60.0  # the time fit took
    assert summary == {
        "steps": 8,
        "seconds": summary["seconds"],
        "epochs_run": 2,
        "stopped_by": "epochs or early stopping",
        "loss": round(losses[-1], 4),
    }
    with open(run.history) as file:
        assert [row["epoch"] for row in csv.DictReader(file)] == ["0", "1"]
    assert run.learning_curves.is_file()


def test_a_run_resumed_in_the_middle_of_an_epoch_reads_on_from_its_next_batch_and_ends_its_schedule_there(
    tmp_path, capsys
):
    run = RunDirectory(tmp_path)
    config = TrainingConfig(epochs=3, backup_steps=1000, d_model=32, num_heads=2)
    backed_up_at(run, step=6, epoch=1)  # the second epoch's second step
    resumed, spy = spied_model()
    schedule = BudgetSchedule(32, 12, 4)
    _, summary = jobs._fit(resumed, schedule, counting_data(), None, 4, run, config, 1)
    assert (spy.asked["first"], spy.asked["initial_epoch"]) == (6.0, 1)  # the batches trained on are read past
    # fit reruns epoch 1 whole: 8 more steps from step 6, so the schedule ends at 14, not at 3 x 4.
    assert float(schedule.total_steps.numpy()) == 14.0
    assert summary["resumed_from"] == 6 and summary["steps"] == 14
    printed = capsys.readouterr().out
    assert (
        f"Resuming the interrupted run in {tmp_path}: step 6, epoch 2 (first reading past the 6 batches it " in printed
    )


def test_a_spent_budget_says_why_the_run_stopped_and_warns_when_it_left_too_few_steps(tmp_path, capsys):
    run = RunDirectory(tmp_path)
    model, spy = spied_model()
    config = TrainingConfig(minutes=1e-4, d_model=32, num_heads=2)
    _, summary = jobs._fit(model, None, counting_data(), None, 1000, run, config, 1)
    assert spy.asked["epochs"] == 10_000 and spy.asked["verbose"] == 0  # the budget's line, not Keras's bar
    steps = summary["steps"]
    assert summary["stopped_by"] == "time budget" and steps < jobs.FEW_STEPS
    warning = (
        f"only {steps} training steps ran in 0.0001 minutes (the first took {summary['first_step_seconds']:.0f} s): "
        "too few to learn from; give more --minutes"
    )
    assert summary["warning"] == warning
    assert f"warning: {warning}.\n" in capsys.readouterr().err
    budget = next(callback for callback in spy.asked["callbacks"] if isinstance(callback, TimeBudget))
    assert summary["first_step_seconds"] == round(budget.first_step_seconds, 1)
    assert budget.verbose == 1  # the budget's line instead


def summarised(steps, seconds, budget=None, first_step_seconds=None, epochs=None):
    model = SimpleNamespace(optimizer=SimpleNamespace(iterations=tf.Variable(steps)))
    return jobs._summary(model, epochs or {}, seconds, "epochs", TrainingConfig(minutes=2), budget, first_step_seconds)


def test_the_summary_rounds_times_to_a_tenth_and_warns_below_100_steps_only():
    """docs/large-corpora.md: a budget spent "before 100 steps" is warned of."""
    spent = SimpleNamespace(expired=True)
    summary = summarised(99, 12.345, spent, None, {"loss": [2.0, 0.123456], "val_loss": []})
    assert summary == {
        "steps": 99,
        "seconds": 12.3,
        "epochs_run": 2,
        "stopped_by": "time budget",
        "first_step_seconds": 0.0,  # the budget stopped the run before a step ended
        "warning": "only 99 training steps ran in 2 minutes (the first took 0 s): too few to learn from; give "
        "more --minutes",
        "loss": 0.1235,
    }
    assert "warning" not in summarised(100, 12.345, spent, 3.0)
    assert summarised(5, 0.06, SimpleNamespace(expired=False), 3.46)["first_step_seconds"] == 3.5


def test_the_report_draws_curves_only_where_asked_and_once_an_epoch_ended(tmp_path, capsys):
    epochs = {"loss": [2.0, 1.0], "val_loss": [2.5, 1.5]}
    jobs._report({"warning": "only 3 training steps ran"}, epochs, None)  # a worker: no file, no error
    assert capsys.readouterr() == ("", "warning: only 3 training steps ran.\n")
    jobs._report({}, {"loss": []}, tmp_path / "none.png")
    jobs._report({"warning": "only 3 training steps ran"}, epochs, tmp_path / "curves.png")
    assert capsys.readouterr() == ("", "warning: only 3 training steps ran.\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["curves.png"]


LETTERS = Tokenizer(VOCAB)  # one token a letter


def letter_pairs(lengths):
    return [(" ".join("abcdefghijkl"[:n]), " ".join("abcdefghijkl"[:n])) for n in lengths]


def test_the_length_limit_counts_what_it_leaves_out_in_the_sample_and_scales_it_to_the_corpus(capsys):
    """Pairs of 1 to 10 tokens a side; up to 5 tokens (the target's [END] among them) keeps those of 1 to 4."""
    stream = SimpleNamespace(sample=letter_pairs(range(1, 11)), estimated_pairs=1000, approximate=True)
    config, left_out, lengths = jobs._length_limit(
        TRANSLATION, TrainingConfig(max_length=5), stream, *[LETTERS] * 2, None, 1
    )
    assert (config.max_length, left_out) == (5, 600)  # 6 of the sample's 10: 60% of about 1,000
    np.testing.assert_array_equal(lengths[0], range(1, 11))
    assert capsys.readouterr().out == (
        "Sentences of up to 5 tokens: about 600 of about 1,000 training pairs (60.00%) are longer and left out; "
        "raise --max-length to keep them.\n"
    )
    pairs = InMemoryPairs(letter_pairs(range(1, 11)))
    config, left_out, _ = jobs._length_limit(LANGUAGE_MODEL, TrainingConfig(), pairs, *[LETTERS] * 2, None, 1)
    assert (config.max_length, left_out) == (40, 0)  # chosen from the data: all of it fits under 40
    assert capsys.readouterr().out == (
        "Sentences of up to 40 tokens (from the data: 99% of the lines fit): 0 of 10 training lines (0.00%) are "
        "longer and left out.\n"
    )
    base = SimpleNamespace(max_length=7)  # fine-tuning: the model's own limit
    config, left_out, _ = jobs._length_limit(TRANSLATION, TrainingConfig(), pairs, *[LETTERS] * 2, base, 1)
    assert (config.max_length, left_out) == (7, 4)
    assert capsys.readouterr().out.startswith(
        "Sentences of up to 7 tokens (the model's): 4 of 10 training pairs (40.00%)"
    )
    jobs._length_limit(TRANSLATION, TrainingConfig(max_length=5), pairs, *[LETTERS] * 2, None, 0)
    assert capsys.readouterr().out == ""
    with pytest.raises(DataError) as raised:
        jobs._length_limit(TRANSLATION, TrainingConfig(max_length=1), pairs, *[LETTERS] * 2, None, 0)
    assert str(raised.value) == "none of the 10 training pairs fits max_length=1 tokens a side; raise --max-length."


def test_each_worker_reads_its_share_in_batches_of_its_replicas_part(tmp_path):
    """Two input pipelines of two replicas in all, a global batch of 8: the second pipeline's batches hold 4 of the
    odd-numbered pairs; a batch of tokens is split the same way."""
    pairs = InMemoryPairs(letter_pairs([1, 2, 3, 4] * 20))
    config = TrainingConfig(batch_size=8, max_length=6, shuffle_buffer=1)
    share = jobs._training_data(pairs, LETTERS, LETTERS, config)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2)
    (sources, _), _ = next(iter(share(context)))
    assert sources.shape[0] == 4
    assert set(np.count_nonzero(sources.numpy(), axis=1)) <= {2, 4}  # pairs 1, 3, 5...: of 2 and 4 tokens
    one = jobs._training_data(pairs, LETTERS, LETTERS, config)(tf.distribute.InputContext())
    (sources, _), _ = next(iter(one))
    assert sources.shape[0] == 8 and set(np.count_nonzero(sources.numpy(), axis=1)) == {1, 2, 3, 4}
    by_tokens = TrainingConfig(batch_size=8, batch_tokens=24, max_length=6, shuffle_buffer=1)
    (sources, _), _ = next(iter(jobs._training_data(pairs, LETTERS, LETTERS, by_tokens)(context)))
    assert sources.shape[0] * sources.shape[1] <= 12  # 24 tokens a side, halved
    # The limit leaves out what does not fit (up to 3 tokens: targets of 2 and their [END]); a batch of one row.
    short = TrainingConfig(batch_size=2, max_length=3, shuffle_buffer=1)
    pairs = InMemoryPairs(letter_pairs([4, 1, 3, 2, 1, 4, 2, 3] * 2))  # the second share: 1, 2, 4, 3, 1, 2, 4, 3
    batches = jobs._training_data(pairs, LETTERS, LETTERS, short)(context)
    rows = [np.count_nonzero(sources.numpy(), axis=1).tolist() for (sources, _), _ in batches.take(4)]
    assert rows == [[1], [2], [1], [2]]  # its pairs of 1 and 2 tokens, one a batch


PAIRS = [("a b", "c d"), ("b c", "d e"), ("c d", "e f")]


@pytest.fixture
def handed(monkeypatch):
    """What the jobs hand to `_train` (stubbed: nothing trains), one (args, kwargs) a call."""
    return recorder(monkeypatch, jobs, "_train", "trained")


def test_train_translator_hands_its_pairs_settings_and_callbacks_to_the_run(tmp_path, handed):
    config, own = TrainingConfig(epochs=2), [keras.callbacks.Callback()]
    result = jobs.train_translator({"train": PAIRS, "valid": PAIRS[:1]}, tmp_path / "a", config, 0, callbacks=own)
    assert result == "trained"
    jobs.train_translator({"train": PAIRS}, tmp_path / "b")
    (task, train, valid, run, given, verbose, base, callbacks), _ = handed[0]
    assert (task, list(train), valid, run.root, given, verbose, base, callbacks) == (
        TRANSLATION, PAIRS, PAIRS[:1], tmp_path / "a", config, 0, None, own
    )  # fmt: skip
    (_, _, valid, run, given, verbose, _, callbacks), _ = handed[1]
    assert (valid, run.root, given, verbose, callbacks) == ([], tmp_path / "b", TrainingConfig(), 1, ())
    assert (tmp_path / "a" / "training" / "run.json").is_file()  # claimed for a translator


def test_train_language_model_hands_its_lines_settings_and_callbacks_to_the_run(tmp_path, handed):
    config, own = TrainingConfig(epochs=2), [keras.callbacks.Callback()]
    lines = ["a b c", "b c d"]
    jobs.train_language_model(lines, tmp_path / "a", config, 0, valid_lines=("c d e",), callbacks=own)
    jobs.train_language_model(lines, tmp_path / "b")
    (task, train, valid, run, given, verbose), kwargs = handed[0]
    assert (task, list(train), valid, run.root, given, verbose, kwargs) == (
        LANGUAGE_MODEL, lines, ["c d e"], tmp_path / "a", config, 0, {"callbacks": own}
    )  # fmt: skip
    (_, _, valid, _, given, verbose), kwargs = handed[1]
    assert (valid, given, verbose, kwargs) == ([], TrainingConfig(), 1, {"callbacks": ()})


@pytest.mark.parametrize("job", ["translator", "language model"])
def test_a_finished_model_is_kept_unless_told_to_overwrite_and_a_worker_prepares_nothing(
    tmp_path, handed, monkeypatch, job
):
    def train(out, **settings):
        if job == "translator":
            return jobs.train_translator({"train": PAIRS}, out, **settings)
        return jobs.train_language_model(["a b c"], out, **settings)

    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text('{"kind": "translator"}')
    with pytest.raises(jobs.ModelDirectoryError, match="already holds a trained model"):
        train(out)
    assert train(out, overwrite=True) == "trained" and not (out / "config.json").exists()
    cluster = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    worker = tmp_path / "worker"
    worker.mkdir()
    assert train(worker, config=TrainingConfig(strategy="multiworker")) == "trained"
    assert list(worker.iterdir()) == []  # neither locked nor prepared: the chief does that


def test_the_jobs_refuse_what_they_cannot_train_in_one_sentence(tmp_path, handed):
    for splits in ([("a", "b")], {"valid": PAIRS}):
        with pytest.raises(DataError) as raised:
            jobs.train_translator(splits, tmp_path / "out")
        assert str(raised.value) == (
            'splits must be a dict {"train": pairs, "valid": pairs (optional)}, as split_pairs returns.'
        )
    with pytest.raises(DataError) as raised:
        jobs.train_translator({"train": []}, tmp_path / "out")
    assert str(raised.value) == "the training split is empty; give more sentence pairs."
    with pytest.raises(DataError) as raised:
        jobs.train_language_model([], tmp_path / "out")
    assert str(raised.value) == "no text to train on; give at least one line."
    for name, lines, valid in (("lines", "one string", ()), ("valid_lines", ["a b"], [b"bytes"])):
        with pytest.raises(DataError) as raised:
            jobs.train_language_model(lines, tmp_path / "out", valid_lines=valid)
        assert str(raised.value) == f"{name} must be a list of strings, one line of text each."
    assert handed == [] and not (tmp_path / "out" / "config.json").exists()


def test_a_model_from_before_the_shared_vocabulary_was_recorded_had_separate_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"kind": "translator", "training": {"d_model": 32}}))
    with pytest.raises(ConfigError, match="asks for True, but the model in .* has False"):
        jobs.refuse_new_architecture(tmp_path, {"shared_vocab": True})
    jobs.refuse_new_architecture(tmp_path, {"shared_vocab": False, "d_model": 32})
    with pytest.raises(ConfigError, match="asks for 64, but the model in .* has 32"):
        jobs.refuse_new_architecture(tmp_path, {"d_model": 64})


WORDS = [("the cat sleeps", "el gato duerme"), ("a dog runs", "un perro corre"), ("the bird sings", "el pájaro canta")]
TOO_LONG = ("one two three four five six seven eight nine ten eleven twelve thirteen", "corto")  # > 12 tokens
TINY = dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, source_vocab_size=40, target_vocab_size=40)


class Steps(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1


@pytest.mark.slow  # about 20 s: trains; the default suite ran 8 min 21 s with it
def test_a_translators_run_from_its_vocabularies_to_its_model_directory(tmp_path, capsys, monkeypatch):
    """One epoch of a tiny translator, in-process: what it prints, records and saves. 31 pairs, one with a source
    too long for 12 tokens: 30 in batches of 16 are 2 steps."""
    config = TrainingConfig(**TINY, epochs=1, batch_size=16, max_length=12, jit_compile=False)
    asked_space = []
    monkeypatch.setattr(jobs, "require_space", lambda *asked: asked_space.append(asked))
    own, out = Steps(), tmp_path / "out"
    splits = {"train": WORDS * 10 + [TOO_LONG], "valid": WORDS[:2]}
    trained = jobs.train_translator(splits, out, config, callbacks=[own])
    printed = capsys.readouterr().out
    assert own.steps == 2
    assert (
        f"Training a {trained.model.count_params():,}-parameter translator on 31 pairs (2 steps an epoch, float32 "
        "without XLA, strategy default) ...\n"
    ) in printed
    assert "Sentences of up to 12 tokens: 1 of 31 training pairs (3.23%) are longer and left out;" in printed
    assert printed.count("Learning a 40-token WordPiece vocabulary from 31 sentences ...") == 2
    assert {name: trained.model.get_config()[name] for name in TINY if "vocab" not in name} == {
        "d_model": 16, "num_heads": 2, "num_layers": 1, "d_ff": 32
    }  # fmt: skip
    # model.keras, the best weights and the backup with Adam's two moments: 8 copies of 4-byte weights.
    assert asked_space == [(out, 32 * trained.model.count_params(), "training this model")]
    recorded = trained.config
    assert (recorded["kind"], recorded["max_length"], recorded["training"]) == (
        "translator", 12, dataclasses.asdict(config)
    )  # fmt: skip
    result = recorded["result"]
    assert (result["steps"], result["epochs_run"], result["pairs_left_out"]) == (2, 1, 1)
    assert 0.0 <= result["val_chrf_kept"] <= 100.0 and "val_loss" in result
    assert RunDirectory(out).best_weights.is_file()
    again = load(out)  # saved: the same model, vocabularies and record; the backup gone
    assert again.config == {"max_length": 12, **{k: v for k, v in recorded.items() if k != "max_length"}}
    assert again.source_tokenizer.vocabulary == trained.source_tokenizer.vocabulary
    assert not RunDirectory(out).backup.exists()


def fit_recorded(monkeypatch, best=0.0, raises=None):
    """`_fit` (model.fit's part of a run) replaced by a recorder of what `_train` hands it; the keeper's best
    chrF then set to `best`, or `raises` raised. Everything before it runs: vocabularies, model, data."""
    asked = {}

    def fit(model, schedule, train, valid, steps_per_epoch, run, config, verbose, keeper, callbacks):
        asked.update(model=model, schedule=schedule, train=train, steps=steps_per_epoch, verbose=verbose)
        asked.update(keeper=keeper, callbacks=callbacks)
        if raises is not None:
            raise raises
        if keeper is not None:  # none without validation pairs
            keeper.best = best
        return None, {"steps": 0}

    monkeypatch.setattr(jobs, "_fit", fit)
    return asked


def test_a_run_hands_fit_its_model_schedule_batches_and_steps_and_keeps_a_best_chrf_of_0(tmp_path, capsys, monkeypatch):
    """The fast half of the run above, with XLA on (compiled, never run): a best chrF of 0 is a score (-1: none)."""
    asked, asked_space = fit_recorded(monkeypatch, best=0.0), []
    monkeypatch.setattr(jobs, "require_space", lambda *space: asked_space.append(space))
    config, own, out = TrainingConfig(**TINY, epochs=1, batch_size=16, max_length=12), Steps(), tmp_path / "out"
    trained = jobs.train_translator(
        {"train": WORDS * 10 + [TOO_LONG], "valid": WORDS[:2]}, out, config, callbacks=[own]
    )
    printed = capsys.readouterr().out
    parameters = trained.model.count_params()
    assert "-parameter translator on 31 pairs (2 steps an epoch, float32, strategy default) ...\n" in printed
    assert "Sentences of up to 12 tokens: 1 of 31 training pairs (3.23%) are longer and left out;" in printed
    assert (asked["model"], asked["steps"], asked["verbose"], list(asked["callbacks"])) == (trained.model, 2, 1, [own])
    assert float(asked["schedule"].total_steps.numpy()) == 2.0  # the model's schedule, ended with the one epoch
    (source, _), _ = next(iter(asked["train"]))  # the data itself, repeated: no share of a cluster to pick
    assert source.shape[0] == 16
    assert asked["keeper"].path == RunDirectory(out).best_weights
    assert asked_space == [(out, 32 * parameters, "training this model")]
    result = trained.config["result"]
    assert (result["val_chrf_kept"], result["pairs_left_out"], result["steps"]) == (0.0, 1, 0)


class Streamed(InMemoryPairs):
    """Pairs as a stream gives them: counted about, and a bad line found only while training reads it."""

    approximate, error = True, "corpus.tsv, line 31: no tab between source and target."


def test_a_streams_run_says_about_and_a_bad_line_found_in_training_is_its_message(tmp_path, capsys, monkeypatch):
    fit_recorded(monkeypatch, raises=tf.errors.InvalidArgumentError(None, None, "cannot parse line 31"))
    config = TrainingConfig(**TINY, epochs=1, batch_size=16, max_length=12, jit_compile=False)
    with pytest.raises(DataError) as raised:
        jobs._train(TRANSLATION, Streamed(WORDS * 10), [], RunDirectory(tmp_path), config, 1)
    assert str(raised.value) == f"{Streamed.error} Fix it and run the same command again to resume."
    assert "-parameter translator on about 30 pairs (2 steps an epoch, float32 without XLA, " in capsys.readouterr().out
    fit_recorded(monkeypatch, raises=tf.errors.InvalidArgumentError(None, None, "not the data's"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="not the data's"):
        jobs._train(TRANSLATION, InMemoryPairs(WORDS * 10), [], RunDirectory(tmp_path), config, 0)


def test_a_worker_of_a_cluster_writes_nothing_and_is_handed_its_share_to_make(tmp_path, monkeypatch):
    """Under multi-worker the loop makes each worker's share from its input context (`_training_data`)."""
    asked = fit_recorded(monkeypatch)
    monkeypatch.setattr(jobs, "make_strategy", lambda name: tf.distribute.get_strategy())  # no cluster to join
    cluster = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    config = TrainingConfig(**TINY, epochs=1, batch_size=16, max_length=12, strategy="multiworker", jit_compile=False)
    jobs._train(TRANSLATION, InMemoryPairs(WORDS * 10), [], RunDirectory(tmp_path / "out"), config, 0)
    assert not (tmp_path / "out").exists()  # neither vocabularies nor a model: the chief writes them
    (source, _), _ = next(iter(asked["train"](tf.distribute.InputContext(2, 1, 2))))
    assert source.shape[0] == 8  # a replica's half of the batch


def test_a_run_stopped_by_a_callback_leaves_its_vocabularies_and_task_for_the_resume(tmp_path):
    class Fails(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise RuntimeError("the user's logger failed")

    config = TrainingConfig(**TINY, epochs=1, batch_size=16, max_length=12, jit_compile=False)
    with pytest.raises(RuntimeError, match="the user's logger failed"):
        jobs.train_translator({"train": WORDS * 10}, tmp_path / "out", config, verbose=0, callbacks=[Fails()])
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "source_vocab.txt", "target_vocab.txt", "training"
    ]  # fmt: skip


BASE_ARCHITECTURE = dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, norm_first=False, tie_embeddings=False)


def saved_base(folder):
    """The copy task's model saved as `kformer train` would have: a model to fine-tune. Returns it."""
    copy = copy_task_model()
    recorded = {"kind": "translator", "max_length": 12, "training": BASE_ARCHITECTURE}
    TrainedModel(copy.model, copy.source_tokenizer, copy.target_tokenizer, recorded).save(folder)
    return copy


def test_a_fine_tuning_run_starts_from_the_base_models_weights_tokenizers_and_limit(tmp_path, capsys, monkeypatch):
    asked = fit_recorded(monkeypatch)
    copy = saved_base(tmp_path / "base")
    pairs = [("a b c", "a b c"), ("d e f", "d e f")] * 4
    config = TrainingConfig(init_from=str(tmp_path / "base"), epochs=1, batch_size=8, jit_compile=False)
    trained = jobs.train_translator({"train": pairs}, tmp_path / "out", config)
    assert f"-parameter translator from {tmp_path / 'base'}, on 8 pairs (1 step an epoch" in capsys.readouterr().out
    assert trained.source_tokenizer.vocabulary == VOCAB and trained.max_length == 12  # the base model's limit
    assert asked["model"] is trained.model
    for tuned, base in zip(trained.model.get_weights(), copy.model.get_weights(), strict=True):
        np.testing.assert_array_equal(tuned, base)


def test_a_language_models_run_scores_its_held_out_lines(tmp_path, capsys):
    config = TrainingConfig(**TINY, epochs=1, batch_size=4, batch_tokens=16, max_length=12, jit_compile=False)
    lines = [target for _, target in WORDS] * 10
    trained = jobs.train_language_model(lines, tmp_path / "lm", config, valid_lines=lines[:2], verbose=0)
    assert capsys.readouterr().out == ""
    assert trained.source_tokenizer is None and trained.config["kind"] == "language_model"
    result = trained.config["result"]
    # Batches of 16 tokens (not of 4 lines): the count the pipeline makes of them.
    steps = batches_per_epoch(lines, None, trained.target_tokenizer, batch_size=4, max_length=12, batch_tokens=16)
    assert steps != batches_per_epoch(lines, None, trained.target_tokenizer, batch_size=4, max_length=12)
    assert result["steps"] == steps and result["val_perplexity"] > 1.0 and "val_chrf_kept" not in result
    assert sorted(path.name for path in (tmp_path / "lm").iterdir()) == [
        "config.json", "learning_curves.png", "model.keras", "target_vocab.txt", "training"
    ]  # fmt: skip


def test_fine_tuning_hands_the_base_model_and_its_architecture_to_the_run(tmp_path, handed):
    saved_base(tmp_path / "base")
    config = TrainingConfig(init_from=str(tmp_path / "base"))
    jobs.train_translator({"train": PAIRS}, tmp_path / "out", config, verbose=0)
    (_, _, _, run, given, _, base, _), _ = handed[0]
    assert base.source_tokenizer.vocabulary == VOCAB and base.config["training"] == BASE_ARCHITECTURE
    assert (given.d_model, given.num_heads, given.d_ff, given.source_vocab_size) == (32, 4, 64, len(VOCAB))
    assert sorted(path.name for path in run.root.iterdir()) == ["source_vocab.txt", "target_vocab.txt", "training"]


def test_the_model_is_compiled_with_the_runs_loss_optimizer_and_schedule():
    from kformer.model import build_transformer

    config = TrainingConfig(
        d_model=16, num_heads=2, num_layers=1, d_ff=32, label_smoothing=0.3, clipnorm=0.5, ema=0.9, epochs=2,
        warmup_steps=7, jit_compile=False,
    )  # fmt: skip
    model, schedule = jobs._build(tf.distribute.get_strategy(), config, build_transformer, (20, 30), 50)
    assert model.loss.label_smoothing == 0.3 and model.jit_compile is False
    optimizer = model.optimizer
    assert (optimizer.clipnorm, optimizer.use_ema, optimizer.ema_momentum) == (0.5, True, 0.9)
    assert float(optimizer.learning_rate) == float(schedule(0))  # the rate it steps at now is the schedule's
    assert isinstance(schedule, BudgetSchedule) and float(schedule.total_steps.numpy()) == 100  # 2 epochs of 50
    np.testing.assert_allclose(rates(schedule), rates(BudgetSchedule(16, 100, 7)), rtol=1e-6)
    plain = jobs._build(tf.distribute.get_strategy(), TrainingConfig(d_model=16, num_heads=2), build_transformer,
                        (20, 30), 50)[0]  # fmt: skip
    assert (plain.optimizer.clipnorm, plain.optimizer.use_ema, plain.loss.label_smoothing) == (None, False, 0.1)
    assert plain.jit_compile is True  # XLA by default
    weights = [np.full_like(w, 0.5) for w in model.get_weights()]
    again, _ = jobs._build(tf.distribute.get_strategy(), config, build_transformer, (20, 30), 50, weights)
    for got in again.get_weights():
        np.testing.assert_array_equal(got, np.full_like(got, 0.5))


def test_fit_runs_the_average_and_the_budget_with_the_runs_settings(tmp_path):
    run = RunDirectory(tmp_path)
    config = TrainingConfig(minutes=5.0, epochs=1, average=3, backup_steps=2, d_model=32, num_heads=2)
    model, spy = spied_model()
    schedule, keeper = BudgetSchedule(32, 1e9, 4), None
    jobs._fit(model, schedule, counting_data(), None, 4, run, config, 2, keeper)
    chain = spy.asked["callbacks"]
    average = next(callback for callback in chain if isinstance(callback, CheckpointAverage))
    budget = next(callback for callback in chain if isinstance(callback, TimeBudget))
    assert (average.checkpoints.maxlen, average.every_steps, average.keeper) == (3, 2, None)
    assert (budget.seconds, budget.schedule, budget.verbose) == (300.0, schedule, 0)  # epochs given: Keras's lines
    assert spy.asked["verbose"] == 2


def test_the_averages_score_is_in_the_summary(tmp_path):
    config = TrainingConfig(epochs=1, average=2, backup_steps=2, d_model=32, num_heads=2)
    model, _ = spied_model()
    _, summary = jobs._fit(model, None, counting_data(), None, 4, RunDirectory(tmp_path), config, 0, Keeper())
    assert summary["val_chrf_average"] == 55.0


def test_under_multiworker_fit_is_the_workers_loop_with_the_same_callbacks_and_resume(tmp_path, capsys):
    """The loop `fit_across_workers` runs under the default strategy too: the job hands it what it hands fit."""
    run = RunDirectory(tmp_path)
    config = TrainingConfig(strategy="multiworker", epochs=2, backup_steps=1000, d_model=32, num_heads=2)
    model, spy = spied_model()
    own = Steps()
    shares = lambda context: counting_data()  # noqa: E731
    history, summary = jobs._fit(model, None, shares, counting_data().take(2), 4, run, config, 0, own=[own])
    assert capsys.readouterr().out == ""  # verbose 0: no progress bar
    assert spy.asked == {} and own.steps == 8  # not model.fit: the loop, with the caller's callback
    assert (summary["steps"], summary["epochs_run"]) == (8, 2) and len(history.history["val_loss"]) == 2
    assert run.learning_curves.is_file() and run.backup.is_dir()
    # Resumed at step 6 (epoch 1's third batch): 2 more steps; the record read back holds both epochs.
    backed_up_at(run, step=6, epoch=1)
    resumed, _ = spied_model()
    own, schedule = Steps(), BudgetSchedule(32, 8, 4)
    _, summary = jobs._fit(resumed, schedule, shares, None, 4, run, config, 0, own=[own])
    assert own.steps == 2 and (summary["steps"], summary["resumed_from"]) == (8, 6)
    assert float(schedule.total_steps.numpy()) == 8.0  # the loop goes on mid-epoch: nothing rerun, no end to move
    assert summary["epochs_run"] == 2  # epoch 0 from before the restart, epoch 1 from after


def test_under_multiworker_a_worker_neither_validates_nor_draws_nor_writes_and_the_budget_stops_it(
    tmp_path, monkeypatch
):
    cluster = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    config = TrainingConfig(strategy="multiworker", epochs=2, backup_steps=2, d_model=32, num_heads=2)
    model, _ = spied_model()
    shares = lambda context: counting_data()  # noqa: E731
    history, summary = jobs._fit(model, None, shares, counting_data().take(2), 4, RunDirectory(tmp_path), config, 0)
    assert "val_loss" not in history.history and summary["epochs_run"] == 2  # the chief validates
    assert list(tmp_path.iterdir()) == []  # no backup, history or curves: the chief writes them
    config = TrainingConfig(strategy="multiworker", minutes=1e-4, d_model=32, num_heads=2)
    _, summary = jobs._fit(model, None, shares, None, 1000, RunDirectory(tmp_path), config, 0)
    assert summary["stopped_by"] == "time budget" and summary["steps"] < 1000


def test_under_multiworker_a_resumed_budget_counts_the_time_spent_before_the_restart(tmp_path):
    run = RunDirectory(tmp_path)
    backed_up_at(run, step=6, epoch=1)
    state = json.loads((run.backup / "state.json").read_text())
    (run.backup / "state.json").write_text(json.dumps({**state, "seconds": 120.0}))  # two minutes spent already
    config = TrainingConfig(strategy="multiworker", minutes=1.0, backup_steps=1000, d_model=32, num_heads=2)
    model, _ = spied_model()
    _, summary = jobs._fit(model, None, lambda context: counting_data(), None, 1000, run, config, 0)
    assert summary["stopped_by"] == "time budget" and summary["steps"] == 7  # one step, then the budget's check


def test_a_resumed_run_on_the_papers_schedule_has_no_end_to_move(tmp_path):
    run = RunDirectory(tmp_path)
    backed_up_at(run, step=6, epoch=1)
    resumed, spy = spied_model()
    _, summary = jobs._fit(
        resumed, TransformerSchedule(32, 10), counting_data(), None, 4, run, TrainingConfig(epochs=3), 0
    )
    assert summary["resumed_from"] == 6 and spy.asked["initial_epoch"] == 1


def test_a_worker_is_told_apart_by_its_task_type_and_index():
    def chief(task, cluster=None):
        cluster = cluster or {"worker": ["a:1", "b:1"]}
        config = TrainingConfig(strategy="multiworker")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": task}))
            return jobs.is_chief(config)

    assert chief({"type": "worker", "index": 0}) and not chief({"type": "worker", "index": 1})
    assert not chief({"type": "evaluator", "index": 0}) and not chief({"type": "ps", "index": 0})
    assert chief({"type": "chief", "index": 0}, {"chief": ["c:1"], "worker": ["a:1"]})
    assert not chief({"type": "worker", "index": 0}, {"chief": ["c:1"], "worker": ["a:1"]})
    assert jobs.is_chief(TrainingConfig())  # one process: its own chief


def test_each_workers_share_repeats_and_is_shuffled_by_the_runs_seed():
    pairs = InMemoryPairs(letter_pairs(range(2, 10)) * 4)  # 32 pairs: 4 batches of 8 an epoch

    def first_rows(seed, batches=12):
        config = TrainingConfig(batch_size=8, max_length=12, seed=seed, shuffle_buffer=64)
        share = jobs._training_data(pairs, LETTERS, LETTERS, config)(tf.distribute.InputContext())
        return [tuple(source.numpy()[0]) for (source, _), _ in share.take(batches)]

    rows = first_rows(seed=1)
    assert len(rows) == 12  # three epochs' worth: the data repeats
    assert rows == first_rows(seed=1) and rows != first_rows(seed=2)


def test_init_from_needs_a_translator_whose_settings_are_recorded(tmp_path):
    copy = saved_base(tmp_path / "base")
    config = TrainingConfig(init_from=str(tmp_path / "base"))
    base, given = jobs._starting_point(config, tmp_path / "out")
    assert (given.source_vocab_size, given.target_vocab_size) == (len(VOCAB), len(VOCAB)) != (8000, 8000)
    import kformer

    lm = kformer.build_decoder_only(len(VOCAB), d_model=16, num_heads=2, num_layers=1, d_ff=32)
    TrainedModel(lm, None, LETTERS, {"kind": "language_model", "max_length": 12}).save(tmp_path / "lm")
    with pytest.raises(jobs.ModelDirectoryError) as raised:
        jobs._starting_point(TrainingConfig(init_from=str(tmp_path / "lm")), tmp_path / "out")
    assert str(raised.value) == (
        f"{tmp_path / 'lm'}: holds a language model, not a translator; --init-from fine-tunes a translator."
    )
    recorded = {"kind": "translator", "max_length": 12}  # no "training" entry: written by hand, say
    TrainedModel(copy.model, copy.source_tokenizer, copy.target_tokenizer, recorded).save(tmp_path / "bare")
    with pytest.raises(jobs.ModelDirectoryError) as raised:
        jobs._starting_point(TrainingConfig(init_from=str(tmp_path / "bare")), tmp_path / "out")
    assert str(raised.value) == (
        f"{tmp_path / 'bare'}/config.json: does not record the model's settings (its 'training' entry), so it "
        "cannot be trained further; start from a directory written by `kformer train`."
    )


def test_a_backup_that_cannot_be_resumed_is_one_sentence_saying_what_to_do(tmp_path):
    config = TrainingConfig(epochs=2)
    damaged = RunDirectory(tmp_path / "damaged")
    backed_up_at(damaged, step=6, epoch=1)
    (damaged.backup / "state.json").write_text("{not json")
    with pytest.raises(jobs.ModelDirectoryError) as raised:
        jobs._fit(spied_model()[0], None, counting_data(), None, 4, damaged, config, 0)
    assert str(raised.value).endswith(
        f"; the interrupted run in {damaged.root} cannot be resumed: delete {damaged.backup} to start it over, or "
        "choose another --out."
    )
    other = RunDirectory(tmp_path / "other")
    backed_up_at(other, step=6, epoch=1)
    wider = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5)])
    wider.compile(keras.optimizers.SGD(1e-4), keras.losses.MeanSquaredError())
    with pytest.raises(jobs.ModelDirectoryError) as raised:
        jobs._fit(wider, None, counting_data(), None, 4, other, config, 0)
    assert str(raised.value) == (
        f"{other.root}: holds an interrupted run of a model of another shape; resume it with the settings it was "
        "started with, or choose another --out."
    )
