"""TransformerBlock against a NumPy transcription of the paper, and its invariances."""

import warnings

import numpy as np
import pytest
from conftest import to_numpy

from kformer import FeedForward, PositionalEmbedding, TransformerBlock

rng = np.random.default_rng(7)


def random_normal(*shape):
    return rng.standard_normal(shape).astype("float32")


def np_attention(layer, x, context, mask):
    """Multi-head attention in NumPy from a kformer attention layer's weights."""
    w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o = layer.get_weights()
    q = np.einsum("btd,dhk->bhtk", x, w_q) + b_q[None, :, None, :]
    k = np.einsum("bsd,dhk->bhsk", context, w_k) + b_k[None, :, None, :]
    v = np.einsum("bsd,dhk->bhsk", context, w_v) + b_v[None, :, None, :]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    scores = np.where(mask[:, None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhtk,hkd->btd", weights @ v, w_o) + b_o


def np_layer_norm(norm, x, epsilon):
    gamma, beta = norm.get_weights()
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + epsilon) + beta


def np_feed_forward(ffn, x):
    w_1, b_1, w_2, b_2 = ffn.get_weights()
    return np.maximum(0, x @ w_1 + b_1) @ w_2 + b_2


def np_block(block, x, context=None, padding=None, context_padding=None, *, decoder, norm_first, epsilon=1e-6):
    """The paper's layer in NumPy with `block`'s weights; its structure from the arguments, not from `block`."""
    batch, length = x.shape[:2]
    padding = np.ones((batch, length), bool) if padding is None else padding
    self_mask = np.broadcast_to(padding[:, None, :], (batch, length, length))
    if decoder:
        self_mask = self_mask & np.tril(np.ones((length, length), bool))
    sublayers = [(block.self_attention_norm, lambda h: np_attention(block.self_attention, h, h, self_mask))]
    if decoder:
        source_padding = np.ones(context.shape[:2], bool) if context_padding is None else context_padding
        cross_mask = np.broadcast_to(source_padding[:, None, :], (batch, length, context.shape[1]))
        sublayers.append(
            (block.cross_attention_norm, lambda h: np_attention(block.cross_attention_layer, h, context, cross_mask))
        )
    sublayers.append((block.feed_forward_norm, lambda h: np_feed_forward(block.feed_forward, h)))
    for norm, sublayer in sublayers:
        if norm_first:
            x = x + sublayer(np_layer_norm(norm, x, epsilon))
        else:
            x = np_layer_norm(norm, x + sublayer(x), epsilon)
    return x


def perturb(block):
    """Random biases and norm parameters, so the comparison exercises all of them."""
    block.set_weights([w + 0.1 * random_normal(*w.shape) for w in block.get_weights()])


# None: the block's defaults, which must be the paper's post-LN with epsilon 1e-6.
@pytest.mark.parametrize("norm_first", [None, True])
@pytest.mark.parametrize("decoder", [False, True])
def test_block_equals_numpy_transcription(norm_first, decoder):
    x, context = random_normal(2, 6, 16), random_normal(2, 9, 16)
    padding = np.arange(6)[None, :] < np.array([[6], [4]])
    source_padding = np.arange(9)[None, :] < np.array([[9], [5]])
    settings = {} if norm_first is None else {"norm_first": norm_first}
    block = TransformerBlock(16, 4, 32, causal=decoder, cross_attention=decoder, **settings)
    kwargs = dict(context=context, context_padding_mask=source_padding) if decoder else {}
    block(x, padding_mask=padding, **kwargs)
    perturb(block)
    actual = to_numpy(block(x, padding_mask=padding, **kwargs))
    expected = np_block(
        block, x, context if decoder else None, padding, source_padding, decoder=decoder, norm_first=bool(norm_first)
    )
    np.testing.assert_allclose(actual, expected, atol=2e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_every_layer_norm_uses_the_blocks_epsilon(norm_first):
    """An epsilon near the variance of what is normalised: each of the three norms' own epsilon shows."""
    x, context = 0.3 * random_normal(2, 6, 16), random_normal(2, 9, 16)
    block = TransformerBlock(
        16, 4, 32, causal=True, cross_attention=True, norm_first=norm_first, layer_norm_epsilon=0.5
    )
    block(x, context=context)
    perturb(block)
    expected = np_block(block, x, context, decoder=True, norm_first=norm_first, epsilon=0.5)
    np.testing.assert_allclose(to_numpy(block(x, context=context)), expected, atol=2e-5)
    assert not np.allclose(expected, np_block(block, x, context, decoder=True, norm_first=norm_first), atol=1e-2)


def test_decoder_block_ignores_future_target_tokens():
    block = TransformerBlock(16, 4, 32, dropout=0.0, causal=True, cross_attention=True)
    x, context = random_normal(1, 8, 16), random_normal(1, 5, 16)
    for t in range(7):
        changed = x.copy()
        changed[:, t + 1 :] = random_normal(1, 8 - t - 1, 16)
        np.testing.assert_allclose(
            to_numpy(block(changed, context=context))[:, : t + 1],
            to_numpy(block(x, context=context))[:, : t + 1],
            atol=1e-5,
        )


def test_encoder_block_ignores_padded_tokens():
    block = TransformerBlock(16, 4, 32)
    x = random_normal(2, 6, 16)
    padding = np.arange(6)[None, :] < np.array([[6], [3]])
    changed = x.copy()
    changed[1, 3:] = random_normal(3, 16) * 50
    np.testing.assert_allclose(
        to_numpy(block(changed, padding_mask=padding))[1, :3],
        to_numpy(block(x, padding_mask=padding))[1, :3],
        atol=1e-5,
    )


def test_decoder_block_ignores_padded_source_tokens():
    block = TransformerBlock(16, 4, 32, causal=True, cross_attention=True)
    x, context = random_normal(2, 4, 16), random_normal(2, 7, 16)
    source_padding = np.arange(7)[None, :] < np.array([[7], [2]])
    changed = context.copy()
    changed[1, 2:] = random_normal(5, 16) * 50
    np.testing.assert_allclose(
        to_numpy(block(x, context=changed, context_padding_mask=source_padding)),
        to_numpy(block(x, context=context, context_padding_mask=source_padding)),
        atol=1e-5,
    )


def test_the_keras_mask_of_its_input_hides_padded_keys_when_no_padding_mask_is_given():
    """In a functional model (the Embedding's mask), or given as Keras' `mask` argument."""
    import keras

    tokens = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 0, 0]])
    embedding, block = keras.layers.Embedding(10, 16, mask_zero=True), TransformerBlock(16, 4, 32)
    inputs = keras.Input((None,), dtype="int32")
    model = keras.Model(inputs, block(embedding(inputs)))
    x = keras.ops.convert_to_tensor(to_numpy(embedding(tokens)))  # the same vectors, no mask attached
    np.testing.assert_allclose(to_numpy(model(tokens)), to_numpy(block(x, padding_mask=tokens != 0)), atol=1e-6)
    np.testing.assert_allclose(to_numpy(block(x, mask=tokens != 0)), to_numpy(model(tokens)), atol=1e-6)  # given
    assert not np.allclose(to_numpy(model(tokens))[1, :3], to_numpy(block(x))[1, :3], atol=1e-3)


