"""Callbacks around model.fit: the time budget, checkpoint averaging, TensorBoard logs, and the resumable backup."""

import collections
import contextlib
import json
import math
import signal
import threading
import time
from pathlib import Path

import keras
import tensorflow as tf

from kformer.files import write_atomically, write_json
from kformer.training.objectives import BudgetSchedule


class TimeBudget(keras.callbacks.Callback):
    """Stops training once `minutes` of wall-clock time have passed (`spent_seconds` of them before a resume).

    The clock starts when the first step ends: that step waits for the input
    pipeline to fill its shuffle buffer and for tracing and XLA to compile,
    which take the same time whatever the budget (`first_step_seconds` keeps
    it). Checked after every step; records the steps actually run, since
    Keras's per-epoch ms/step is divided by the epoch's nominal length. When
    the optimizer follows a `BudgetSchedule`, it also sets the schedule's
    `total_steps` to the steps done plus those the remaining time allows at
    the pace of the last `window` steps (validation pauses included), so the
    learning rate reaches zero about when the time does.

    Args:
        schedule: the optimizer's schedule, when it is a `BudgetSchedule`.
        verbose: show the time left and the step's metrics (in place of
            Keras's progress bar, whose epochs mean little under a budget):
            1 redraws one line on a terminal, 2 prints a line every 5% of the budget;
            both print one at each epoch's end (a run always ends at one).

    Under several workers (`fit_across_workers`) it goes by `shared_seconds`,
    the workers' mean clock, which the loop sets before each step's end.
    """

    def __init__(self, minutes, spent_seconds=0.0, schedule=None, window=200, verbose=0):
        super().__init__()
        self.seconds = minutes * 60.0
        self.schedule = schedule if isinstance(schedule, BudgetSchedule) else None
        self._most_steps = float(self.schedule.total_steps.numpy()) if self.schedule else None  # an epoch count's
        self.steps = 0
        self.elapsed = spent_seconds
        self.expired = False
        self.first_step_seconds = None
        self.verbose = verbose
        self._times = collections.deque(maxlen=window)
        self._shown = -1.0
        self.shared_seconds = None

    def on_train_begin(self, logs=None):
        self._began = time.perf_counter()
        self._start = None
        done = int(self.model.optimizer.iterations.numpy())
        if self.schedule is not None and done and self.elapsed:  # a resumed run: its pace so far
            self._estimate(done, self.elapsed / done)

    def _estimate(self, done, seconds_per_step):
        remaining = max(self.seconds - self.elapsed, 0.0) / max(seconds_per_step, 1e-6)
        self.schedule.total_steps.assign(min(float(done + remaining + 1), self._most_steps))

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if self._start is None:
            self.first_step_seconds = now - self._began
            self._start = now - self.elapsed
        done = int(self.model.optimizer.iterations.numpy())
        elapsed = now - self._start if self.shared_seconds is None else self.shared_seconds
        if self.step_done(done, elapsed):
            self.model.stop_training = True
        self._show(done, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._show(int(self.model.optimizer.iterations.numpy()), logs, epoch_done=epoch + 1)

    def _show(self, done, logs, epoch_done=None):
        step = self.seconds / 20 if self.verbose == 2 else 0.5
        if not self.verbose or (epoch_done is None and self.elapsed - self._shown < step):
            return
        self._shown = self.elapsed
        left = max(self.seconds - self.elapsed, 0.0)
        bar = round(24 * min(self.elapsed / self.seconds, 1.0)) if self.seconds else 24
        metrics = "  ".join(f"{name} {float(value):.4g}" for name, value in (logs or {}).items())
        line = f"{int(left // 60)}:{int(left % 60):02d} left {'━' * bar}{'─' * (24 - bar)} step {done:,}  {metrics}"
        if epoch_done is not None:
            line = f"{line}  (epoch {epoch_done} done)"
        if self.verbose == 1:  # a terminal: one line redrawn, kept at each epoch's end and at the end
            print(f"\r{line}\x1b[K", end="\n" if epoch_done is not None else "", flush=True)
        else:
            print(line, flush=True)

    def step_done(self, done, elapsed):
        """Counts a step (`done` in all, after `elapsed` seconds of the run); returns True once time is up."""
        self.steps += 1
        self.elapsed = elapsed
        self._times.append(elapsed)
        if self.schedule is not None and len(self._times) >= 10:
            self._estimate(done, (self._times[-1] - self._times[0]) / (len(self._times) - 1))
        self.expired = self.elapsed >= self.seconds
        return self.expired


class CheckpointAverage(keras.callbacks.Callback):
    """Puts the mean of the weights at the last `k` checkpoints into the model when training ends.

    A checkpoint here is the weights every `every_steps` steps (when the run
    writes its backup) and at the end, held in memory. The paper's base
    models average their last 5 checkpoints, written every 10 minutes. With a
    `keeper` (an object with `consider(weights) -> chrF`, such as
    `BestTranslations`), the average is scored like an epoch and kept only if
    it translates the validation pairs better; without one it is kept.
    The checkpoints live in memory only: a run resumed after a kill averages
    those taken since its restart (the keeper still holds the best epoch of
    the whole run, so the average can only be kept if it beats that).

    Args:
        k: checkpoints to average (at least 2).
        every_steps: steps between checkpoints.
        keeper: what judges the average, or None.
    """

    def __init__(self, k, every_steps, keeper=None):
        super().__init__()
        if not (isinstance(k, int) and k >= 2):
            raise ValueError(f"averaging takes at least 2 checkpoints, not {k!r}.")
        self.every_steps = every_steps
        self.keeper = keeper
        self.checkpoints = collections.deque(maxlen=k)  # (step, weights)
        self.chrf = None  # the average's validation chrF, when a keeper scored it

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        if step % self.every_steps == 0:
            self.checkpoints.append((step, self.model.get_weights()))

    def on_train_end(self, logs=None):
        step = self._step()
        if not self.checkpoints or self.checkpoints[-1][0] != step:
            self.checkpoints.append((step, self.model.get_weights()))
        if len(self.checkpoints) < 2:
            return
        snapshots = [weights for _, weights in self.checkpoints]
        average = [sum(values) / len(values) for values in zip(*snapshots, strict=True)]
        if self.keeper is None:
            self.model.set_weights(average)
        else:
            self.chrf = self.keeper.consider(average)


class TensorBoard(keras.callbacks.TensorBoard):
    """Keras' TensorBoard callback, whose epoch summaries are written whatever step an epoch ends on.

    With an integer `update_freq`, Keras' callback records summaries only
    on steps that are a multiple of it, and that condition is still in force
    at an epoch's end, so an epoch's loss, val_chrf and val_bleu were lost
    unless its last step fell on a multiple (tensorflow/tensorboard#4975).
    Its `evaluation_*_vs_iterations` summaries are left as Keras writes them
    (their condition is set and unset around validation): each epoch's
    validation loss is in the epoch summaries.
    """

    def on_epoch_end(self, epoch, logs=None):
        with tf.summary.record_if(True):  # on_epoch_end neither sets nor unsets Keras' own condition
            super().on_epoch_end(epoch, logs)


class TrainingStopped(RuntimeError):
    """Training stopped before its end; the message says why and how to go on."""


class TrainingInterrupted(TrainingStopped):
    """Ctrl-C or SIGTERM: the state was saved and the same command resumes it."""


class WorkerLost(TrainingStopped):
    """Another worker of a multi-worker cluster stopped answering; the same command on every worker resumes."""


class TrainingDiverged(TrainingStopped):
    """The loss became NaN or infinite; the backup keeps the last good weights."""


class DamagedBackup(ValueError):
    """A backup's state.json or weights file cannot be read back."""


class Backup(keras.callbacks.Callback):
    """A resumable copy of a training run, and the run's guard against losing it.

    Every `every_steps` steps and at each epoch's end it writes the weights
    with the optimizer's state (step-N.weights.h5), then where the run was
    (state.json: epoch, step, seconds spent from the end of the first step
    as `TimeBudget` counts them, and the weights file's name),
    then deletes older weights files. Each file is written atomically and
    state.json names its weights, so a process killed at any moment leaves
    a state and weights of the same step. `restore` puts a run back before
    `fit`; under `fit` an epoch cut short is run again from its start (the multi-worker
    loop goes on from the step saved).

    It also guards the run, inside `guard_interrupts()`:
    - Ctrl-C (SIGINT) or SIGTERM saves at the end of the current step and
      raises `TrainingInterrupted` (a second one stops at once, unsaved);
    - a non-finite loss raises `TrainingDiverged` without saving, and no
      weights are saved unless all are finite, so the copy on disk is the
      last good state.

    Args:
        directory: where the copy lives (created when first needed).
        every_steps: steps between copies (at each multiple of it, counted as
            `CheckpointAverage` counts them: the optimizer's steps), besides
            each epoch's end.
        write: False on the workers of a cluster that are not its chief:
            they guard the run and read the copy, but never write it.

    Under several workers (`fit_across_workers`) a worker stops only when all
    do: the loop sets `shared_interrupted` before each step's end, whether
    any of them was interrupted, which it goes by instead of its own signal.
    """

    def __init__(self, directory, every_steps=500, write=True):
        super().__init__()
        self.write = write
        self.directory = Path(directory)
        self.every_steps = every_steps
        self.epoch = 0
        self.seconds = 0.0
        self.restored_step = None  # the step a resumed run goes on from
        self.interrupted = False  # whether Ctrl-C or SIGTERM came (inside `guard_interrupts`)
        self._started = None
        self.shared_interrupted = None

    @property
    def _state_path(self):
        return self.directory / "state.json"

    def restore(self, model):
        """Loads a saved run into `model` (built and compiled).

        Returns:
            The epoch to start at (0 when there is nothing to resume).

        Raises:
            DamagedBackup: state.json or the weights it names cannot be read.
            ValueError: the weights are of a model of another shape.
        """
        if not self._state_path.is_file():
            return 0
        try:
            state = json.loads(self._state_path.read_text())
            # Backups written before state.json named its weights kept them in latest.weights.h5.
            weights = self.directory / state.get("weights", "latest.weights.h5")
            epoch, seconds, step = int(state["epoch"]), float(state["seconds"]), int(state["step"])
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise DamagedBackup(f"{self._state_path}: not a backup's state ({error!r})") from None
        if not weights.is_file():
            raise DamagedBackup(f"{weights}: missing, though {self._state_path.name} names it")
        with model.distribute_strategy.scope():
            model.optimizer.build(model.trainable_variables)
        try:
            model.load_weights(weights)
        except OSError as error:  # h5py: not an HDF5 file, or a truncated one
            raise DamagedBackup(f"{weights}: cannot be read ({error})") from None
        self.epoch, self.seconds, self.restored_step = epoch, seconds, step
        return self.epoch

    @contextlib.contextmanager
    def guard_interrupts(self):
        """Turns the first Ctrl-C or SIGTERM (a scheduler's preemption) into "save at the end of this step and stop".

        Main thread only. A second signal acts at once.
        """
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def interrupt(signum, frame):
            self.interrupted = True
            for number, handler in previous.items():  # the second one acts at once
                signal.signal(number, handler)

        previous = {number: signal.signal(number, interrupt) for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def on_train_begin(self, logs=None):
        self._started = time.perf_counter() - self.seconds
        self._first_step = True

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = float((logs or {}).get("loss", 0.0))
        if not math.isfinite(loss):
            step = int(self.model.optimizer.iterations.numpy())
            saved = self.saved_step()
            kept = f"the last good weights are in {self.directory} (step {saved:,})" if saved else "nothing was saved"
            raise TrainingDiverged(
                f"the loss became {loss} at step {step:,}; training stopped and {kept}. "
                "Lower --learning-rate-scale or set --clipnorm and run again with the same --out to go on from there."
            )
        if self._first_step:  # the time spent counts from here, as `TimeBudget`'s does
            self._started, self._first_step = time.perf_counter() - self.seconds, False
        if self._told():
            self._stop(self.epoch)
        if int(self.model.optimizer.iterations.numpy()) % self.every_steps == 0:
            self.save(self.epoch)

    def on_epoch_end(self, epoch, logs=None):
        self.save(epoch + 1)
        if self._told():
            self._stop(epoch + 1)

    def _told(self):
        """Whether to save and stop here: after Ctrl-C or SIGTERM, or under several workers, once any of them was."""
        return self.interrupted if self.shared_interrupted is None else self.shared_interrupted

    def _stop(self, epoch):
        self.save(epoch)
        raise TrainingInterrupted(
            f"interrupted at step {self.saved_step():,}; the run is saved in {self.directory}. "
            "Run the same command again to resume it."
        )

    def saved_step(self):
        """The step of the copy on disk (0: none yet)."""
        return json.loads(self._state_path.read_text())["step"] if self._state_path.is_file() else 0

    def save(self, epoch):
        """Writes the copy, unless a weight is not finite (then the last good copy stays), where it `write`s."""
        if not self.write or not all(bool(tf.reduce_all(tf.math.is_finite(w))) for w in self.model.trainable_weights):
            return
        self.seconds = time.perf_counter() - self._started
        step = int(self.model.optimizer.iterations.numpy())
        weights = f"step-{step}.weights.h5"
        write_atomically(self.directory / weights, self.model.save_weights)
        write_json(self._state_path, {"epoch": epoch, "step": step, "seconds": self.seconds, "weights": weights})
        for path in self.directory.iterdir():  # older copies, and what killed writes left of them
            if path.name.endswith(".weights.h5") and path.name != weights:
                path.unlink(missing_ok=True)
