"""tf.distribute: two logical CPU devices, and two local worker processes."""

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
from conftest import REPO, run_fresh_python

TRAIN_A_FEW_STEPS = """
    import json, os, sys, time
    import numpy as np
    import tensorflow as tf
    {setup}
    import keras, kformer
    from kformer.training.callbacks import TimeBudget
    from kformer.training.distribute import make_strategy
    from kformer.training.objectives import BudgetSchedule, compile_for_training

    strategy = make_strategy({strategy!r})  # before any other TensorFlow work
    rng = np.random.default_rng(0)
    source = rng.integers(4, 12, size=(64, 5)).astype("int32")
    decoder_tokens = np.concatenate([np.full((64, 1), 2, "int32"), source], 1)
    labels = np.concatenate([source, np.full((64, 1), 3, "int32")], 1)
    sequences = tf.data.Dataset.from_tensor_slices(((source, decoder_tokens), labels))
    data = sequences.batch({batch})

    def shares(context):  # a worker's share: every n-th sequence, in batches of its part of {batch}
        share = sequences.shard(context.num_input_pipelines, context.input_pipeline_id)
        return share.batch(context.get_per_replica_batch_size({batch})).repeat()

    keras.utils.set_random_seed(0)
    reference = kformer.build_transformer(12, 12, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0)
    with strategy.scope():
        model = kformer.build_transformer(12, 12, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0)
        model.set_weights(reference.get_weights())
        schedule = BudgetSchedule(16, 1e9, warmup_steps=10) if {budget} else None
        compile_for_training(model, 16, warmup_steps=10, jit_compile=False, schedule=schedule)
    np.save("weights-initial.npy", np.concatenate([w.ravel() for w in reference.get_weights()]))
    task = json.loads(os.environ.get("TF_CONFIG", '{{"task": {{"index": 0}}}}'))["task"]["index"]
    if {loop}:  # Keras 3.15's fit cannot run multi-worker training; kformer's loop does
        from kformer.training.distribute import fit_across_workers
        budget = None
        if {budget}:  # seconds of a fake clock, 0.1 s a reading on worker 0 and 0.13 s on worker 1, so the
            import itertools, types  # workers' own clocks disagree by a known amount however loaded the machine
            import kformer.training.distribute
            ticks, pace = itertools.count(), 0.1 + 0.03 * task
            kformer.training.distribute.time = types.SimpleNamespace(perf_counter=lambda: pace * next(ticks))
            budget = TimeBudget({budget} / 60, schedule=schedule)
        callbacks = [budget] if budget else []
        if {stop} and task == 0:  # the chief alone stops the run at its first epoch's end, as EarlyStopping does
            stop = lambda epoch, logs: setattr(model, "stop_training", True)
            callbacks.append(keras.callbacks.LambdaCallback(on_epoch_end=stop))
        history = fit_across_workers(model, shares, -(-{steps} // 4), 4, callbacks, budget, verbose=0)
        losses = history.history["loss"]
    else:
        losses = model.fit(data, epochs=2, verbose=0).history["loss"]
    np.save(f"weights-{strategy}-{{task}}.npy", np.concatenate([w.ravel() for w in model.get_weights()]))
    steps = int(model.optimizer.iterations.numpy())
    end_rate = float(schedule(steps - 1) / schedule(9)) if schedule else None  # of the peak
    replicas = strategy.num_replicas_in_sync
    print(json.dumps({{"replicas": replicas, "loss": losses, "steps": steps, "end_rate": end_rate}}))
"""

TWO_LOGICAL_CPUS = """
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
"""


def training_code(strategy, setup="", batch=16, loop=False, steps=8, budget=None, stop=False):
    setup = textwrap.indent(textwrap.dedent(setup), "    ").strip()
    settings = dict(setup=setup, strategy=strategy, batch=batch, loop=loop, steps=steps, budget=budget, stop=stop)
    return textwrap.dedent(TRAIN_A_FEW_STEPS.format(**settings))


def run_training(tmp_path, strategy, setup="", **kwargs):
    code = training_code(strategy, setup, **kwargs)
    return json.loads(run_fresh_python(code, cwd=tmp_path).strip().splitlines()[-1])