def test_the_attention_weights_it_returns_are_each_sub_layers_under_its_name():
    block = TransformerBlock(16, 4, 32, causal=True, cross_attention=True)
    x, context = random_normal(2, 5, 16), random_normal(2, 7, 16)
    source_padding = np.arange(7)[None, :] < np.array([[7], [3]])
    output, weights = block(x, context=context, context_padding_mask=source_padding, return_attention_scores=True)
    assert sorted(weights) == ["cross_attention", "self_attention"]
    self_weights, cross_weights = to_numpy(weights["self_attention"]), to_numpy(weights["cross_attention"])
    assert self_weights.shape == (2, 4, 5, 5) and cross_weights.shape == (2, 4, 5, 7)
    np.testing.assert_array_equal(np.triu(self_weights, 1), 0)  # causal: no weight on later positions
    np.testing.assert_array_equal(cross_weights[1, :, :, 3:], 0)  # no weight on padded source positions
    np.testing.assert_allclose(self_weights.sum(-1), 1, atol=1e-6)
    np.testing.assert_allclose(cross_weights.sum(-1), 1, atol=1e-6)
    np.testing.assert_array_equal(
        to_numpy(output), to_numpy(block(x, context=context, context_padding_mask=source_padding))
    )


def test_dropout_is_active_only_while_training():
    block = TransformerBlock(16, 4, 32, dropout=0.5)
    x = random_normal(1, 5, 16)
    np.testing.assert_allclose(to_numpy(block(x)), to_numpy(block(x, training=False)), atol=1e-6)
    assert not np.allclose(to_numpy(block(x, training=True)), to_numpy(block(x)), atol=1e-3)


