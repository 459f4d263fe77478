"""kformer's layers against keras-hub's own, with the same weights (an independent implementation)."""

import keras
import keras_hub
import numpy as np
import pytest
from conftest import to_numpy

from kformer import TransformerBlock, sinusoidal_encoding

D, HEADS, D_FF, EPSILON = 16, 4, 32, 1e-5


def test_sinusoidal_encoding_is_keras_hubs_sine_position_encoding():
    for length, width in [(7, 16), (50, 10), (3, 2)]:
        theirs = keras_hub.layers.SinePositionEncoding()(keras.ops.zeros((1, length, width)))
        np.testing.assert_allclose(to_numpy(sinusoidal_encoding(length, width)), to_numpy(theirs)[0], atol=1e-6)


def padded_batch(rng, batch, length, real_lengths):
    x = rng.normal(size=(batch, length, D)).astype("float32")
    padding_mask = np.arange(length)[None, :] < np.array(real_lengths)[:, None]  # (B, T)
    return x, padding_mask


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_equals_keras_hub_transformer_encoder(norm_first):
    rng = np.random.default_rng(0)
    x, padding_mask = padded_batch(rng, 3, 6, [6, 4, 1])
    theirs = keras_hub.layers.TransformerEncoder(D_FF, HEADS, layer_norm_epsilon=EPSILON, normalize_first=norm_first)
    expected = to_numpy(theirs(x, padding_mask=padding_mask))
    ours = TransformerBlock(D, HEADS, D_FF, dropout=0.0, norm_first=norm_first, layer_norm_epsilon=EPSILON)
    ours.build(x.shape)
    weights = theirs.get_weights()  # attention (8), its norm (2), feed-forward norm (2), feed-forward (4)
    ours.set_weights(weights[:10] + weights[12:16] + weights[10:12])
    actual = to_numpy(ours(x, padding_mask=padding_mask))
    np.testing.assert_allclose(actual[padding_mask], expected[padding_mask], atol=2e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_equals_keras_hub_transformer_decoder(norm_first):
    rng = np.random.default_rng(1)
    x, padding_mask = padded_batch(rng, 3, 5, [5, 3, 2])
    context, context_padding_mask = padded_batch(rng, 3, 7, [7, 2, 5])
    theirs = keras_hub.layers.TransformerDecoder(D_FF, HEADS, layer_norm_epsilon=EPSILON, normalize_first=norm_first)
    expected = to_numpy(
        theirs(
            x,
            context,
            decoder_padding_mask=padding_mask,
            encoder_padding_mask=context_padding_mask,
            use_causal_mask=True,
        )
    )
    ours = TransformerBlock(
        D,
        HEADS,
        D_FF,
        dropout=0.0,
        causal=True,
        cross_attention=True,
        norm_first=norm_first,
        layer_norm_epsilon=EPSILON,
    )
    ours.build(x.shape, context.shape)
    ours.set_weights(theirs.get_weights())  # the same order: self-attention, cross-attention, feed-forward
    actual = to_numpy(ours(x, context=context, padding_mask=padding_mask, context_padding_mask=context_padding_mask))
    np.testing.assert_allclose(actual[padding_mask], expected[padding_mask], atol=2e-5)


def test_cached_attention_equals_keras_hub_cached_multi_head_attention():
    """Decoding one position at a time: kformer's fixed-size KV cache against keras-hub's, same weights."""
    from kformer import CrossAttention, MultiHeadSelfAttention

    rng = np.random.default_rng(3)
    steps, slots = 6, 8
    x = rng.normal(size=(2, steps, D)).astype("float32")
    context = rng.normal(size=(2, 5, D)).astype("float32")
    theirs = keras_hub.layers.CachedMultiHeadAttention(HEADS, D // HEADS)
    theirs(x, x)  # builds it
    theirs.set_weights([rng.normal(size=w.shape).astype("float32") for w in theirs.get_weights()])
    ours_self = MultiHeadSelfAttention(HEADS, D, causal=True)
    ours_cross = CrossAttention(HEADS, D)
    ours_self.build(x.shape)
    ours_cross.build(x.shape, context.shape)
    ours_self.set_weights(theirs.get_weights())
    ours_cross.set_weights(theirs.get_weights())

    their_cache = keras.ops.zeros((2, 2, slots, HEADS, D // HEADS))  # (B, key|value, L, H, K)
    our_cache = ours_self.empty_cache(2, slots)
    context_cache = tuple(ours_cross.project(context, "key", "value"))
    for t in range(steps):
        step = x[:, t : t + 1]
        visible = (np.arange(slots) <= t)[None, None, :]  # (1, 1, L): keras-hub leaves this mask to its caller
        expected, their_cache = theirs(step, step, attention_mask=visible, cache=their_cache, cache_update_index=t)
        actual, our_cache = ours_self(step, cache=our_cache, cache_index=t)
        np.testing.assert_allclose(to_numpy(actual), to_numpy(expected), atol=1e-5)
        for ours, theirs_part in zip(our_cache, (their_cache[:, 0], their_cache[:, 1]), strict=True):
            np.testing.assert_allclose(to_numpy(ours), to_numpy(keras.ops.transpose(theirs_part, (0, 2, 1, 3))))
        their_context = keras.ops.stack(
            [keras.ops.transpose(part, (0, 2, 1, 3)) for part in context_cache], axis=1
        )  # (B, 2, S, H, K)
        expected, _ = theirs(step, context, cache=their_context)
        np.testing.assert_allclose(to_numpy(ours_cross(step, cache=context_cache)), to_numpy(expected), atol=1e-5)
    with pytest.raises(ValueError, match="pass `cache` and `cache_index` together"):
        ours_self(x[:, :1], cache=our_cache)
