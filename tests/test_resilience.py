"""Training that is interrupted, killed, diverges or cannot write: nothing is lost, nothing is faked.

The runs train the built-in corpus through the `kformer train` command, in
subprocesses, so that signals reach a real process. A 1-layer, 32-wide model
learns that corpus in a few hundred steps, so "as good as an uninterrupted
run" is a real comparison, not two untrained models.
"""

import csv
import json
import os
import re
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest
from conftest import EPOCHS, REPO, SMALL_SETTINGS, STEPS_PER_EPOCH, VOCAB, train_command

from kformer.cli import main
from kformer.data.text import Tokenizer
from kformer.model_dir import load
from kformer.training.callbacks import Backup
from kformer.training.config import TrainingConfig


def start(command):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process, timeout=300):
    stdout, stderr = process.communicate(timeout=timeout)
    return process.returncode, stdout, stderr


def history(out):
    with open(out / "training" / "history.csv") as file:
        return list(csv.DictReader(file))


def saved_state(out):
    return json.loads((out / "training" / "backup" / "state.json").read_text())


def wait_for_a_backup(process, out):
    while not (out / "training" / "backup" / "state.json").exists():
        assert process.poll() is None, "training ended before its first backup"
        time.sleep(0.05)


@pytest.mark.slow
def test_the_default_recipe_learns_the_builtin_corpus(clean_run):
    """Bucketed batches, label smoothing 0.1, dropout 0.1, XLA, the paper's Adam and warmup: only the size is small."""
    out, printed = clean_run
    config = json.loads((out / "config.json").read_text())["training"]
    defaults = TrainingConfig()
    assert (
        [config[k] for k in ("label_smoothing", "dropout", "jit_compile", "batch_size")]
        == [defaults.label_smoothing, defaults.dropout, defaults.jit_compile, defaults.batch_size]
        == [0.1, 0.1, None, 64]  # jit_compile None: XLA, except for bfloat16 on a CPU
    )
    exact_match = float(re.search(r"test split: .* exact match ([\d.]+)%", printed).group(1))
    assert exact_match >= 95.0, printed  # 400 steps; unseen adjective-noun pairs in every test sentence


@pytest.mark.slow
def test_interrupted_then_killed_then_resumed_ends_as_good_as_a_clean_run(clean_run, tmp_path):
    seed = int.from_bytes(os.urandom(4), "little")  # a new moment each run; the seed in a failure replays it
    rng = np.random.default_rng(seed)
    out = tmp_path / "model"
    # Backups only at epoch ends (80 steps): between the signal and the stop, the interrupt's own save is the
    # only one, unless the signal lands in an epoch's last moments.
    command = train_command(out, "--epochs", str(EPOCHS), "--backup-steps", "1000")

    # Ctrl-C at a random moment: saved, resumable, one clear line, exit status 130.
    first = start(command)
    wait_for_a_backup(first, out)
    time.sleep(rng.uniform(0.0, 2.0))
    assert first.poll() is None, f"seed {seed}"
    before = saved_state(out)["step"]
    first.send_signal(signal.SIGINT)
    code, _, stderr = finish(first, timeout=60)
    assert code == 130, stderr[-3000:]
    assert "Run the same command again to resume it" in stderr and "Traceback" not in stderr
    interrupted = saved_state(out)
    assert interrupted["step"] > before, f"seed {seed}: the interrupt saved nothing"
    assert f"interrupted at step {interrupted['step']:,};" in stderr
    assert not (out / "config.json").exists()

    # SIGKILL at a random later moment: no chance to save; the last backup must do.
    second = start(command)
    while saved_state(out)["step"] <= interrupted["step"]:
        assert second.poll() is None, "the resumed run ended before its next backup"
        time.sleep(0.05)
    time.sleep(rng.uniform(0.0, 2.0))
    assert second.poll() is None, f"seed {seed}"
    second.kill()
    second.wait()
    killed = saved_state(out)
    assert not (out / "config.json").exists()

    code, _, stderr = finish(start(command))
    assert code == 0, stderr[-3000:]
    result = json.loads((out / "config.json").read_text())["result"]
    # It went on from the last backup: the epoch cut short by the kill ran again from its start.
    assert result["steps"] == killed["step"] + (EPOCHS - killed["epoch"]) * STEPS_PER_EPOCH
    # The budget schedule ends at the run's real last step (later than 5 x 80 after a mid-epoch Ctrl-C,
    # whose epoch ran again whole): no step trained at rate zero.
    schedule = load(out).model.optimizer.get_config()["learning_rate"]
    assert schedule["config"]["total_steps"] == result["steps"], schedule
    assert killed["step"] > interrupted["step"] > 0
    assert [row["epoch"] for row in history(out)] == [str(epoch) for epoch in range(EPOCHS)]
    # The record covers the whole run, epochs before the restarts included.
    assert result["epochs_run"] == EPOCHS
    assert result["val_chrf_kept"] == max(float(row["val_chrf"]) for row in history(out))
    assert all(0 < float(row["val_bleu"]) <= 100 for row in history(out))  # the BLEU of the same translations
    assert not (out / "training" / "backup").exists()

    clean_loss = float(history(clean_run[0])[-1]["val_loss"])
    resumed_loss = float(history(out)[-1]["val_loss"])
    assert clean_loss < 2.0  # the runs did learn: an untrained model is at ln(300) = 5.7
    assert resumed_loss <= clean_loss * 1.05


