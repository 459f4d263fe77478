"""What training optimizes: the loss, the metric, the learning-rate schedules, the optimizer.

Follows the paper (section 5): Adam(0.9, 0.98, 1e-9), label smoothing 0.1,
dropout 0.1, and either its schedule (warmup, then 1/sqrt(step), built for
100k steps) or, by default, the same warmup and peak decaying linearly to zero
exactly when the budget (epochs or minutes) ends. Every object here is
registered with Keras, since a compiled model's `.keras` file names them.
"""

import keras
import tensorflow as tf
from keras import ops

from kformer.data.text import PAD_ID


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
        warmup = ops.cast(self.warmup_steps, "float32")
        return self.scale * self.d_model**-0.5 * ops.minimum(ops.rsqrt(step), step * warmup**-1.5)

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
        schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=clipnorm, use_ema=bool(ema), ema_momentum=ema or 0.99
    )


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
