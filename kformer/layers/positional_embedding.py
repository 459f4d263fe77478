import math

import keras
import numpy as np
from keras import ops

from kformer.layers.validation import check_int, check_positive_int


def sinusoidal_encoding(length, d_model, start=0):
    """The paper's fixed positional encodings, one row per position.

        PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
        PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

    Sines and cosines interleave along the width. Computed, not looked up,
    so any length works, including lengths never seen in training.

    Args:
        length: T, a Python int or a scalar int tensor (may be dynamic).
        d_model: D, the width, a Python int.
        start: the first position (decoding one token at a time starts later).

    Returns:
        float32 tensor `(T, D)`, the rows for positions start .. start + T - 1.
    """
    check_positive_int("d_model", d_model)
    pair_index = np.arange(d_model) // 2  # i, shared by dimensions 2i and 2i+1
    inverse_frequency = 1.0 / np.power(10000.0, 2.0 * pair_index / d_model)  # (D,)
    positions = ops.cast(ops.arange(length) + start, "float32")
    angles = ops.expand_dims(positions, 1) * inverse_frequency.astype("float32")  # (T, D)
    is_even = np.arange(d_model) % 2 == 0
    return ops.where(is_even, ops.sin(angles), ops.cos(angles))


@keras.saving.register_keras_serializable(package="kformer")
class PositionalEmbedding(keras.layers.Layer):
    """Token embedding plus the sinusoidal positional encoding: X + PE.

    Self-attention is permutation-equivariant: without the encoding, "the
    bowler warned the umpire" and "the umpire warned the bowler" look the
    same to it. Adding PE(pos) makes the same token at a different position a
    different vector.

    Masking: with `mask_zero=True`, id 0 is padding and the layer attaches the
    mask `(B, T)` (True at real tokens) that downstream layers receive.

    Args:
        vocab_size: V, the number of token ids.
        d_model: D, the embedding width.
        scale: multiply the embeddings by sqrt(d_model) before adding PE, as
            in the paper, so they are not drowned out by the encoding.
        mask_zero: treat id 0 as padding and attach a mask.

    Call arguments:
        token_ids: int tensor `(B, T)`.
        start_position: the position of the first token (default 0); decoding
            with a cache embeds one token at a time at its own position.

    Returns:
        `(B, T, D)` in the layer's compute dtype.

    Example:
    >>> PositionalEmbedding(vocab_size=100, d_model=8)(keras.ops.array([[5, 7, 0]])).shape
    (1, 3, 8)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, sections 3.4-3.5.
    """

    def __init__(self, vocab_size, d_model, scale=True, mask_zero=True, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("d_model", d_model)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale = scale
        self.mask_zero = mask_zero
        self.token_embedding = keras.layers.Embedding(
            vocab_size, d_model, name="token_embedding", dtype=self.dtype_policy
        )

    def build(self, token_ids_shape):
        self.token_embedding.build(token_ids_shape)

    def call(self, token_ids, start_position=0):
        check_int("token_ids", token_ids)
        embedded = self.token_embedding(token_ids)  # (B, T, D)
        if self.scale:
            embedded = embedded * ops.cast(math.sqrt(self.d_model), embedded.dtype)
        encoding = sinusoidal_encoding(ops.shape(token_ids)[1], self.d_model, start_position)  # (T, D)
        return embedded + ops.cast(encoding, embedded.dtype)

    def compute_mask(self, token_ids, mask=None, start_position=0):
        return ops.not_equal(token_ids, 0) if self.mask_zero else None

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, d_model=self.d_model, scale=self.scale, mask_zero=self.mask_zero)
        return config