@pytest.mark.slow
def test_mirrored_over_two_logical_cpus_matches_one_device(tmp_path):
    single = run_training(tmp_path, "default")
    mirrored = run_training(tmp_path, "mirrored", setup=TWO_LOGICAL_CPUS)
    assert (single["replicas"], mirrored["replicas"]) == (1, 2)
    for one, two in zip(single["loss"], mirrored["loss"], strict=True):
        assert abs(one - two) < 1e-3 * one


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_two_workers(tmp_path, code):
    """Runs `code` as the two workers of a local cluster; returns what each printed last, as JSON."""
    processes = start_two_workers([sys.executable, "-c", code], tmp_path)
    results = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return results


@pytest.mark.slow
def test_two_local_workers_train_together(tmp_path):
    results = run_two_workers(tmp_path, training_code("multiworker", loop=True))
    assert [r["replicas"] for r in results] == [2, 2]
    assert results[0]["loss"] == results[1]["loss"]
    assert results[0]["loss"][1] < results[0]["loss"][0]
    # Each step all-reduces the two workers' gradients, each over half of a 16-sequence batch: both end
    # with the same weights, and they are what one process gets from the same loop over the whole batches
    # (up to float rounding in the all-reduce, which Adam's normalised steps amplify in a few weights).
    run_training(tmp_path, "default", loop=True)
    initial, first, second, single = (
        np.load(tmp_path / f"weights-{name}.npy") for name in ("initial", "multiworker-0", "multiworker-1", "default-0")
    )
    np.testing.assert_array_equal(first, second)
    assert np.linalg.norm(first - single) < 0.02 * np.linalg.norm(single - initial)


@pytest.mark.slow
def test_two_local_workers_under_a_time_budget_stop_at_one_step_with_the_schedule_ended(tmp_path):
    """Their clocks disagree: a fake clock, read once a step from the end of the first, 0.10 s a reading on
    worker 0 and 0.13 s on worker 1. Alone, worker 1 would stop at step 117 (1 + 116 readings) and worker 0
    at 151, leaving worker 0 waiting on an all-reduce; schedules ended at different steps would give the two
    different weights."""
    results = run_two_workers(tmp_path, training_code("multiworker", loop=True, steps=100_000, budget=15))
    # Together they stop at the first step whose mean reading (0.115 s a step) reaches 15 s: 1 + 131 readings.
    assert results[0]["steps"] == results[1]["steps"] == 132
    assert results[0]["end_rate"] == results[1]["end_rate"] < 0.1  # down near zero at the budget's end, not at 1e9
    first, second = (np.load(tmp_path / f"weights-multiworker-{task}.npy") for task in (0, 1))
    np.testing.assert_array_equal(first, second)


@pytest.mark.slow
def test_a_callback_that_stops_training_on_the_chief_alone_stops_every_worker_at_that_epochs_end(tmp_path):
    """EarlyStopping runs on the chief only (it reads the validation scores the chief alone computes): when it
    stops the run, the other worker stops after the same step, instead of waiting on an all-reduce forever."""
    results = run_two_workers(tmp_path, training_code("multiworker", loop=True, steps=40, stop=True))
    assert results[0]["steps"] == results[1]["steps"] == 4  # the first epoch of 4 steps, not 10 epochs
    assert len(results[0]["loss"]) == len(results[1]["loss"]) == 1
    first, second = (np.load(tmp_path / f"weights-multiworker-{task}.npy") for task in (0, 1))
    np.testing.assert_array_equal(first, second)