@pytest.mark.slow
def test_a_second_run_into_the_same_out_refuses_while_the_first_one_lives(tmp_path):
    import socket

    out = tmp_path / "model"
    command = train_command(out, "--epochs", str(EPOCHS))
    first = start(command)
    while not (out / ".kformer.lock").exists():
        assert first.poll() is None, "the first run ended before it held its directory"
        time.sleep(0.05)
    code, _, stderr = finish(start(command), timeout=120)
    assert first.poll() is None, "the first run ended before the second one was refused"
    assert code == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert f"another kformer run is writing it (pid {first.pid} on {socket.gethostname()}, started " in stderr
    code, _, stderr = finish(first)
    assert code == 0, stderr[-3000:]
    assert [row["epoch"] for row in history(out)] == [str(epoch) for epoch in range(EPOCHS)]  # one header, once each
    assert not (out / ".kformer.lock").exists()


def test_a_resumed_runs_record_is_read_back_whole(tmp_path):
    """Keras' CSVLogger appends across restarts: an epoch run again is logged once, as last run; empty columns go."""
    import keras

    from kformer.training.history import forget_epochs, whole_history

    path = tmp_path / "history.csv"

    def run(epochs):
        logger = keras.callbacks.CSVLogger(str(path), append=True)
        logger.on_train_begin()
        for epoch, loss in epochs:
            logger.on_epoch_end(epoch, {"loss": loss, "accuracy": 1.0 - loss / 10})  # no validation: val_* "NA"
        logger.on_train_end()

    run([(0, 3.0), (1, 2.0)])  # killed after logging epoch 1, before its backup
    with open(path, "a") as file:
        file.write("1,0.8,2.0,extra field\n")  # a line with a field too many goes as well, and nothing else breaks
    forget_epochs(path, 1)  # resumed from the backup of epoch 0's end: epoch 1 runs again
    run([(1, 1.9), (2, 1.5)])
    with open(path) as file:
        assert [row["epoch"] for row in csv.DictReader(file)] == ["0", "1", "2"]
    assert whole_history(path) == {"accuracy": [0.7, 0.81, 0.85], "loss": [3.0, 1.9, 1.5]}


def test_a_record_keeps_its_epochs_before_the_restart_drops_what_is_not_an_epoch_and_reads_back_at_any_size(tmp_path):
    from kformer.training.history import forget_epochs, whole_history

    path = tmp_path / "history.csv"
    path.write_text("epoch,loss,val_bleu\n0,3.0,\n1,2.0,\ngarbage line\n2,1.5,\n", encoding="utf-8")
    forget_epochs(path, 2)  # resumed at epoch 2: epochs 0 and 1 stay, the line that is no epoch goes
    assert path.read_text(encoding="utf-8") == "epoch,loss,val_bleu\n0,3.0,\n1,2.0,\n"
    assert whole_history(path) == {"loss": [3.0, 2.0]}  # an empty column is left out, as "NA" is
    path.write_text("epoch,loss\n0,3.0\n", encoding="utf-8")
    assert whole_history(path) == {"loss": [3.0]}
    path.write_text("epoch,loss\n", encoding="utf-8")  # killed before its first epoch ended
    assert whole_history(path) == {}


