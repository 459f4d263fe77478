"""Strategies by name, and the training loop for the one strategy model.fit cannot drive."""

import time

import tensorflow as tf

from kformer.training.config import STRATEGIES


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
