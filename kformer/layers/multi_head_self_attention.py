import keras

from kformer.layers.attention import combine_masks, key_padding_mask, make_causal_mask
from kformer.layers.multi_head_attention import MultiHeadAttentionBase


@keras.saving.register_keras_serializable(package="kformer")
class MultiHeadSelfAttention(MultiHeadAttentionBase):
    """Multi-head self-attention: every position of `x` attends over `x`.

    Each head projects `x` with its own W_Q, W_K, W_V into `head_dim` wide
    queries, keys and values, runs `softmax(Q K^T / sqrt(d_k)) V`, and the heads
    are concatenated and projected back to `d_model` by W_O.

    Masking: keys at padded positions (`padding_mask` False) get zero weight;
    with `causal=True` position t also never sees positions after t. When
    `padding_mask` is not given, the Keras mask attached to `x` (for example by
    `PositionalEmbedding`) is used, and it is passed on to the output.

    Args:
        num_heads: H, the number of heads.
        d_model: D, the width of `x` and of the output.
        head_dim: K, each head's width; defaults to `d_model // num_heads`.
        dropout: rate of dropout on the attention weights while training.
        causal: whether to add the causal (look-ahead) mask, as in a decoder.
        use_bias: whether the projections have biases.

    Call arguments:
        x: float tensor `(B, T, D)`.
        padding_mask: optional bool `(B, T)`, True at real tokens.
        return_attention_scores: also return the weights `(B, H, T, T)`.
        training: whether dropout is active.
        cache: for decoding one position at a time, `(key, value)` buffers
            `(B, H, L, K)` (`empty_cache`): the keys and values of `x` are
            written into them at `cache_index` onwards (a scalar), and `x`
            attends over the buffer up to each query's position, causally,
            whatever `causal` and the masks say. The updated cache is returned
            last.

    Example:
    >>> attention = MultiHeadSelfAttention(num_heads=2, d_model=8, causal=True)
    >>> attention(keras.random.normal((1, 5, 8))).shape
    (1, 5, 8)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.2.
    """

    def __init__(self, num_heads, d_model, head_dim=None, dropout=0.0, causal=False, use_bias=True, **kwargs):
        super().__init__(num_heads, d_model, head_dim=head_dim, dropout=dropout, use_bias=use_bias, **kwargs)
        self.causal = causal

    def empty_cache(self, batch_size, length):
        """Zero `(key, value)` buffers `(batch_size, H, length, K)` for `call(..., cache=, cache_index=)`."""
        empty = keras.ops.zeros((batch_size, self.num_heads, length, self.head_dim), self.compute_dtype)
        return empty, empty

    def build(self, x_shape):
        self._build_projections(x_shape, x_shape)

    def call(
        self,
        x,
        padding_mask=None,
        return_attention_scores=False,
        training=None,
        mask=None,
        cache=None,
        cache_index=None,
    ):
        if (cache is None) != (cache_index is None):
            raise ValueError(
                f"{self.name}: pass `cache` and `cache_index` together (where the keys and values of x go), or neither."
            )
        padding_mask = mask if padding_mask is None else padding_mask
        attention_mask = combine_masks(
            None if padding_mask is None else key_padding_mask(padding_mask),  # (B, 1, T)
            make_causal_mask(keras.ops.shape(x)[1]) if self.causal else None,  # (1, T, T)
        )
        output, weights, cache = self._attend(x, x, attention_mask, training, cache, cache_index)
        outputs = (output, weights) if return_attention_scores else (output,)
        if cache is not None:
            outputs += (cache,)
        return outputs if len(outputs) > 1 else output

    def get_config(self):
        config = super().get_config()
        config.update(causal=self.causal)
        return config