@pytest.mark.slow  # moved from the default suite to keep it within 8 minutes
def test_a_diverging_run_stops_with_one_message_and_keeps_the_last_good_weights(tmp_path):
    out = tmp_path / "model"
    # The default (budget) schedule at 1e10 times the paper's rate: its warmup leaves a few good steps before the
    # loss blows up (at step 5 here), and a backup every step keeps the last of them.
    command = train_command(out, "--epochs", "2", "--backup-steps", "1", "--learning-rate-scale", "1e10")
    code, _, stderr = finish(start(command))
    assert code == 1
    assert "the loss became nan at step" in stderr and "Traceback" not in stderr
    assert not (out / "config.json").exists() and not (out / "model.keras").exists()
    nan_step = int(stderr.split("the loss became nan at step ")[1].split(";")[0])
    assert 1 <= saved_state(out)["step"] < nan_step
    with h5py.File(out / "training" / "backup" / saved_state(out)["weights"]) as weights:
        arrays = []
        weights.visititems(lambda name, item: arrays.append(item[()]) if isinstance(item, h5py.Dataset) else None)
    assert len(arrays) > 10 and all(np.isfinite(array).all() for array in arrays)


class Killed(BaseException):
    """What a SIGKILL between two writes leaves on disk: the first happened, the second never does."""


def test_a_backup_killed_between_its_weights_and_its_state_resumes_at_a_step_whose_weights_it_has(
    tmp_path, monkeypatch
):
    import keras

    import kformer.training.callbacks

    def compiled():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(keras.optimizers.Adam(0.1), loss="mse")
        return model

    keras.utils.set_random_seed(0)
    x, y = np.random.default_rng(0).standard_normal((40, 3)), np.random.default_rng(1).standard_normal((40, 2))
    model, weights_at = compiled(), {}
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: weights_at.update({int(model.optimizer.iterations): model.get_weights()})
    )
    states = []

    def write_json_then_die(path, data):  # the second backup dies after its weights, before its state
        if states:
            raise Killed
        states.append(data)
        write_json(path, data)

    write_json = kformer.training.callbacks.write_json
    monkeypatch.setattr(kformer.training.callbacks, "write_json", write_json_then_die)
    with pytest.raises(Killed):
        model.fit(x, y, batch_size=4, epochs=1, callbacks=[record, Backup(tmp_path, every_steps=4)], verbose=0)
    monkeypatch.undo()
    assert int(model.optimizer.iterations) == 8 and states[0]["step"] == 4

    resumed = compiled()
    Backup(tmp_path).restore(resumed)
    assert int(resumed.optimizer.iterations) == 4  # the step state.json names, not the later weights' 8
    for restored, expected in zip(resumed.get_weights(), weights_at[4], strict=True):
        np.testing.assert_array_equal(restored, expected)

    # The next backup clears the weights the killed one wrote.
    resumed.fit(x[:16], y[:16], batch_size=4, epochs=1, callbacks=[Backup(tmp_path, every_steps=4)], verbose=0)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["state.json", "step-8.weights.h5"]


def test_a_backup_from_before_state_json_named_its_weights_still_resumes(tmp_path):
    """Earlier versions kept the weights in latest.weights.h5 and wrote no "weights" key."""
    import keras

    def compiled():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        model.compile(keras.optimizers.Adam(0.1), loss="mse")
        return model

    x, y = np.random.default_rng(0).standard_normal((12, 3)), np.random.default_rng(1).standard_normal((12, 2))
    trained = compiled()
    trained.fit(x, y, batch_size=4, epochs=1, verbose=0)
    trained.save_weights(tmp_path / "latest.weights.h5")
    (tmp_path / "state.json").write_text(json.dumps({"epoch": 1, "step": 3, "seconds": 2.5}))

    resumed, backup = compiled(), Backup(tmp_path, every_steps=3)
    assert backup.restore(resumed) == 1 and backup.restored_step == 3
    assert int(resumed.optimizer.iterations) == 3
    for restored, expected in zip(resumed.get_weights(), trained.get_weights(), strict=True):
        np.testing.assert_array_equal(restored, expected)
    resumed.fit(x, y, batch_size=4, epochs=2, initial_epoch=1, callbacks=[backup], verbose=0)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["state.json", "step-6.weights.h5"]