def test_feed_forward_has_no_hidden_dropout_but_attention_weights_do():
    """The paper's placement: dropout on sub-layer outputs (and attention weights), none inside the FFN."""
    block = TransformerBlock(16, 4, 32, dropout=0.5)
    x = random_normal(2, 5, 16)
    block(x)  # build
    np.testing.assert_allclose(
        to_numpy(block.feed_forward(x, training=True)), to_numpy(block.feed_forward(x, training=False)), atol=1e-6
    )
    attention = lambda training: to_numpy(block.self_attention(x, training=training))  # noqa: E731
    assert not np.allclose(attention(True), attention(False), atol=1e-3)


def test_a_decoder_blocks_cross_attention_weights_are_dropped_while_training():
    block = TransformerBlock(16, 4, 32, dropout=0.5, causal=True, cross_attention=True)
    x, context = random_normal(2, 5, 16), random_normal(2, 7, 16)
    block(x, context=context)  # build
    cross = lambda training: to_numpy(block.cross_attention_layer(x, context, training=training))  # noqa: E731
    assert not np.allclose(cross(True), cross(False), atol=1e-3)


def test_each_sub_layers_output_is_dropped_too_not_only_the_attention_weights():
    """With the attention weights' dropout switched off, training still drops: the residual branches' dropout."""
    block = TransformerBlock(16, 4, 32, dropout=0.5)
    x = random_normal(2, 5, 16)
    block(x)  # build
    block.self_attention.attention_dropout.rate = 0.0
    attention = lambda training: to_numpy(block.self_attention(x, training=training))  # noqa: E731
    np.testing.assert_allclose(attention(True), attention(False), atol=1e-6)  # the weights' dropout is off
    assert not np.allclose(to_numpy(block(x, training=True)), to_numpy(block(x, training=False)), atol=1e-3)


@pytest.mark.parametrize("decoder", [False, True])
def test_block_reads_an_embeddings_keras_mask_and_passes_it_on_without_a_warning(decoder):
    tokens = np.array([[5, 3, 0, 0]])
    embedded = PositionalEmbedding(vocab_size=10, d_model=16)(tokens)  # carries the padding mask
    block = TransformerBlock(16, 4, 32, causal=decoder, cross_attention=decoder)
    context = PositionalEmbedding(vocab_size=10, d_model=16)(np.array([[1, 2, 3, 0, 0]])) if decoder else None
    kwargs = {"context": context} if decoder else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Keras warns when a layer without masking support drops a mask
        output = block(embedded, **kwargs)
    np.testing.assert_array_equal(to_numpy(output._keras_mask), [[True, True, False, False]])  # x's, not the context's
    explicit = block(to_numpy(embedded), padding_mask=tokens != 0, **kwargs)  # the same mask, passed by hand
    np.testing.assert_allclose(to_numpy(output)[:, :2], to_numpy(explicit)[:, :2], atol=1e-6)
    if not decoder:  # (a causal block's real tokens never read the padding after them)
        unmasked = block(to_numpy(embedded))  # no mask: the real tokens read the padding too
        assert not np.allclose(to_numpy(output)[:, :2], to_numpy(unmasked)[:, :2], atol=1e-4)


def test_sub_layers_have_readable_weight_names():
    """Summaries, TensorBoard and checkpoints inspected by hand show these names."""
    block = TransformerBlock(16, 4, 32, causal=True, cross_attention=True)
    block(random_normal(1, 3, 16), context=random_normal(1, 2, 16))
    names = {weight.path.split("/", 1)[1].rsplit("/", 1)[0] for weight in block.weights}
    assert names == {
        "self_attention",
        "self_attention_norm",
        "cross_attention",
        "cross_attention_norm",
        "feed_forward/hidden",
        "feed_forward/projection",
        "feed_forward_norm",
    }


def test_feed_forward_passes_a_keras_mask_on_without_a_warning():
    embedded = PositionalEmbedding(vocab_size=10, d_model=16)(np.array([[5, 3, 0]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        output = FeedForward(16, 32)(embedded)
    np.testing.assert_array_equal(to_numpy(output._keras_mask), [[True, True, False]])