def start_two_workers(command, cwd):
    """`command` started as each of the two workers of a local cluster (worker 0 the chief)."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        env = dict(os.environ, TF_CONFIG=tf_config, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
        pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        processes.append(subprocess.Popen(command, cwd=cwd, env=env, **pipes))
    return processes


def finish_all(processes):
    """Waits for each of `processes` to succeed; returns what each printed."""
    printed = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
        printed.append(stdout)
    return printed


@pytest.mark.slow
def test_two_workers_killed_mid_run_resume_to_the_run_that_was_not_killed(tmp_path):
    """The chief backs the run up every 10 steps; after both workers are killed (one with SIGKILL, as a
    preemption does; the other left waiting on it) the same command on both goes on from the chief's copy,
    each worker skipping the batches its share gave before, and ends where the run that was never killed did."""
    from kformer.model_dir import load

    def command(out):
        return [
            sys.executable, "-m", "kformer", "--quiet", "train", "--out", str(out), "--data", "builtin",
            "--strategy", "multiworker", "--epochs", "4", "--steps-per-epoch", "40", "--backup-steps", "10",
            "--d-model", "32", "--num-heads", "2", "--num-layers", "1", "--d-ff", "64", "--vocab-size", "300",
            "--warmup-steps", "20", "--dropout", "0", "--no-xla",
        ]  # fmt: skip

    chief, worker = finish_all(start_two_workers(command(tmp_path / "whole"), tmp_path))
    assert "test split: BLEU" in chief and "Saved the model directory" in chief, chief
    assert "test split" not in worker and "Saved" not in worker and "the chief saves" in worker, worker

    out = tmp_path / "killed"
    state = out / "training" / "backup" / "state.json"

    def run_until_a_backup_reaches(step):
        workers = start_two_workers(command(out), tmp_path)
        while not (state.exists() and json.loads(state.read_text())["step"] >= step):
            assert all(worker.poll() is None for worker in workers), workers[0].stderr.read()[-3000:]
            time.sleep(0.05)
        return workers

    # SIGTERM (a scheduler's preemption) to the worker that is not the chief: both stop after the same step,
    # exit 130, and the chief saves that step, past its last periodic backup.
    workers = run_until_a_backup_reaches(10)
    before = json.loads(state.read_text())["step"]
    workers[1].send_signal(signal.SIGTERM)
    stderrs = [worker.communicate(timeout=120)[1] for worker in workers]
    for worker, stderr in zip(workers, stderrs, strict=True):
        assert worker.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    stopped_at = json.loads(state.read_text())["step"]
    assert before < stopped_at < 160 and f"interrupted at step {stopped_at:,};" in stderrs[0], (before, stderrs[0])

    # SIGKILL in the second epoch (the first one logged), after the resumed run's next backups: no chance to save;
    # the last backup must do. The chief, left waiting on the lost worker, stops with one sentence saying so.
    workers = run_until_a_backup_reaches(max(50, stopped_at + 10))
    workers[1].kill()
    workers[1].communicate()
    try:
        _, stderr = workers[0].communicate(timeout=120)
    finally:
        workers[0].kill()  # if it hangs: not left running
    assert workers[0].returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    lost = r"another worker stopped answering at step [\d,]+ \(\w+Error: .*\): it was killed.*; the run is saved"
    assert re.search(lost, stderr), stderr[-3000:]
    assert not (out / "config.json").exists()
    killed_at = json.loads(state.read_text())["step"]
    assert max(50, stopped_at + 10) <= killed_at < 160
    history_csv = out / "training" / "history.csv"
    with open(history_csv) as file:
        logged = list(csv.DictReader(file))
    assert [row["epoch"] for row in logged] == [str(epoch) for epoch in range(killed_at // 40)] != []
    with open(history_csv, "a") as file:  # as if killed after logging the epoch under way, before its backup
        file.write(",".join([str(killed_at // 40)] + ["9.9"] * (len(logged[0]) - 1)) + "\n")

    finish_all(start_two_workers(command(out), tmp_path))
    whole, resumed = load(tmp_path / "whole"), load(out)
    assert resumed.config["result"]["resumed_from"] == killed_at
    assert resumed.config["result"]["steps"] == whole.config["result"]["steps"] == 160
    whole_weights, resumed_weights = (
        np.concatenate([w.ravel() for w in trained.model.get_weights()]) for trained in (whole, resumed)
    )
    assert np.linalg.norm(resumed_weights - whole_weights) < 1e-4 * np.linalg.norm(whole_weights)
    # The chief kept the record a single process keeps: an epoch a line (validated; across the restart, the
    # line logged before it kept and the stale one dropped), the learning curves, and the last epoch's metrics.
    for directory, trained in ((tmp_path / "whole", whole), (out, resumed)):
        with open(directory / "training" / "history.csv") as file:
            rows = list(csv.DictReader(file))
        assert [row["epoch"] for row in rows] == ["0", "1", "2", "3"]
        assert all(0 < float(row["val_chrf"]) < 100 and float(row["loss"]) != 9.9 for row in rows)
        assert (directory / "learning_curves.png").stat().st_size > 10_000
        result = trained.config["result"]
        assert result["epochs_run"] == 4 and result["val_chrf"] == round(float(rows[-1]["val_chrf"]), 4), result


@pytest.mark.slow
def test_two_workers_train_a_language_model_that_only_the_chief_saves(tmp_path):
    command = [
        sys.executable, "-m", "kformer", "--quiet", "train", "--task", "lm", "--data", "builtin",
        "--out", str(tmp_path / "lm"), "--strategy", "multiworker", "--epochs", "1", "--steps-per-epoch", "6",
        "--d-model", "32", "--num-heads", "2", "--num-layers", "1", "--d-ff", "64", "--vocab-size", "300", "--no-xla",
    ]  # fmt: skip
    chief, worker = finish_all(start_two_workers(command, tmp_path))
    assert "Perplexity on 500 held-out lines" in chief and "Saved the language model" in chief, chief
    assert "perplexity" not in worker and "Saved" not in worker and "the chief saves the language model" in worker
    saved = json.loads((tmp_path / "lm" / "config.json").read_text())
    assert saved["result"]["steps"] == 6, saved["result"]


class Calls(keras.callbacks.Callback):
    """Records every callback call fit makes: (hook, epoch or batch, the logs' keys, the loss given)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __getattribute__(self, name):
        if name.startswith("on_"):
            return lambda *args, **kwargs: self._record(name, *args, **kwargs)
        return super().__getattribute__(name)

    def _record(self, hook, *args, logs=None):  # (epoch or batch, logs), (logs) or ()
        index = args[0] if args and not isinstance(args[0], dict) else None
        logs = logs or next((arg for arg in args if isinstance(arg, dict)), {})
        self.calls.append((hook, index, tuple(sorted(logs)), logs.get("loss"), logs.get("val_loss")))


def copy_sequences(seed):
    """48 sequences of 5 tokens to copy, unbatched: ((source, [START] + source), source + [END])."""
    import tensorflow as tf

    source = np.random.default_rng(seed).integers(4, 12, size=(48, 5)).astype("int32")
    decoder_tokens = np.concatenate([np.full((48, 1), 2, "int32"), source], 1)
    labels = np.concatenate([source, np.full((48, 1), 3, "int32")], 1)
    return tf.data.Dataset.from_tensor_slices(((source, decoder_tokens), labels))


def test_the_loop_for_workers_calls_the_same_callbacks_as_fit_and_ends_as_fit_does():
    """Under the default strategy, `fit_across_workers` and `model.fit`, from the same weights on the same
    batches with the same callbacks: the same calls in the same order (every batch's begin and end, each epoch's,
    train end), the same losses and validation losses, EarlyStopping (patience 1, a baseline no epoch reaches)
    stopping both after the second of three epochs, and the same weights at the end, the optimizer's moving
    average (--ema) put into them (without it the weights are the raw ones, far from these)."""
    import keras

    import kformer
    from kformer.training.distribute import fit_across_workers
    from kformer.training.objectives import compile_for_training

    batches = copy_sequences(seed=0).batch(12)
    keras.utils.set_random_seed(0)
    initial = kformer.build_transformer(12, 12, d_model=16, num_heads=2, num_layers=1, d_ff=32).get_weights()
    runs = {}
    for loop in ("fit", "workers"):
        model = kformer.build_transformer(12, 12, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0)
        model.set_weights(initial)
        compile_for_training(model, 16, warmup_steps=4, jit_compile=False, ema=0.5)
        calls = Calls()
        stopper = keras.callbacks.EarlyStopping("val_loss", patience=1, baseline=0.0)
        callbacks = [calls, stopper]
        if loop == "fit":
            model.fit(
                batches.repeat(),
                epochs=3,
                steps_per_epoch=4,
                validation_data=batches,
                callbacks=callbacks,
                verbose=0,
                shuffle=False,
            )
        else:
            fit_across_workers(
                model, lambda context: batches.repeat(), 3, 4, callbacks, validation_data=batches, verbose=0
            )
        # Not the key biases: the softmax ignores a constant added to every score, so their gradient is zero
        # but for float rounding, which Adam's normalised steps turn into noise the size of the learning rate.
        runs[loop] = calls.calls, [w.numpy() for w in model.weights if not w.path.endswith("key_bias")]

    (fit_calls, fit_weights), (calls, weights) = runs["fit"], runs["workers"]
    assert [call[:2] for call in calls] == [call[:2] for call in fit_calls]
    assert [call[1] for call in calls if call[0] == "on_epoch_end"] == [0, 1]  # stopped after the second
    for (hook, _, keys, loss, val_loss), (_, _, fit_keys, fit_loss, fit_val_loss) in zip(calls, fit_calls, strict=True):
        assert set(keys) <= set(fit_keys)  # fit adds its compiled metrics (accuracy); the loop logs the loss
        if hook in ("on_train_batch_end", "on_epoch_end"):
            assert loss == pytest.approx(fit_loss, rel=1e-5), hook
        if hook == "on_test_end":
            assert loss == pytest.approx(fit_loss, rel=1e-5)
        if hook == "on_epoch_end":
            assert "val_loss" in keys and val_loss == pytest.approx(fit_val_loss, rel=1e-5)
        if hook == "on_train_end":  # the last epoch's logs, as fit gives them
            assert "val_loss" in keys and loss == pytest.approx(fit_loss, rel=1e-5)
    for got, expected in zip(weights, fit_weights, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def counting_model():
    """A one-weight linear model of SGD steps, on batches whose feature is the batch's index."""
    import tensorflow as tf

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
    model.compile(keras.optimizers.SGD(0.01), keras.losses.MeanSquaredError())  # the loop calls model.loss
    indices = tf.data.Dataset.range(1000).map(lambda i: (tf.fill([1, 1], tf.cast(i, tf.float32)), tf.ones([1, 1])))
    return model, lambda context: indices


class Seen(keras.callbacks.Callback):
    """The (epoch, batch) of each train batch's end, and each epoch's end."""

    def __init__(self):
        super().__init__()
        self.batches, self.epochs = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append((self.epoch, batch))

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append((epoch, logs["loss"]))


def test_the_loop_for_workers_resumed_mid_epoch_reads_past_the_steps_done_and_ends_that_epoch():
    """Resumed at step 6 of 4-step epochs: epoch 1 goes on at its batch 2, reading from the 7th batch; the epoch's
    loss is the mean over the batches run since."""
    from kformer.training.distribute import fit_across_workers

    model, data = counting_model()
    seen = Seen()
    fit_across_workers(model, data, 3, 4, [seen], initial_step=6, verbose=0)
    assert seen.batches == [(1, 2), (1, 3), (2, 0), (2, 1), (2, 2), (2, 3)]
    assert [epoch for epoch, _ in seen.epochs] == [1, 2]
    # The first step saw feature 6: its gradient 2 * (0 - 1) * 6 = -12, so SGD(0.01) sets the weight to 0.12.
    model2, _ = counting_model()
    fit_across_workers(model2, data, 2, 4, [], initial_step=6, verbose=0)  # one step less: epoch 1 only
    assert float(model2.get_weights()[0][0, 0]) == pytest.approx(0.12 - 0.01 * 2 * (0.12 * 7 - 1) * 7, rel=1e-5)
    # Saved at an epoch's last step before that epoch's end ran (the backup's epoch 1 at step 4): epoch 1 first ends.
    seen = Seen()
    fit_across_workers(*counting_model(), 2, 4, [seen], initial_step=4, initial_epoch=0, verbose=0)
    assert seen.batches == [(1, 0), (1, 1), (1, 2), (1, 3)] and seen.epochs[0][0] == 0
    assert np.isnan(seen.epochs[0][1])  # its loss is not known


def test_the_loop_for_workers_stops_at_the_budgets_step_and_on_an_interrupt_saves_and_stops(tmp_path):
    import signal

    from kformer.training.callbacks import Backup, TimeBudget, TrainingInterrupted
    from kformer.training.distribute import fit_across_workers

    model, data = counting_model()
    budget, seen = TimeBudget(minutes=0.0), Seen()
    history = fit_across_workers(model, data, 5, 4, [seen, budget], budget=budget, verbose=0)
    assert seen.batches == [(0, 0)] and budget.expired  # no time: one step, then every worker stops
    assert [epoch for epoch, _ in seen.epochs] == [0] and len(history.history["loss"]) == 1  # its epoch ended
    assert budget.shared_seconds == 0.0  # the workers' mean clock, which starts at the first step's end

    model, data = counting_model()
    backup = Backup(tmp_path, every_steps=1000)
    ctrl_c = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: batch == 1 and signal.raise_signal(signal.SIGINT)
    )
    with pytest.raises(TrainingInterrupted, match="^interrupted at step 3;"), backup.guard_interrupts():
        fit_across_workers(model, data, 5, 4, [ctrl_c, backup], backup=backup, verbose=0)
    assert backup.saved_step() == 3  # told at step 2's end, agreed in step 3's all-reduce, saved there
    assert int(model.optimizer.iterations.numpy()) == 3


def test_a_lost_worker_is_one_sentence_naming_the_step_the_error_and_the_backup(tmp_path):
    import tensorflow as tf

    from kformer.training.callbacks import Backup
    from kformer.training.distribute import _worker_lost

    error = tf.errors.UnavailableError(None, None, "Socket closed\nlong TensorFlow trace")
    assert str(_worker_lost(1234, None, error)) == (
        "another worker stopped answering at step 1,234 (UnavailableError: Socket closed): it was killed, or it "
        "failed and its own output says why; there is no backup to resume from yet; run the same command on every "
        "worker to start again."
    )
    (tmp_path / "state.json").write_text('{"step": 1200, "epoch": 3, "seconds": 1.0, "weights": "w"}')
    blank = tf.errors.DeadlineExceededError(None, None, "")
    assert str(_worker_lost(1234, Backup(tmp_path), blank)) == (
        "another worker stopped answering at step 1,234 (DeadlineExceededError: DeadlineExceededError): it was "
        f"killed, or it failed and its own output says why; the run is saved at step 1,200 in {tmp_path}; run the "
        "same command on every worker to resume it."
    )


def test_strategies_are_made_by_name_and_an_unknown_name_is_one_sentence():
    """The two that can be made inside a test process without changing it for the tests after (a multiworker or
    TPU strategy sets up the process's collectives: the fresh-process tests above make those)."""
    import tensorflow as tf

    from kformer.training.distribute import make_strategy

    assert make_strategy() is tf.distribute.get_strategy() and make_strategy("default") is make_strategy()
    mirrored = make_strategy("mirrored")
    assert isinstance(mirrored, tf.distribute.MirroredStrategy)
    with pytest.raises(ValueError, match=r"^unknown strategy 'gpu'; choose one of default, mirrored, multiworker, tpu"):
        make_strategy("gpu")


def test_the_multiworker_and_tpu_strategies_are_made_as_tensorflow_documents_them(monkeypatch):
    """Without a cluster or a TPU here, TensorFlow's classes replaced by recorders: "multiworker" is a
    MultiWorkerMirroredStrategy (the cluster from TF_CONFIG, read by it); "tpu" resolves the TPU, connects to its
    cluster, initializes its system and makes the TPUStrategy on that one resolver, in that order (TensorFlow's
    TPU guide). The real multiworker strategy is made in the two-worker runs above."""
    import tensorflow as tf

    from kformer.training.distribute import make_strategy

    calls = []

    def recorder(name):
        return lambda *args: calls.append((name, *args)) or (name, *args)

    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", recorder("multiworker"))
    assert make_strategy("multiworker") == ("multiworker",)
    calls.clear()
    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", lambda: "resolver")
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", recorder("connect"))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", recorder("initialize"))
    monkeypatch.setattr(tf.distribute, "TPUStrategy", recorder("strategy"))
    assert make_strategy("tpu") == ("strategy", "resolver")
    assert calls == [("connect", "resolver"), ("initialize", "resolver"), ("strategy", "resolver")]