@pytest.mark.parametrize(
    "damage, named",
    [
        ("state.json cut short", "state.json: not a backup's state"),
        ("state.json without its step", "state.json: not a backup's state"),
        ("weights file deleted", "step-40.weights.h5: missing, though state.json names it"),
        ("weights file not HDF5", "step-40.weights.h5: cannot be read"),
    ],
)
def test_a_damaged_backup_is_one_sentence_that_says_what_to_do(tmp_path, capsys, damage, named):
    out = tmp_path / "model"
    backup = out / "training" / "backup"
    backup.mkdir(parents=True)
    for side in ("source", "target"):  # as the killed run left them (so they are not learned again)
        Tokenizer(VOCAB).save(out / f"{side}_vocab.txt")
    state = {"epoch": 1, "step": 40, "seconds": 9.0, "weights": "step-40.weights.h5"}
    if damage == "state.json cut short":
        (backup / "state.json").write_text(json.dumps(state)[:20])
    elif damage == "state.json without its step":
        (backup / "state.json").write_text(json.dumps({k: v for k, v in state.items() if k != "step"}))
    else:
        (backup / "state.json").write_text(json.dumps(state))
        if damage == "weights file not HDF5":
            (backup / "step-40.weights.h5").write_bytes(b"not an HDF5 file")

    assert main(train_command(out, "--epochs", "1", "--steps-per-epoch", "5")[3:]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kformer train: error: {backup / named.split(':')[0]}:"), err
    assert named in err and f"delete {backup} to start it over, or choose another --out." in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert not (out / "model.keras").exists()


def test_an_unwritable_out_is_refused_before_training(tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the directory should go")
    code, _, stderr = finish(start(train_command(blocked / "model", "--epochs", "1")), timeout=120)
    assert code == 2
    assert f"{blocked / 'model'}: cannot write there" in stderr and "Traceback" not in stderr


def test_too_little_disk_space_is_refused_before_training(tmp_path, monkeypatch, capsys):
    import shutil
    import types

    from kformer.files import require_space
    from kformer.model_dir import ModelDirectoryError

    monkeypatch.setattr(shutil, "disk_usage", lambda path: types.SimpleNamespace(free=2**20))
    with pytest.raises(ModelDirectoryError, match=r"1 MiB free, but training this model writes about 305 MiB"):
        require_space(tmp_path, 320_000_000, "training this model")
    # And the training job asks before its first step: nothing but the vocabularies and the run's task is written.
    out = tmp_path / "model"
    assert main(train_command(out, "--epochs", "1")[3:]) == 2
    assert re.search(r"1 MiB free, but training this model writes about [\d.]+ MiB", capsys.readouterr().err)
    assert [p.name for p in (out / "training").iterdir()] == ["run.json"]


@pytest.mark.slow
def test_same_seed_same_weights(tmp_path):
    """Same seed, data and machine: bit-identical weights, dropout and shuffling included (on CPU, with no flag)."""
    from kformer.data.corpus import builtin_splits
    from kformer.training.jobs import train_translator

    splits = builtin_splits()
    config = dict(SMALL_SETTINGS, epochs=1, steps_per_epoch=30, seed=3)

    def train(name, **changes):
        return train_translator(splits, tmp_path / name, TrainingConfig(**{**config, **changes}), verbose=0).model

    first, again = train("first"), train("again")
    assert int(first.optimizer.iterations.numpy()) == int(again.optimizer.iterations.numpy()) == 30
    assert all(np.array_equal(a, b) for a, b in zip(first.get_weights(), again.get_weights(), strict=True))
    other = train("other", seed=4)  # and the seed is what decides: another gives other weights
    assert not any(np.array_equal(a, b) for a, b in zip(first.get_weights(), other.get_weights(), strict=True))


@pytest.mark.slow  # 20 s: a run stopped by its callback, then resumed
def test_a_callback_of_your_own_runs_at_each_step_and_its_error_stops_the_run_with_the_backup_kept(tmp_path):
    """`train_translator(..., callbacks=[...])`: the user's callback sees every step; when it raises, the run
    stops with its error (not a message of kformer's), nothing looks finished, and the same call resumes from
    the backup's last copy (every 3 steps)."""
    import keras

    from kformer.data.corpus import builtin_splits
    from kformer.training.jobs import train_translator

    class Tracker(keras.callbacks.Callback):
        def __init__(self, fail_at=None):
            super().__init__()
            self.steps, self.fail_at = [], fail_at

        def on_train_batch_end(self, batch, logs=None):
            self.steps.append(int(self.model.optimizer.iterations.numpy()))
            if self.steps[-1] == self.fail_at:
                raise ConnectionError("the tracking server did not answer")

    splits, out = builtin_splits(), tmp_path / "run"
    config = TrainingConfig(**SMALL_SETTINGS, epochs=1, steps_per_epoch=10, backup_steps=3, jit_compile=False)
    failing = Tracker(fail_at=7)
    with pytest.raises(ConnectionError, match="the tracking server did not answer"):
        train_translator(splits, out, config, verbose=0, callbacks=[failing])
    assert failing.steps == [1, 2, 3, 4, 5, 6, 7]
    assert saved_state(out)["step"] == 6 and not (out / "config.json").exists()
    working = Tracker()
    result = train_translator(splits, out, config, verbose=0, callbacks=[working]).config["result"]
    assert result["resumed_from"] == 6 and working.steps[0] == 7


def test_the_backup_saves_at_every_multiple_of_its_steps_as_the_checkpoint_average_takes_them(tmp_path, monkeypatch):
    """--backup-steps 4 over two 10-step epochs: copies at steps 4, 8, 12, 16 and 20 (the optimizer's steps, those
    `CheckpointAverage` takes its checkpoints at), and at each epoch's end; not at the 4th batch of each epoch."""
    from kformer.data.corpus import builtin_splits
    from kformer.training.jobs import train_translator

    saved, save = [], Backup.save

    def counted(self, epoch):
        saved.append(int(self.model.optimizer.iterations.numpy()))
        save(self, epoch)

    monkeypatch.setattr(Backup, "save", counted)
    config = TrainingConfig(**SMALL_SETTINGS, epochs=2, steps_per_epoch=10, backup_steps=4, jit_compile=False)
    train_translator({"train": builtin_splits()["train"]}, tmp_path / "run", config, verbose=0)
    assert sorted(set(saved)) == [4, 8, 10, 12, 16, 20]


@pytest.fixture(scope="module")
def run_whose_last_save_failed(tmp_path_factory):
    """A 5-step run whose final save meets a full disk: (its model directory, exit status, stderr).

    Shared: the full-disk test reads it, the resume test resumes a copy. (--no-xla: what is tested
    is not the compiled step, and compiling it costs a run 10 s.)
    """
    import contextlib
    import errno
    import io

    import keras

    def no_space(self, path, *args, **kwargs):
        with open(path, "wb") as file:
            file.write(b"half a model")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    out, stderr = tmp_path_factory.mktemp("full-disk") / "model", io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(stderr):
        patch.setattr(keras.Model, "save", no_space)
        code = main(train_command(out, "--epochs", "1", "--steps-per-epoch", "5", "--no-xla")[3:])
    return out, code, stderr.getvalue()


def test_a_disk_that_fills_while_saving_leaves_a_resumable_run_not_a_finished_one(run_whose_last_save_failed):
    out, code, err = run_whose_last_save_failed
    assert code == 1
    assert "kformer train: error: " in err and "model.keras: No space left on device." in err
    # No config.json, no model.keras, no half-written temporary file: nothing that looks finished.
    assert {p.name for p in out.iterdir()} == {
        "learning_curves.png",
        "source_vocab.txt",
        "target_vocab.txt",
        "training",
    }
    assert saved_state(out)["epoch"] == 1  # the run is still there to finish once there is room


def train_until_ctrl_c(splits, out, config, ctrl_c):
    """The training job with the callback `ctrl_c` of the user's, which must interrupt it (SIGINT): it runs
    before the backup, which sees the signal at the same step."""
    from kformer.training import jobs
    from kformer.training.callbacks import TrainingInterrupted

    with pytest.raises(TrainingInterrupted):
        jobs.train_translator(splits, out, config, verbose=0, callbacks=[ctrl_c])


@pytest.mark.slow
def test_a_run_resumed_after_ctrl_c_goes_on_with_the_batches_it_had_not_trained_on(tmp_path):
    """Ctrl-C as the first of two epochs ends, then the same job again: the resumed run reads past the batches
    it trained on, so its second epoch is the uninterrupted run's, loss for loss and weight for weight (read
    from the start again, it would train on the first epoch's batches twice)."""
    import keras

    from kformer.data.corpus import builtin_splits
    from kformer.training import jobs

    splits = builtin_splits()
    # No dropout: a resumed run draws other masks, which is not what is tested here.
    config = TrainingConfig(**SMALL_SETTINGS, epochs=2, steps_per_epoch=10, backup_steps=1000, seed=3, dropout=0.0)

    class CtrlC(keras.callbacks.Callback):  # runs before the backup's own epoch end, which sees the signal
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                os.kill(os.getpid(), signal.SIGINT)

    clean = jobs.train_translator(splits, tmp_path / "clean", config, verbose=0).model
    out = tmp_path / "resumed"
    train_until_ctrl_c(splits, out, config, CtrlC())
    assert saved_state(out)["step"] == 10
    resumed = jobs.train_translator(splits, out, config, verbose=0).model
    assert int(resumed.optimizer.iterations.numpy()) == 20
    assert [row["loss"] for row in history(out)] == [row["loss"] for row in history(tmp_path / "clean")]
    assert all(np.array_equal(a, b) for a, b in zip(clean.get_weights(), resumed.get_weights(), strict=True))


@pytest.mark.slow
def test_a_run_resumed_in_the_middle_of_an_epoch_goes_on_from_the_next_batch(tmp_path):
    """Ctrl-C after step 5 of a 10-step epoch, then the same job again: the resumed run reads past the 5
    batches it trained on and goes on with the 6th. Keras reruns the cut epoch whole, so it trains 5 + 20
    steps: on the paper's schedule (which does not depend on the run's length) and with no dropout, its
    weights are to the bit those of a run never stopped that trains 25 steps."""
    import keras

    from kformer.data.corpus import builtin_splits
    from kformer.training import jobs

    train = {"train": builtin_splits()["train"]}  # no validation: nothing but the batches decides the weights
    settings = dict(SMALL_SETTINGS, schedule="noam", backup_steps=1000, seed=3, dropout=0.0, jit_compile=False)

    class CtrlC(keras.callbacks.Callback):  # before the backup's own batch end, which sees the signal
        def on_train_batch_end(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 5:
                os.kill(os.getpid(), signal.SIGINT)

    config = TrainingConfig(**settings, epochs=2, steps_per_epoch=10)
    out = tmp_path / "resumed"
    train_until_ctrl_c(train, out, config, CtrlC())
    assert (saved_state(out)["step"], saved_state(out)["epoch"]) == (5, 0)
    resumed = jobs.train_translator(train, out, config, verbose=0).model
    assert int(resumed.optimizer.iterations.numpy()) == 25
    never_stopped = TrainingConfig(**settings, epochs=5, steps_per_epoch=5)
    clean = jobs.train_translator(train, tmp_path / "clean", never_stopped, verbose=0).model
    assert all(np.array_equal(a, b) for a, b in zip(clean.get_weights(), resumed.get_weights(), strict=True))


def test_a_resumed_minutes_run_counts_the_time_spent_before_the_restart(run_whose_last_save_failed, tmp_path):
    """--minutes budgets the whole run: resumed with its minute already spent, it stops after one step.

    (And reports that step: the best weights it puts back, from before the restart, do not roll back the
    step count with the optimizer's state they were saved with.)
    """
    import shutil

    out = tmp_path / "model"
    shutil.copytree(run_whose_last_save_failed[0], out)  # resumable from its backup at step 5
    state = saved_state(out)
    assert state["step"] == 5
    (out / "training" / "backup" / "state.json").write_text(json.dumps({**state, "seconds": 60.0}))
    with open(out / "training" / "history.csv", "a") as file:  # as if killed after logging epoch 1, before its backup
        file.write("1,0.5,9.9,0.5,NA,NA,NA,NA,NA\n")
    assert main(train_command(out, "--minutes", "1", "--steps-per-epoch", "5", "--no-xla")[3:]) == 0
    result = json.loads((out / "config.json").read_text())["result"]
    assert result["steps"] == 6 and result["stopped_by"] == "time budget", result
    assert [row["epoch"] for row in history(out)] == ["0", "1"]  # the stale line of epoch 1 went; its rerun's stayed
