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
