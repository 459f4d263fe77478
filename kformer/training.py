"""The training recipe: loss, metric, schedule, callbacks, strategies, model.fit.

Follows the paper (section 5): Adam(0.9, 0.98, 1e-9), label smoothing 0.1,
dropout 0.1, and either its schedule (warmup, then 1/sqrt(step), built for
100k steps) or, by default, the same warmup and peak decaying linearly to zero
exactly when the budget (epochs or minutes) ends.
"""

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
from keras import ops

from kformer.choices import STRATEGIES
from kformer.model_dir import write_atomically, write_json
from kformer.text import PAD_ID


@keras.saving.register_keras_serializable(package="kformer")
class MaskedSparseCrossEntropy(keras.losses.Loss):
    """Cross-entropy over token ids with label smoothing, ignoring padding.

    With smoothing e over V classes the target distribution is
    q = (1 - e) * one_hot(y) + e / V, and with logits z

        loss = -sum_v q_v log softmax(z)_v = logsumexp(z) - sum_v q_v z_v,

    whose gradient is softmax(z) - q. Written this way, XLA fuses the one-hot
    into the sum (it is never stored) and the gradient into one pass over the
    logits. The result is the mean over non-padding tokens (label != 0).

    Args:
        label_smoothing: e, in [0, 1).
    """

    def __init__(self, label_smoothing=0.1, name="masked_sparse_cross_entropy", **kwargs):
        super().__init__(name=name, reduction="sum", **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got label_smoothing={label_smoothing!r}.")
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        labels = ops.cast(y_true, "int32")  # (B, T)
        logits = ops.cast(y_pred, "float32")  # (B, T, V)
        vocab_size = logits.shape[-1]
        target = ops.one_hot(labels, vocab_size) * (1.0 - self.label_smoothing) + self.label_smoothing / vocab_size
        per_token = ops.logsumexp(logits, axis=-1) - ops.sum(target * logits, axis=-1)  # (B, T)
        not_padding = ops.cast(ops.not_equal(labels, PAD_ID), "float32")
        # Per-token terms that sum (reduction="sum") to the mean over real
        # tokens; Keras may multiply by the logits' padding mask too, which
        # changes nothing here. Under tf.distribute each replica's mean is
        # divided by the replica count, as Keras does for its mean losses.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return per_token * not_padding / (ops.maximum(ops.sum(not_padding), 1.0) * replicas)

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "name": self.name}


