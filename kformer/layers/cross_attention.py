import keras

from kformer.layers.attention import key_padding_mask
from kformer.layers.multi_head_attention import MultiHeadAttentionBase


@keras.saving.register_keras_serializable(package="kformer")
class CrossAttention(MultiHeadAttentionBase):
    """Multi-head cross-attention: queries from `x`, keys and values from `context`.

    This is how a translation decoder reads the source: every target position
    attends over every encoder output. Only the SOURCE padding mask applies;
    there is no causal mask, since the whole source is known.

    Args:
        num_heads: H, the number of heads.
        d_model: D, the width of `x` and of the output.
        head_dim: K, each head's width; defaults to `d_model // num_heads`.
        dropout: rate of dropout on the attention weights while training.
        use_bias: whether the projections have biases.

    Call arguments:
        x: float tensor `(B, T, D)`, the decoder side.
        context: float tensor `(B, S, D_context)`, the encoder output.
        context_padding_mask: optional bool `(B, S)`, True at real source
            tokens; defaults to the Keras mask attached to `context`.
        return_attention_scores: also return the weights `(B, H, T, S)`.
        training: whether dropout is active.
        cache: instead of `context`, its keys and values
            `project(context, "key", "value")`, computed once per source while
            decoding. It may hold one row for every n rows of `x` (a sentence's
            beams, sentence-major): they then read one copy of the source.

    The Keras mask of `x` is passed on to the output.

    Example:
    >>> attention = CrossAttention(num_heads=2, d_model=8)
    >>> attention(keras.random.normal((1, 3, 8)), keras.random.normal((1, 6, 8))).shape
    (1, 3, 8)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.2.3.
    """

    def build(self, x_shape, context_shape):
        self._build_projections(x_shape, context_shape)

    def call(
        self,
        x,
        context=None,
        context_padding_mask=None,
        return_attention_scores=False,
        training=None,
        context_mask=None,
        cache=None,
    ):
        if context_padding_mask is None:
            context_padding_mask = context_mask
        if (context is None) == (cache is None):
            raise ValueError(f"{self.name}: pass exactly one of `context` and `cache` (the context's keys and values).")
        attention_mask = None if context_padding_mask is None else key_padding_mask(context_padding_mask)  # (B, 1, S)
        output, weights, _ = self._attend(x, context, attention_mask, training, cache)
        return (output, weights) if return_attention_scores else output
