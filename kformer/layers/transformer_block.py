import functools

import keras

from kformer.layers.cross_attention import CrossAttention
from kformer.layers.dropout import Dropout
from kformer.layers.feed_forward import FeedForward
from kformer.layers.multi_head_self_attention import MultiHeadSelfAttention


@keras.saving.register_keras_serializable(package="kformer")
class TransformerBlock(keras.layers.Layer):
    """One encoder or decoder layer of the Transformer.

    Encoder block (post-LN, as in the paper):
        x = LayerNorm(x + SelfAttention(x))
        x = LayerNorm(x + FeedForward(x))
    Decoder block (`causal=True, cross_attention=True`): the self-attention is
    masked so position t sees only positions <= t, and a cross-attention
    sub-layer over the encoder output sits between it and the feed-forward:
        x = LayerNorm(x + CausalSelfAttention(x))
        x = LayerNorm(x + CrossAttention(x, context))
        x = LayerNorm(x + FeedForward(x))
    With `norm_first=True` (pre-LN) each sub-layer reads a normalised copy,
    `x = x + SubLayer(LayerNorm(x))`, which trains more stably in deep stacks;
    a pre-LN stack then needs one final LayerNorm after its last block.
    Dropout (rate `dropout`) applies to every sub-layer's output before the
    residual sum (the paper's section 5.4), and to the attention weights, as
    in `keras.layers.MultiHeadAttention`; not inside the feed-forward network
    (no dropout on its hidden activation, as in the paper and fairseq's
    defaults): on spa-eng that dropout cost 2% of the steps of a 5-minute
    run and no validation score (`bench/RESULTS.md`).

    Masking: `padding_mask` hides padded keys in self-attention and
    `context_padding_mask` hides padded source positions in cross-attention.
    When `padding_mask` is not given and `x` is the only tensor argument, the
    Keras mask attached to `x` is used. The mask of `x` is passed on.

    Args:
        d_model: D, the width of `x` and of the output.
        num_heads: H, heads in each attention sub-layer.
        d_ff: the feed-forward hidden width.
        dropout: dropout rate while training.
        causal: mask the self-attention causally (decoder).
        cross_attention: add the cross-attention sub-layer (decoder).
        norm_first: pre-LN instead of the paper's post-LN.
        layer_norm_epsilon: the epsilon of every LayerNorm.

    Call arguments:
        x: float tensor `(B, T, D)`.
        context: float tensor `(B, S, D)`, the encoder output; required
            exactly when `cross_attention=True`.
        padding_mask: optional bool `(B, T)`, True at real tokens of `x`.
        context_padding_mask: optional bool `(B, S)`, True at real source tokens.
        training: whether dropout is active.
        return_attention_scores: also return {"self_attention": (B, H, T, T),
            "cross_attention": (B, H, T, S)} weights.
        cache, cache_index: decoding one position at a time, the
            self-attention's `(key, value)` buffers and where the keys and
            values of `x` go (see `MultiHeadSelfAttention`); the updated cache
            is returned last.
        context_cache: instead of `context`, the cross-attention's keys and
            values of it, computed once per source (see `CrossAttention`).

    Example:
    >>> decoder_block = TransformerBlock(8, 2, 32, causal=True, cross_attention=True)
    >>> decoder_block(keras.ops.ones((1, 3, 8)), context=keras.ops.ones((1, 5, 8))).shape
    (1, 3, 8)

    Reference: Vaswani et al., "Attention Is All You Need", 2017, section 3.1;
    Xiong et al., "On Layer Normalization in the Transformer Architecture", 2020.
    """

    def __init__(
        self,
        d_model,
        num_heads,
        d_ff,
        dropout=0.1,
        causal=False,
        cross_attention=False,
        norm_first=False,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.causal = causal
        self.cross_attention = cross_attention
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.supports_masking = True

        # Every sublayer takes the block's dtype policy, so a block built with
        # dtype="mixed_float16" adds float16 to float16 in its residual sums.
        policy = self.dtype_policy
        norm = functools.partial(keras.layers.LayerNormalization, epsilon=layer_norm_epsilon, dtype=policy)
        self.self_attention = MultiHeadSelfAttention(
            num_heads, d_model, dropout=dropout, causal=causal, name="self_attention", dtype=policy
        )
        self.self_attention_norm = norm(name="self_attention_norm")
        if cross_attention:
            self.cross_attention_layer = CrossAttention(
                num_heads, d_model, dropout=dropout, name="cross_attention", dtype=policy
            )
            self.cross_attention_norm = norm(name="cross_attention_norm")
        # No dropout on the feed-forward's hidden activation: see above.
        self.feed_forward = FeedForward(d_model, d_ff, name="feed_forward", dtype=policy)
        self.feed_forward_norm = norm(name="feed_forward_norm")
        self.residual_dropout = Dropout(dropout, dtype=policy)

    def build(self, x_shape, context_shape=None):
        if self.cross_attention and context_shape is None:
            raise ValueError(f"{self.name} has cross_attention=True and needs `context` (the encoder output).")
        self.self_attention.build(x_shape)
        self.self_attention_norm.build(x_shape)
        if self.cross_attention:
            self.cross_attention_layer.build(x_shape, context_shape)
            self.cross_attention_norm.build(x_shape)
        self.feed_forward.build(x_shape)
        self.feed_forward_norm.build(x_shape)

    def call(
        self,
        x,
        context=None,
        padding_mask=None,
        context_padding_mask=None,
        training=None,
        mask=None,
        return_attention_scores=False,
        cache=None,
        cache_index=None,
        context_cache=None,
    ):
        has_context = context is not None or context_cache is not None
        if has_context != self.cross_attention:
            raise ValueError(
                f"{self.name}: pass `context` exactly when cross_attention=True "
                f"(cross_attention={self.cross_attention}, context given: {has_context})."
            )
        padding_mask = mask if padding_mask is None else padding_mask
        scores = {}

        def self_attention(h):
            nonlocal cache
            outputs = self.self_attention(
                h,
                padding_mask=padding_mask,
                return_attention_scores=True,
                training=training,
                cache=cache,
                cache_index=cache_index,
            )
            output, scores["self_attention"] = outputs[:2]
            cache = outputs[2] if cache is not None else None
            return output

        def cross_attention(h):
            output, scores["cross_attention"] = self.cross_attention_layer(
                h,
                context,
                context_padding_mask=context_padding_mask,
                return_attention_scores=True,
                training=training,
                cache=context_cache,
            )
            return output

        x = self._residual(x, self.self_attention_norm, training, self_attention)
        if self.cross_attention:
            x = self._residual(x, self.cross_attention_norm, training, cross_attention)
        x = self._residual(x, self.feed_forward_norm, training, lambda h: self.feed_forward(h, training=training))
        outputs = (x, scores) if return_attention_scores else (x,)
        if cache is not None:
            outputs += (cache,)
        return outputs if len(outputs) > 1 else x

    def _residual(self, x, norm, training, sublayer):
        """x + Dropout(SubLayer(x)), normalised after (post-LN) or before (pre-LN)."""
        if self.norm_first:
            return x + self.residual_dropout(sublayer(norm(x)), training=training)
        return norm(x + self.residual_dropout(sublayer(x), training=training))

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            causal=self.causal,
            cross_attention=self.cross_attention,
            norm_first=self.norm_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config