def test_the_loops_validation_loss_is_keras_evaluates_with_dropout_off_on_batches_of_unequal_size():
    """`evaluate` (the reference) weighs each batch by its sequences and runs the model for inference: on batches
    of 20, 20 and 8 of a model with dropout 0.5, the loop's validation loss is evaluate's, and the test hooks get
    the running mean at each batch's end."""

    import kformer
    from kformer.training.distribute import _validation_loss
    from kformer.training.objectives import compile_for_training

    data = copy_sequences(seed=1).batch(20)
    keras.utils.set_random_seed(0)
    model = kformer.build_transformer(12, 12, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.5)
    compile_for_training(model, 16, warmup_steps=4, jit_compile=False)
    expected = model.evaluate(data, verbose=0, return_dict=True)["loss"]
    calls = Calls()
    hooks = keras.callbacks.CallbackList([calls], model=model)
    assert _validation_loss(model, data, hooks) == pytest.approx(expected, rel=1e-5)
    batches = [(hook, batch) for batch in range(3) for hook in ("on_test_batch_begin", "on_test_batch_end")]
    assert [call[:2] for call in calls.calls] == [("on_test_begin", None), *batches, ("on_test_end", None)]
    ends = [loss for hook, _, _, loss, _ in calls.calls if hook in ("on_test_batch_end", "on_test_end")]
    assert ends[-2] == ends[-1] == pytest.approx(expected, rel=1e-5) and ends[0] != ends[-1]


