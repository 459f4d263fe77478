import keras

from kformer.layers.dropout import Dropout
from kformer.layers.validation import check_positive_int


@keras.saving.register_keras_serializable(package="kformer")
class FeedForward(keras.layers.Layer):
    """The position-wise feed-forward network: FFN(x) = max(0, x W1 + b1) W2 + b2.

    Every position is transformed on its own (no mixing across positions):
    widen from `d_model` to `d_ff`, apply the activation, narrow back.

    Masking: passes the Keras mask of `x` through.

    Args:
        d_model: D, the width of `x` and of the output.
        d_ff: the hidden width (the paper uses 4 * d_model).
        dropout: rate of dropout on the hidden activation while training.
        activation: the hidden activation, "relu" as in the paper.

    Call arguments:
        x: float tensor `(B, T, D)`.
        training: whether dropout is active.

    Example:
    >>> FeedForward(d_model=8, d_ff=32)(keras.ops.ones((1, 4, 8))).shape
    (1, 4, 8)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.3.
    """

    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu", **kwargs):
        super().__init__(**kwargs)
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got dropout={dropout!r}.")
        self.d_model = d_model
        self.d_ff = d_ff
        self.dropout = dropout
        self.activation = activation
        self.supports_masking = True
        self.hidden = keras.layers.Dense(d_ff, activation=activation, name="hidden", dtype=self.dtype_policy)
        self.hidden_dropout = Dropout(dropout, dtype=self.dtype_policy)
        self.projection = keras.layers.Dense(d_model, name="projection", dtype=self.dtype_policy)

    def build(self, x_shape):
        if x_shape[-1] != self.d_model:
            raise ValueError(f"{self.name}: x has width {x_shape[-1]} but d_model={self.d_model}; they must match.")
        self.hidden.build(x_shape)
        self.projection.build(tuple(x_shape[:-1]) + (self.d_ff,))

    def call(self, x, training=None):
        hidden = self.hidden(x)  # (B, T, d_ff)
        hidden = self.hidden_dropout(hidden, training=training)
        return self.projection(hidden)  # (B, T, D)

    def get_config(self):
        config = super().get_config()
        config.update(d_model=self.d_model, d_ff=self.d_ff, dropout=self.dropout, activation=self.activation)
        return config