@keras.saving.register_keras_serializable(package="kformer")
class MaskedAccuracy(keras.metrics.Metric):
    """The fraction of non-padding target tokens whose argmax is the label.

    Computed as "the label's logit is the row's maximum", not with an argmax:
    XLA on CPU compiles argmax's (value, index) reduction into a scalar loop,
    7% of a training step on spa-eng batches, and a maximum into vector code
    that costs nothing measurable (bench/RESULTS.md). A label tied with
    another token for the maximum counts as a hit.
    """

    def __init__(self, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.correct = self.add_variable((), initializer="zeros", name="correct")
        self.total = self.add_variable((), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        labels = ops.cast(y_true, "int32")
        not_padding = ops.not_equal(labels, PAD_ID)
        label_logit = ops.take_along_axis(y_pred, ops.expand_dims(labels, -1), axis=-1)[..., 0]  # (B, T)
        hit = ops.logical_and(label_logit >= ops.max(y_pred, axis=-1), not_padding)
        self.correct.assign_add(ops.sum(ops.cast(hit, "float32")))
        self.total.assign_add(ops.sum(ops.cast(not_padding, "float32")))

    def result(self):
        return self.correct / ops.maximum(self.total, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)


@keras.saving.register_keras_serializable(package="kformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5).

    Rises linearly for `warmup_steps`, then decays as 1/sqrt(step). `step`
    counts from 1 (the first update).
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        return (
            self.scale
            * self.d_model**-0.5
            * ops.minimum(ops.rsqrt(step), step * ops.cast(self.warmup_steps, "float32") ** -1.5)
        )

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="kformer")
class BudgetSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warmup to the paper's peak, then a straight line down to zero at the budget's last step.

        lr(step) = peak * min(1, step / w) * max(0, 1 - step / total_steps)
        peak = scale * d_model^-0.5 * warmup_steps^-0.5   (the paper's schedule at its top)
        w = min(warmup_steps, warmup_fraction * total_steps)

    Budgeted-training studies found linear decay to zero the best of the
    schedules they compared under a fixed budget (Li, Yumer and Ramanan,
    ICLR 2020); here it beat the paper's own schedule, which is made for 100k
    steps and still high when a short run stops, by 9.5 BLEU in a 5-minute
    run (bench/RESULTS.md). A short budget also shortens the warmup, so a
    600-step run does not spend itself warming up. `total_steps` is a
    variable: under a wall-clock budget `TimeBudget` refreshes it from the
    measured step time as training goes.
    """

    def __init__(self, d_model, total_steps, warmup_steps=4000, scale=1.0, warmup_fraction=0.1):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.warmup_fraction = warmup_fraction
        self.total_steps = tf.Variable(float(total_steps), trainable=False, dtype=tf.float32, name="total_steps")

    @property
    def peak(self):
        return self.scale * self.d_model**-0.5 * self.warmup_steps**-0.5

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        total = ops.convert_to_tensor(self.total_steps)
        warmup = ops.minimum(float(self.warmup_steps), ops.maximum(self.warmup_fraction * total, 1.0))
        rise = ops.minimum(1.0, step / warmup)
        return self.peak * rise * ops.maximum(0.0, 1.0 - step / total)

    def get_config(self):
        return {
            "d_model": self.d_model,
            "total_steps": float(self.total_steps.numpy()),
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "warmup_fraction": self.warmup_fraction,
        }


def make_optimizer(schedule, clipnorm=None, ema=None):
    """Adam(0.9, 0.98, 1e-9) on `schedule`, optionally clipping the gradient norm.

    Args:
        ema: keep an exponential moving average of the weights with this
            decay (Keras' `use_ema`); `model.fit` puts the averages into the
            model when it ends.
    """
    return keras.optimizers.Adam(
        schedule,
        beta_1=0.9,
        beta_2=0.98,
        epsilon=1e-9,
        clipnorm=clipnorm,
        use_ema=bool(ema),
        ema_momentum=ema or 0.99,
    )


class TimeBudget(keras.callbacks.Callback):
    """Stops training once `minutes` of wall-clock time have passed (`spent_seconds` of them before a resume).

    Checked after every batch; records the steps actually run, since Keras's
    per-epoch ms/step is divided by the epoch's nominal length. When the
    optimizer follows a `BudgetSchedule`, it also sets the schedule's
    `total_steps` to the steps done plus those the remaining time allows at
    the pace of the last `window` steps (validation pauses included), so the
    learning rate reaches zero about when the time does.

    Args:
        schedule: the optimizer's schedule, when it is a `BudgetSchedule`.
    """

    def __init__(self, minutes, spent_seconds=0.0, schedule=None, window=200):
        super().__init__()
        self.seconds = minutes * 60.0
        self.schedule = schedule if isinstance(schedule, BudgetSchedule) else None
        self._most_steps = float(self.schedule.total_steps.numpy()) if self.schedule else None  # an epoch count's
        self.steps = 0
        self.elapsed = spent_seconds
        self.expired = False
        self._times = collections.deque(maxlen=window)

    def on_train_begin(self, logs=None):
        self._start = time.perf_counter() - self.elapsed
        done = int(self.model.optimizer.iterations.numpy())
        if self.schedule is not None and done and self.elapsed:  # a resumed run: its pace so far
            self._estimate(done, self.elapsed / done)

    def _estimate(self, done, seconds_per_step):
        remaining = max(self.seconds - self.elapsed, 0.0) / max(seconds_per_step, 1e-6)
        self.schedule.total_steps.assign(min(float(done + remaining + 1), self._most_steps))

    def on_train_batch_end(self, batch, logs=None):
        if self.step_done(int(self.model.optimizer.iterations.numpy()), time.perf_counter() - self._start):
            self.model.stop_training = True

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


class TrainingStopped(RuntimeError):
    """Training stopped before its end; the message says why and how to go on."""


class TrainingInterrupted(TrainingStopped):
    """Ctrl-C: the state was saved and the same command resumes it."""


class TrainingDiverged(TrainingStopped):
    """The loss became NaN or infinite; the backup keeps the last good weights."""


class DamagedBackup(ValueError):
    """A backup's state.json or weights file cannot be read back."""


class Backup(keras.callbacks.Callback):
    """A resumable copy of a training run, and the run's guard against losing it.

    Every `every_steps` steps and at each epoch's end it writes the weights
    with the optimizer's state (step-N.weights.h5), then where the run was
    (state.json: epoch, step, seconds spent, and the weights file's name),
    then deletes older weights files. Each file is written atomically and
    state.json names its weights, so a process killed at any moment leaves
    a state and weights of the same step. `restore` puts a run back before
    `fit`; an epoch cut short is run again from its start.

    It also guards the run, inside `guard_interrupts()`:
    - Ctrl-C (SIGINT) saves at the end of the current step and raises
      `TrainingInterrupted` (a second Ctrl-C stops at once, unsaved);
    - a non-finite loss raises `TrainingDiverged` without saving, and no
      weights are saved unless all are finite, so the copy on disk is the
      last good state.

    Args:
        directory: where the copy lives (created when first needed).
        every_steps: steps between copies, besides each epoch's end.
    """

    def __init__(self, directory, every_steps=500):
        super().__init__()
        self.directory = Path(directory)
        self.every_steps = every_steps
        self.epoch = 0
        self.seconds = 0.0
        self.restored_step = None  # the step a resumed run goes on from
        self._interrupted = False
        self._started = None

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
        """Turns the first Ctrl-C into "save at the end of this step and stop" (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def interrupt(signum, frame):
            self._interrupted = True
            signal.signal(signal.SIGINT, previous)  # a second Ctrl-C acts at once

        previous = signal.signal(signal.SIGINT, interrupt)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def on_train_begin(self, logs=None):
        self._started = time.perf_counter() - self.seconds

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = float((logs or {}).get("loss", 0.0))
        if not math.isfinite(loss):
            step = int(self.model.optimizer.iterations.numpy())
            saved = self._saved_step()
            kept = f"the last good weights are in {self.directory} (step {saved:,})" if saved else "nothing was saved"
            raise TrainingDiverged(
                f"the loss became {loss} at step {step:,}; training stopped and {kept}. "
                "Lower --learning-rate-scale or set --clipnorm and run again with the same --out to go on from there."
            )
        if self._interrupted:
            self._stop(self.epoch)
        if (batch + 1) % self.every_steps == 0:
            self.save(self.epoch)

    def on_epoch_end(self, epoch, logs=None):
        self.save(epoch + 1)
        if self._interrupted:
            self._stop(epoch + 1)

    def _stop(self, epoch):
        self.save(epoch)
        raise TrainingInterrupted(
            f"interrupted at step {self._saved_step():,}; the run is saved in {self.directory}. "
            "Run the same command again to resume it."
        )

    def _saved_step(self):
        if not self._state_path.is_file():
            return 0
        return json.loads(self._state_path.read_text())["step"]

    def save(self, epoch):
        """Writes the copy, unless a weight is not finite (then the last good copy stays)."""
        if not all(bool(tf.reduce_all(tf.math.is_finite(w))) for w in self.model.trainable_weights):
            return
        self.seconds = time.perf_counter() - self._started
        step = int(self.model.optimizer.iterations.numpy())
        weights = f"step-{step}.weights.h5"
        write_atomically(self.directory / weights, self.model.save_weights)
        write_json(self._state_path, {"epoch": epoch, "step": step, "seconds": self.seconds, "weights": weights})
        for path in self.directory.iterdir():  # older copies, and what killed writes left of them
            if path.name.endswith(".weights.h5") and path.name != weights:
                path.unlink(missing_ok=True)


def make_strategy(name="default"):
    """A tf.distribute strategy by name: default, mirrored, multiworker or tpu.

    "mirrored" replicates over this machine's GPUs (or logical CPU devices);
    "multiworker" reads the cluster from the TF_CONFIG environment variable;
    "tpu" connects to the TPU named by the environment (Cloud TPU VM).
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multiworker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}.")


def fit_across_workers(model, dataset, steps, strategy, budget=None, log_every=100, verbose=1):
    """Trains a compiled model for `steps` batches under MultiWorkerMirroredStrategy.

    model.fit in Keras 3.15 cannot drive this strategy (its first-batch build
    and metric reduction fail: keras-team/keras#20585), so this is the plain
    distributed loop fit would run: each worker's replica computes the loss
    (already divided by the replica count) and its gradients, the optimizer
    all-reduces them, and the summed loss is the global mean. Of the Keras
    callbacks only `budget` (a `TimeBudget`) runs here; the recipe saves the
    result on the chief.

    Under a budget every worker must stop at the same step (a worker still
    waiting on an all-reduce that the others left fails) and set its budget
    schedule's end to the same step (else the workers' weights drift apart),
    so each step all-reduces the workers' clocks with the loss, and all of
    them go by the mean.

    Returns:
        {"loss": [mean loss of each logged span], "steps": steps run}.
    """
    iterator = iter(strategy.experimental_distribute_dataset(dataset))

    @tf.function
    def train_step(batch, elapsed):
        def replica_step(inputs, labels):
            with tf.GradientTape() as tape:
                loss = model.loss(labels, model(inputs, training=True))
            model.optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            return tf.stack([loss, elapsed / strategy.num_replicas_in_sync])

        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)  # [loss, mean elapsed]

    started, losses, span = time.perf_counter(), [], []
    for step in range(1, steps + 1):
        loss, elapsed = train_step(next(iterator), tf.constant(time.perf_counter() - started, tf.float32)).numpy()
        span.append(float(loss))
        stop = budget is not None and budget.step_done(int(model.optimizer.iterations.numpy()), float(elapsed))
        if step % log_every == 0 or step == steps or stop:
            losses.append(sum(span) / len(span))
            span = []
            if verbose:
                print(f"step {step}/{steps} - loss {losses[-1]:.4f}", flush=True)
        if stop:
            break
    return {"loss": losses, "steps": step}


def compile_for_training(
    model,
    d_model,
    label_smoothing=0.1,
    warmup_steps=4000,
    learning_rate_scale=1.0,
    clipnorm=None,
    jit_compile=True,
    schedule=None,
    ema=None,
):
    """Compiles `model` with Adam, the masked smoothed loss and token accuracy.

    `schedule` defaults to the paper's (`TransformerSchedule`); `ema` is
    `make_optimizer`'s.
    """
    schedule = schedule or TransformerSchedule(d_model, warmup_steps, learning_rate_scale)
    model.compile(
        optimizer=make_optimizer(schedule, clipnorm, ema),
        loss=MaskedSparseCrossEntropy(label_smoothing),
        metrics=[MaskedAccuracy()],
        jit_compile=jit_compile,
    )
    return model


def perplexity(loss):
    """exp(loss), the usual reading of a language model's cross-entropy."""
    return math.exp(min(loss, 50.0))