def test_the_loop_for_workers_shows_fits_progress_bar_by_default_and_fits_lines_at_verbose_2(capsys):
    """Its printed progress against `fit`'s on the same model and batches, times and losses blanked out: by default
    each epoch's bar as it is left at the epoch's end (how often it is redrawn before depends on the machine's
    pace), at verbose 2 every line, at 0 nothing."""
    from kformer.training.distribute import fit_across_workers

    def shown(run):
        model, data = counting_model()
        run(model, data)
        printed = re.sub(r"\d+(\.\d+)?(ms|us|s)(/step)?", "T", capsys.readouterr().out.replace("\b", ""))
        printed = re.sub(r"loss: \d+\.\d+(e[-+]\d+)?", "loss: L", printed)
        return [epoch.split("\r")[-1].strip() for epoch in printed.split("\n") if epoch.strip()]  # the last drawing

    def fit(**verbose):
        return lambda model, data: model.fit(data(None), epochs=2, steps_per_epoch=4, shuffle=False, **verbose)

    by_default = shown(lambda model, data: fit_across_workers(model, data, 2, 4, []))
    assert by_default == shown(fit())
    bar = "\x1b[1m4/4\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m\x1b[37m\x1b[0m \x1b[1mT\x1b[0m T - loss: L"
    assert by_default == ["Epoch 1/2", bar, "Epoch 2/2", bar]
    lines = shown(lambda model, data: fit_across_workers(model, data, 2, 4, [], verbose=2))
    assert (
        lines == shown(fit(verbose=2)) == ["Epoch 1/2", "4/4 - T - T - loss: L", "Epoch 2/2", "4/4 - T - T - loss: L"]
    )
    assert shown(lambda model, data: fit_across_workers(model, data, 2, 4, [], verbose=0)) == []


