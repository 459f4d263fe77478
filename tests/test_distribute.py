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
        losses = fit_across_workers(model, shares, {steps}, strategy, budget, log_every=4, verbose=0)["loss"]
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


def training_code(strategy, setup="", batch=16, loop=False, steps=8, budget=None):
    setup = textwrap.indent(textwrap.dedent(setup), "    ").strip()
    return textwrap.dedent(
        TRAIN_A_FEW_STEPS.format(setup=setup, strategy=strategy, batch=batch, loop=loop, steps=steps, budget=budget)
    )


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
