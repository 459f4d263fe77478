"""Strategies by name, and the training loop for the one strategy model.fit cannot drive.

model.fit in Keras 3.15 cannot drive MultiWorkerMirroredStrategy (its
first-batch build and metric reduction fail: keras-team/keras#20585), so
`fit_across_workers` is the plain distributed loop fit would run, calling
the same callbacks the same way: each worker's replica computes the loss
(already divided by the replica count) and its gradients, the optimizer
all-reduces them, and the summed loss is the global mean.

Every worker must stop at the same step (a worker still waiting on an
all-reduce that the others left fails), so each step all-reduces, with the
loss, the workers' clocks (all of them go by the mean: under a budget each
sets its budget schedule's end to the same step, or their weights would
drift apart) and whether any of them was told to stop. As under
`TimeBudget`, the clocks start when the first step ends.
"""

import time

import keras
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
    model, datasets, epochs, steps_per_epoch, callbacks, budget=None, backup=None, initial_step=0,
    initial_epoch=None, validation_data=None, verbose=1,
):  # fmt: skip
    """`model.fit` for MultiWorkerMirroredStrategy: its loop and callback protocol (see the module docstring).

    The `callbacks` are called as `fit` calls them: train begin; each epoch's
    begin; each batch's begin and end, with {"loss": the epoch's mean loss so
    far over every worker}; given `validation_data`, the test calls of
    `evaluate`, on this worker alone; each epoch's end, with "val_loss" too
    (weighed as `evaluate` weighs it: by sequences); then the optimizer's moving average (`--ema`) put into the
    weights, and train end. Each worker runs its own list: the chief's write
    files, the others' must not.

    Each worker reads its own share of the data: `datasets(input_context)`
    makes the batches of share `input_context.input_pipeline_id` of
    `num_input_pipelines`, each of `get_per_replica_batch_size(global batch)`
    sequences. A run resumed at `initial_step` goes on in the middle of its
    epoch, each worker first reading past the batches its share gave before;
    one saved at an epoch's last step before that epoch's end was run
    (`initial_epoch`, the backup's) first ends that epoch (its loss unknown: NaN).

    Every worker stops after the same step. Each step's all-reduce, besides
    the loss, gives every worker the workers' mean clock, which `budget` (a
    `TimeBudget` among the callbacks) goes by, and whether any worker was
    interrupted: then each worker's `backup` (a `Backup` among them) saves,
    on the chief, and stops. At each epoch's end the workers agree whether a
    callback of any of them (such as the chief's EarlyStopping) stopped training:
    a stop asked in the middle of an epoch (other than the budget's) takes
    effect at its end, where `fit` would stop at once.

    Returns:
        The `keras.callbacks.History` of the run.
    """
    strategy, history = model.distribute_strategy, keras.callbacks.History()

    def resumed(context):  # each of a worker's replicas took a batch of its share a step
        return datasets(context).skip(initial_step * context.num_replicas_in_sync // context.num_input_pipelines)

    iterator, train_step = iter(strategy.distribute_datasets_from_function(resumed)), _train_step(model, strategy)
    hooks = keras.callbacks.CallbackList(
        [*callbacks, history], add_progbar=verbose != 0, verbose=verbose, epochs=epochs, steps=steps_per_epoch
    )
    hooks.set_model(model)
    model.stop_training = False
    hooks.on_train_begin()
    spent, started, step, logs = (backup.seconds if backup else 0.0), None, initial_step, {"loss": float("nan")}
    first_epoch = initial_step // steps_per_epoch if initial_epoch is None else initial_epoch
    for epoch in range(first_epoch, epochs):
        hooks.on_epoch_begin(epoch)
        total, count = 0.0, 0
        for batch in range(step - epoch * steps_per_epoch, steps_per_epoch):
            hooks.on_train_batch_begin(batch)
            told = float(backup is not None and backup.interrupted)
            clock = spent if started is None else spent + time.perf_counter() - started
            try:
                loss, elapsed, any_told = train_step(next(iterator), tf.constant([clock, told], tf.float32)).numpy()
            except _LOST_PEER as error:
                raise _worker_lost(step + 1, backup, error) from None
            if started is None:  # the clock starts when the first step (tracing, the first batches) ends
                started = time.perf_counter()
            step += 1
            total, count = total + float(loss), count + 1
            if budget is not None:
                budget.shared_seconds = float(elapsed)
            if backup is not None:
                backup.shared_interrupted = bool(any_told)
            logs = {"loss": total / count}
            hooks.on_train_batch_end(batch, logs)
            if budget is not None and budget.expired:  # all alike; one worker's own stop waits for the epoch's end
                break
        if validation_data is not None:
            logs = {**logs, "val_loss": _validation_loss(model, validation_data, hooks)}
        hooks.on_epoch_end(epoch, logs)
        try:
            stop = _any_worker(strategy, model.stop_training)
        except _LOST_PEER as error:
            raise _worker_lost(step, backup, error) from None
        if stop:
            break
    model.optimizer.finalize_variable_values(model.trainable_weights)
    hooks.on_train_end(logs)
    return history


def _validation_loss(model, data, hooks):
    """The compiled loss over `data` on this worker alone, each batch weighed by its sequences, as `evaluate`
    gives it to fit, with the `hooks`' test calls that `evaluate` makes."""
    total = count = 0.0
    hooks.on_test_begin()
    for batch, (inputs, labels) in enumerate(data):
        hooks.on_test_batch_begin(batch)
        sequences = float(tf.shape(labels)[0])
        total += sequences * float(model.loss(labels, model(inputs, training=False)))
        count += sequences
        hooks.on_test_batch_end(batch, {"loss": total / count})
    hooks.on_test_end({"loss": total / count})
    return total / count


def _any_worker(strategy, flag):
    """Whether `flag` is true on any worker: each worker calls it at the same point, as an all-reduce."""
    votes = strategy.run(lambda: tf.constant(float(flag) / strategy.num_replicas_in_sync))
    return bool(strategy.reduce("SUM", votes, axis=None).numpy() > 0)


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
