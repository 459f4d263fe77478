"""Strategies by name, and the training loop for the one strategy model.fit cannot drive.

model.fit in Keras 3.15 cannot drive MultiWorkerMirroredStrategy (its
first-batch build and metric reduction fail: keras-team/keras#20585), so
`fit_across_workers` is the plain distributed loop fit would run: each
worker's replica computes the loss (already divided by the replica count)
and its gradients, the optimizer all-reduces them, and the summed loss is
the global mean.

Every worker must stop at the same step (a worker still waiting on an
all-reduce that the others left fails), so each step all-reduces, with the
loss, the workers' clocks (all of them go by the mean: under a budget each
sets its budget schedule's end to the same step, or their weights would
drift apart) and whether any of them was told to stop. As under
`TimeBudget`, the clocks start when the first step ends.
"""

import contextlib
import time

import tensorflow as tf

from kformer.training.callbacks import WorkerLost
from kformer.training.config import STRATEGIES

# What a collective raises on a worker when another worker of the cluster is gone (killed, preempted, failed).
_LOST_PEER = (tf.errors.UnavailableError, tf.errors.DeadlineExceededError)


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


def fit_across_workers(
    model, datasets, steps, strategy, budget=None, backup=None, chief=True, callbacks=(), log_every=100, verbose=1
):
    """Trains a compiled model for `steps` batches under MultiWorkerMirroredStrategy (see the module docstring).

    Each worker reads its own share of the data: `datasets(input_context)`
    runs on every worker and makes the batches of that worker's share
    (`input_context.input_pipeline_id` of `num_input_pipelines`), each of
    `input_context.get_per_replica_batch_size(global batch)` sequences.

    Args:
        budget: a `TimeBudget`, or None.
        backup: a `Backup` in a directory every worker can read (as Keras's
            BackupAndRestore asks), or None. The run goes on from where it
            was restored (`Backup.restore`, on every worker, before this):
            each worker skips the batches its share gave before, so a
            resumed run trains on the batches an uninterrupted one would.
            The chief writes it every `backup.every_steps` steps and at
            the end of every `log_every` steps (an epoch). Ctrl-C or SIGTERM on any worker
            stops every worker after the same step, with the copy saved, and
            raises `TrainingInterrupted` on each.
        chief: whether this worker writes the backup and runs `callbacks`.
        callbacks: Keras callbacks run on the chief: `on_train_begin`,
            `on_epoch_end` every `log_every` steps and when the budget ends
            the run (the others wait at the next step's all-reduce), and
            `on_train_end`; such as the keeper of the best validation
            translations, then a CSVLogger (which logs what the keeper added).

    Returns:
        {"loss": [mean loss of each logged span (a span a restart cut
        short: of the steps after it)], "steps": steps run,
        "first_step_seconds": how long the first step took}.
    """
    done, spent = 0, 0.0
    if backup is not None:  # restored already, if there was a run to resume
        backup.set_model(model)
        done, spent = backup.restored_step or 0, backup.seconds
        backup.on_train_begin()

    def resumed(context):  # each of a worker's replicas took a batch of its share a step
        return datasets(context).skip(done * context.num_replicas_in_sync // context.num_input_pipelines)

    iterator, train_step = iter(strategy.distribute_datasets_from_function(resumed)), _train_step(model, strategy)
    callbacks = list(callbacks) if chief else []
    for callback in callbacks:
        callback.set_model(model)
        callback.on_train_begin()
    began, started, first_step = time.perf_counter(), None, None
    losses, span, step = [], [], done
    guard = backup.guard_interrupts() if backup is not None else contextlib.nullcontext()
    with guard:
        for step in range(done + 1, steps + 1):
            told = float(backup is not None and backup.interrupted)
            clock = spent if started is None else spent + time.perf_counter() - started
            try:
                loss, elapsed, stop_told = train_step(next(iterator), tf.constant([clock, told], tf.float32)).numpy()
            except _LOST_PEER as error:
                raise _worker_lost(step, backup, error) from None
            if started is None:  # the clock starts when the first step (tracing, the first batches) ends
                started = time.perf_counter()
                first_step = started - began
            span.append(float(loss))
            stop = budget is not None and budget.step_done(int(model.optimizer.iterations.numpy()), float(elapsed))
            epoch_ends = step % log_every == 0 or step == steps or stop  # as fit ends an epoch the budget cut short
            if epoch_ends or stop_told:
                losses.append(_end_span(span, step, steps, log_every, callbacks if epoch_ends else [], verbose))
                span = []
            if backup is not None and chief and (step % backup.every_steps == 0 or step % log_every == 0 or stop_told):
                backup.save(step // log_every)
            if stop_told:
                raise backup.interruption()
            if stop:
                break
    for callback in callbacks:
        callback.on_train_end()
    return {"loss": losses, "steps": step, "first_step_seconds": first_step}


def _worker_lost(step, backup, error):
    """The `WorkerLost` for a collective that failed at `step` (TensorFlow's `error`), naming the backup to resume."""
    saved = backup.saved_step() if backup is not None else 0
    where = (
        f"the run is saved at step {saved:,} in {backup.directory}; run the same command on every worker to resume it."
        if saved
        else "there is no backup to resume from yet; run the same command on every worker to start again."
    )
    cause = (str(error).strip().splitlines() or [type(error).__name__])[0]  # TensorFlow's first line, not its trace
    return WorkerLost(
        f"another worker stopped answering at step {step:,} ({type(error).__name__}: {cause}): it was killed, "
        f"or it failed and its own output says why; {where}"
    )


def _end_span(losses, step, steps, log_every, callbacks, verbose):
    """The mean of a span's `losses`, shown, and given to the `callbacks`' `on_epoch_end` (those of an epoch's end)."""
    logs = {"loss": sum(losses) / len(losses)}
    for callback in callbacks:
        callback.on_epoch_end((step - 1) // log_every, logs)
    if verbose:
        shown = " - ".join(f"{name} {value:.4f}" for name, value in logs.items())
        print(f"step {step}/{steps} - {shown}", flush=True)
    return logs["loss"]


def _train_step(model, strategy):
    """`step(batch, signals) -> [the global mean loss, the workers' means of signals]`, one all-reduce.

    `signals`: [this worker's seconds since the start, 1.0 if it was told to stop].
    """

    @tf.function
    def train_step(batch, signals):
        def replica_step(inputs, labels):
            with tf.GradientTape() as tape:
                loss = model.loss(labels, model(inputs, training=True))
            model.optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            return tf.concat([[loss], signals / strategy.num_replicas_in_sync], axis=0)

        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    return train_step
