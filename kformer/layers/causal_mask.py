import keras

from kformer.layers.attention import combine_masks, key_padding_mask, make_causal_mask


@keras.saving.register_keras_serializable(package="kformer")
class CausalMask(keras.layers.Layer):
    """Turns a sequence into the mask that hides each position's future.

    Position t may attend to positions 0..t and never to t+1.. : in training
    the decoder sees the whole target at once (teacher forcing), and this mask
    is what stops it from reading the word it is asked to predict.

    This is the standalone form, for functional models that pass masks
    explicitly (for example as `attention_mask` of
    `keras.layers.MultiHeadAttention`). kformer's own layers build the same
    mask from `make_causal_mask` where they need it:
    `MultiHeadSelfAttention(causal=True)` and decoder `TransformerBlock`s.

    Masking: when a Keras padding mask `(B, T)` is attached to the input, the
    result also hides padded keys and has shape `(B, T, T)`. The output
    itself carries no mask.

    Call arguments:
        x: any tensor `(B, T, ...)`: token ids or embeddings.

    Returns:
        bool tensor `(1, T, T)` (or `(B, T, T)` with a padding mask);
        True = may attend.

    Example:
    >>> CausalMask()(keras.ops.zeros((2, 3))).numpy().astype(int)[0]
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, x, mask=None):
        causal = make_causal_mask(keras.ops.shape(x)[1])  # (1, T, T)
        return causal if mask is None else combine_masks(causal, key_padding_mask(mask))  # (B, T, T)

    def compute_mask(self, x, mask=None):
        return None
