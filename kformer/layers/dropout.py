import keras
import tensorflow as tf

try:
    # TensorFlow has no public way to ask "is this op being compiled by XLA?";
    # this is the function its own layers use. Without it, the layer is
    # exactly keras.layers.Dropout (tests/test_dropout.py checks both paths).
    from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext as _graph_in_xla
except ImportError:  # pragma: no cover - a TensorFlow that moved it
    _graph_in_xla = None

_LEVELS = 256  # the mask compares 8 random bits per element with a threshold


def compiling_with_xla():
    """True while the current function is being compiled by XLA (`jit_compile=True`)."""
    return _graph_in_xla is not None and _graph_in_xla(tf.compat.v1.get_default_graph())


@keras.saving.register_keras_serializable(package="kformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` with a fast mask when compiled by XLA.

    The same layer as Keras' (zero each element with probability `rate` while
    training, scale the rest so the expected value is unchanged), except for
    where the random numbers come from inside an XLA computation
    (`jit_compile=True`, kformer's default). There TensorFlow's default
    stateless generator compiles to a slow expansion: drawing masks took 18%
    of a training step of the benchmark model on a 2-core CPU. This layer asks
    XLA's ThreeFry generator for 8 random bits per element instead of a
    float32 each (one 32-bit draw masks four elements), which brought the
    masks' cost down to a few percent of a step (`bench/RESULTS.md`). The
    rate is then rounded to a multiple of 1/256 (0.1 becomes 26/256 =
    0.1016) and the scale is the exact inverse of the resulting keep
    probability.
    Outside XLA (eager, plain `tf.function`), where TensorFlow has no ThreeFry
    kernel, it is exactly `keras.layers.Dropout`; so it is wherever the XLA
    check (`compiling_with_xla`) or Keras' `seed_generator` is unavailable.

    Args:
        rate: the fraction of elements to zero, in [0, 1).
        seed: optional int seed of the layer's random stream.

    Call arguments:
        inputs: a float tensor of any shape.
        training: whether to drop (no-op otherwise).

    Example:
    >>> Dropout(0.5)(keras.ops.ones((2, 3)), training=False).shape
    (2, 3)
    """

    def call(self, inputs, training=False):
        seed_generator = getattr(self, "seed_generator", None)  # keras.layers.Dropout's random stream
        fast = training and self.rate > 0 and self.noise_shape is None and seed_generator is not None
        if not (fast and compiling_with_xla()):
            return super().call(inputs, training=training)
        # The seed comes from the layer's own stream through public keras.random;
        # XLA's generators take int32 seeds.
        seed = keras.random.randint((2,), 0, tf.int32.max, dtype="int32", seed=seed_generator)
        shape = tf.shape(inputs)
        size = tf.reduce_prod(shape)
        words = tf.random.stateless_uniform(
            ((size + 3) // 4,), seed=seed, minval=None, maxval=None, dtype=tf.uint32, alg="threefry"
        )  # 32 random bits per four elements
        bits = tf.reshape(tf.reshape(tf.bitcast(words, tf.uint8), (-1,))[:size], shape)
        threshold = min(round(self.rate * _LEVELS), _LEVELS - 1)  # drop where bits < threshold
        kept = tf.cast(bits >= threshold, inputs.dtype)
        return inputs * kept * tf.cast(_LEVELS / (_LEVELS - threshold), inputs.dtype)