def test_the_loop_for_workers_hands_each_worker_its_input_context_and_a_resumed_budget_its_seconds(tmp_path):
    """Under the default strategy the datasets function gets the one pipeline's context; a run resumed with its
    whole budget spent (the backup's seconds) stops after its first step, on every worker's clock alike."""
    import tensorflow as tf

    from kformer.training.callbacks import Backup, TimeBudget
    from kformer.training.distribute import fit_across_workers

    model, data = counting_model()
    contexts = []
    fit_across_workers(model, lambda context: contexts.append(context) or data(context), 1, 2, [], verbose=0)
    assert [type(context) for context in contexts] == [tf.distribute.InputContext]
    assert (contexts[0].num_input_pipelines, contexts[0].input_pipeline_id) == (1, 0)
    model, data = counting_model()
    budget, backup, seen = TimeBudget(minutes=1.0, spent_seconds=60.0), Backup(tmp_path, every_steps=1000), Seen()
    backup.seconds = 60.0  # as `restore` reads it from a run that spent its minute
    fit_across_workers(model, data, 5, 4, [seen, budget], budget=budget, backup=backup, verbose=0)
    assert seen.batches == [(0, 0)] and budget.shared_seconds == pytest.approx(60.0)


def test_the_loop_for_workers_clock_counts_from_the_first_steps_end_plus_the_seconds_spent_before(
    tmp_path, monkeypatch
):
    """On a clock that reads 10 s later each time: the clock the workers share reads 0 at the first step (its
    end starts it), then 10, 20, 30 s, where a half-minute budget stops the run; resumed with 15 s spent, 15 to 35."""
    import itertools
    import types

    import kformer.training.distribute
    from kformer.training.callbacks import Backup, TimeBudget
    from kformer.training.distribute import fit_across_workers

    def shared_clock(spent):
        ticks = itertools.count(10, 10)
        clock = types.SimpleNamespace(perf_counter=lambda: next(ticks))
        monkeypatch.setattr(kformer.training.distribute, "time", clock)
        model, data = counting_model()
        budget, backup = TimeBudget(minutes=0.5, spent_seconds=spent), Backup(tmp_path, every_steps=1000)
        backup.seconds = spent  # as `restore` reads it
        readings = []
        read = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: readings.append(budget.shared_seconds))
        fit_across_workers(model, data, 5, 4, [read, budget], budget=budget, backup=backup, verbose=0)
        return readings

    assert shared_clock(0.0) == [0.0, 10.0, 20.0, 30.0]
    assert shared_clock(15.0) == [15.0, 25.0, 35.0]


def test_a_worker_lost_in_a_step_or_at_an_epochs_end_stops_the_loop_with_its_sentence(tmp_path, monkeypatch):
    """TensorFlow's error for a peer that is gone, raised by the third step's all-reduce (a backup saved at step 2)
    and by the agreement at the first epoch's end (no backup): each stops the loop with the step it failed at."""
    import itertools

    import tensorflow as tf

    import kformer.training.distribute as distribute
    from kformer.training.callbacks import Backup, WorkerLost
    from kformer.training.distribute import fit_across_workers

    real_step = distribute._train_step

    def failing_third_step(model, strategy):
        step, calls = real_step(model, strategy), itertools.count(1)

        def run(batch, signals):
            if next(calls) == 3:
                raise tf.errors.UnavailableError(None, None, "Socket closed")
            return step(batch, signals)

        return run

    def gone(strategy, flag):
        raise tf.errors.DeadlineExceededError(None, None, "Deadline Exceeded")

    def stops_saying(message, saved_step=None):
        backup, message = None, "^another worker stopped answering at " + message
        if saved_step is None:
            message += r".* there is no backup to resume from yet"
        else:
            (tmp_path / "state.json").write_text(
                f'{{"step": {saved_step}, "epoch": 0, "seconds": 1.0, "weights": "w"}}'
            )
            backup = Backup(tmp_path, every_steps=1000)
            message += rf".* the run is saved at step {saved_step} in {re.escape(str(tmp_path))}; run the same command"
        with pytest.raises(WorkerLost, match=message):
            fit_across_workers(*counting_model(), 2, 4, [], backup=backup, verbose=0)

    monkeypatch.setattr(distribute, "_train_step", failing_third_step)
    stops_saying(r"step 3 \(UnavailableError: Socket closed\): ", saved_step=2)
    monkeypatch.setattr(distribute, "_train_step", real_step)
    monkeypatch.setattr(distribute, "_any_worker", gone)
    stops_saying(r"step 4 \(DeadlineExceededError: Deadline Exceeded\): ", saved_step=4)
    stops_saying(r"step 4 \(DeadlineExceededError: Deadline Exceeded\): ")
