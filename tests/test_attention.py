"""Scaled dot-product attention, self- and cross-attention: masks, invariances,
and equality with keras.layers.MultiHeadAttention given the same weights."""

import warnings

import keras
import numpy as np
import pytest
from conftest import to_numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from kformer import (
    CausalMask,
    CrossAttention,
    MultiHeadSelfAttention,
    PositionalEmbedding,
    attention_scores,
    combine_masks,
    make_causal_mask,
    scaled_dot_product_attention,
)

rng = np.random.default_rng(0)


def random_normal(*shape):
    return rng.standard_normal(shape).astype("float32")


def keras_reference(layer, query_width, context_width):
    """keras.layers.MultiHeadAttention holding `layer`'s weights."""
    reference = keras.layers.MultiHeadAttention(layer.num_heads, layer.head_dim, use_bias=layer.use_bias)
    reference.build((1, 1, query_width), (1, 1, context_width))
    reference.set_weights(layer.get_weights())
    return reference


def randomize_biases(layer):
    layer.set_weights([w + random_normal(*w.shape) * 0.1 for w in layer.get_weights()])


# training=True runs the projections as one matmul against the kernels side by side, inference apart.
@pytest.mark.parametrize("training", [None, True])
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_equals_keras_multi_head_attention(causal, training):
    x = random_normal(2, 7, 16)
    lengths = np.array([7, 4])
    padding = np.arange(7)[None, :] < lengths[:, None]  # (B, T)
    layer = MultiHeadSelfAttention(num_heads=4, d_model=16, causal=causal)
    output, scores = layer(x, padding_mask=padding, return_attention_scores=True)
    randomize_biases(layer)
    output, scores = layer(x, padding_mask=padding, return_attention_scores=True, training=training)

    mask = np.broadcast_to(padding[:, None, :], (2, 7, 7))
    if causal:
        mask = mask & np.tril(np.ones((7, 7), bool))
    expected, expected_scores = keras_reference(layer, 16, 16)(x, x, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(output), to_numpy(expected), atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores), to_numpy(expected_scores), atol=1e-5)


@pytest.mark.parametrize("training", [None, True])
def test_cross_attention_equals_keras_multi_head_attention(training):
    x, context = random_normal(2, 5, 12), random_normal(2, 9, 20)
    source_padding = np.arange(9)[None, :] < np.array([[9], [3]])
    layer = CrossAttention(num_heads=3, d_model=12)
    layer(x, context)
    randomize_biases(layer)
    output, scores = layer(
        x, context, context_padding_mask=source_padding, return_attention_scores=True, training=training
    )
    mask = np.broadcast_to(source_padding[:, None, :], (2, 5, 9))
    expected, expected_scores = keras_reference(layer, 12, 20)(
        x, context, attention_mask=mask, return_attention_scores=True
    )
    assert scores.shape == (2, 3, 5, 9)
    np.testing.assert_allclose(to_numpy(output), to_numpy(expected), atol=1e-5)
    np.testing.assert_allclose(to_numpy(scores), to_numpy(expected_scores), atol=1e-5)


def test_weights_are_named_kernels_start_glorot_uniform_and_biases_at_zero():
    """Checkpoints and summaries show these names. Each kernel is drawn as Keras' add_weight draws one of
    its shape with "glorot_uniform" (its fans read the first axis as a receptive field; keras'
    MultiHeadAttention's are the projection's, D and H*K, a range 2-5x wider), the biases are zero."""
    layer = CrossAttention(num_heads=2, d_model=8)
    layer(random_normal(1, 3, 8), random_normal(1, 5, 6))
    names = [weight.path.rsplit("/", 1)[1] for weight in layer.weights]
    assert names == [f"{name}_{part}" for name in ("query", "key", "value", "output") for part in ("kernel", "bias")]
    for weight, name in zip(layer.get_weights(), names, strict=True):
        if name.endswith("bias"):
            assert not weight.any()
        else:  # a few dozen uniform draws reach near the edge of the range
            edge = np.abs(to_numpy(keras.initializers.GlorotUniform(seed=1)(weight.shape))).max()
            assert 0.75 < np.abs(weight).max() / edge < 1.33


@pytest.mark.parametrize("training, self_matmuls, cross_matmuls", [(False, 4, 4), (True, 2, 3)])
def test_projections_run_side_by_side_only_while_training(training, self_matmuls, cross_matmuls):
    """Side by side the kernels are copied into one buffer on every call: worth it for training, not inference."""
    import tensorflow as tf

    def matmuls(function, *shapes):
        graph = tf.function(function).get_concrete_function(*(tf.TensorSpec(shape) for shape in shapes)).graph
        return [op.type for op in graph.get_operations()].count("MatMul")

    layer, cross = MultiHeadSelfAttention(num_heads=2, d_model=8), CrossAttention(num_heads=2, d_model=8)
    layer(random_normal(1, 3, 8)), cross(random_normal(1, 3, 8), random_normal(1, 4, 8))
    assert matmuls(lambda x: layer(x, training=training), (1, 3, 8)) == self_matmuls  # Q, K, V, W_O or QKV, W_O
    assert matmuls(lambda x, c: cross(x, c, training=training), (1, 3, 8), (1, 4, 8)) == cross_matmuls  # Q, KV, W_O
    assert matmuls(lambda c: cross.project(c, "key", "value"), (1, 4, 8)) == 2  # a decoder's cache: apart


def test_a_cache_with_one_row_for_each_sentences_beams_equals_attending_each_beams_copy_of_its_source():
    """While decoding with beams, a source's keys and values are computed once; its n beams (rows of x,
    sentence-major) read that one copy, masked by the sentence's padding."""
    layer = CrossAttention(num_heads=2, d_model=8)
    context, padding = random_normal(2, 5, 8), np.arange(5)[None, :] < np.array([[5], [2]])
    x = random_normal(6, 2, 8)  # 3 beams of each of the 2 sentences, 2 positions each
    expected = layer(x, np.repeat(context, 3, axis=0), context_padding_mask=np.repeat(padding, 3, axis=0))
    cached = layer(x, cache=layer.project(context, "key", "value"), context_padding_mask=padding)
    np.testing.assert_allclose(to_numpy(cached), to_numpy(expected), atol=1e-5)


def test_weights_rows_sum_to_one_and_masked_weights_are_exactly_zero():
    mask = np.tril(np.ones((6, 6), bool))[None] & (np.arange(6) < 4)[None, None, :]
    q, k, v = random_normal(1, 6, 8), random_normal(1, 6, 8), random_normal(1, 6, 8)
    _, weights = scaled_dot_product_attention(q, k, v, mask)
    weights = to_numpy(weights)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert np.all(weights[~np.broadcast_to(mask, weights.shape)] == 0.0)


def test_fully_masked_row_gives_zeros_not_nan():
    mask = np.array([[[True, False, True], [False, False, False]]])  # second query sees nothing
    output, weights = scaled_dot_product_attention(
        random_normal(1, 2, 4) * 1e3, random_normal(1, 3, 4), random_normal(1, 3, 5), mask
    )
    output, weights = to_numpy(output), to_numpy(weights)
    assert np.isfinite(output).all() and np.isfinite(weights).all()
    np.testing.assert_array_equal(weights[0, 1], 0.0)
    np.testing.assert_array_equal(output[0, 1], 0.0)
    np.testing.assert_allclose(weights[0, 0].sum(), 1.0, atol=1e-6)


def test_a_single_key_takes_all_the_weight_unless_masked():
    value = random_normal(2, 1, 5)
    mask = np.array([[[True], [True]], [[False], [False]]])  # the second sentence's one key is padding
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "softmax over an axis of size 1" warning
        output, weights = scaled_dot_product_attention(random_normal(2, 2, 4), random_normal(2, 1, 4), value, mask)
    np.testing.assert_array_equal(to_numpy(weights)[:, :, 0], [[1.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(to_numpy(output)[0], np.repeat(value[0], 2, axis=0))
    np.testing.assert_array_equal(to_numpy(output)[1], 0.0)


def test_mask_is_applied_before_the_softmax():
    # Masking the scores (-inf before exp) equals zeroing the weights after
    # the softmax AND renormalising the rows: the seed's point is that the
    # first needs no extra step.
    scores_query, keys = random_normal(1, 4, 8), random_normal(1, 4, 8)
    values = np.eye(4, dtype="float32")[None]
    _, full = scaled_dot_product_attention(scores_query, keys, values)
    _, masked = scaled_dot_product_attention(scores_query, keys, values, make_causal_mask(4))
    full, masked = to_numpy(full)[0], to_numpy(masked)[0]
    expected = np.tril(full) / np.tril(full).sum(-1, keepdims=True)
    np.testing.assert_allclose(masked, expected, atol=1e-6)


@pytest.mark.parametrize("d_k", [4, 64, 512])
def test_scaling_keeps_score_variance_near_one(d_k):
    """Unit-variance q and k: q . k has variance d_k; kformer's scores (divided by sqrt(d_k)) have 1."""
    q, k = random_normal(4000, 1, d_k), random_normal(4000, 1, d_k)
    raw = np.sum(q * k, axis=-1)
    assert raw.var() == pytest.approx(d_k, rel=0.1)
    scores = to_numpy(attention_scores(q, k))  # (4000, 1, 1): each pair's own score
    assert scores.var() == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_a_given_scale_multiplies_the_dot_products(scale):
    q, k = random_normal(2, 3, 4), random_normal(2, 5, 4)
    expected = scale * q @ np.swapaxes(k, -1, -2)
    np.testing.assert_allclose(to_numpy(attention_scores(q, k, scale)), expected, rtol=1e-5, atol=1e-6)


def test_scaled_dot_product_attention_equals_numpy():
    q, k, v = random_normal(2, 3, 5, 8), random_normal(2, 3, 7, 8), random_normal(2, 3, 7, 6)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    output, actual_weights = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(to_numpy(actual_weights), weights, atol=1e-6)
    np.testing.assert_allclose(to_numpy(output), weights @ v, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(st.permutations(list(range(6))))
def test_self_attention_is_permutation_equivariant(permutation):
    layer = MultiHeadSelfAttention(num_heads=2, d_model=8)
    x = random_normal(1, 6, 8)
    permutation = np.array(permutation)
    np.testing.assert_allclose(to_numpy(layer(x[:, permutation])), to_numpy(layer(x))[:, permutation], atol=1e-5)


@pytest.mark.parametrize("t", [0, 2, 5])
def test_causal_self_attention_ignores_the_future(t):
    layer = MultiHeadSelfAttention(num_heads=2, d_model=8, causal=True)
    x = random_normal(1, 7, 8)
    changed = x.copy()
    changed[:, t + 1 :] = random_normal(1, 7 - t - 1, 8)
    before, after = to_numpy(layer(x)), to_numpy(layer(changed))
    np.testing.assert_allclose(before[:, : t + 1], after[:, : t + 1], atol=1e-6)
    assert not np.allclose(before[:, t + 1 :], after[:, t + 1 :])


def test_self_attention_ignores_padded_positions():
    layer = MultiHeadSelfAttention(num_heads=2, d_model=8)
    x = random_normal(2, 6, 8)
    padding = np.arange(6)[None, :] < np.array([[6], [4]])
    changed = x.copy()
    changed[1, 4:] = random_normal(2, 8) * 100
    before = to_numpy(layer(x, padding_mask=padding))
    after = to_numpy(layer(changed, padding_mask=padding))
    np.testing.assert_allclose(before[1, :4], after[1, :4], atol=1e-5)
    np.testing.assert_allclose(before[0], after[0], atol=1e-6)


def test_cross_attention_ignores_padded_source_positions():
    layer = CrossAttention(num_heads=2, d_model=8)
    x, context = random_normal(2, 3, 8), random_normal(2, 6, 8)
    source_padding = np.arange(6)[None, :] < np.array([[6], [2]])
    changed = context.copy()
    changed[1, 2:] = random_normal(4, 8) * 100
    before = to_numpy(layer(x, context, context_padding_mask=source_padding))
    after = to_numpy(layer(x, changed, context_padding_mask=source_padding))
    np.testing.assert_allclose(before, after, atol=1e-5)


def test_cross_attention_takes_the_contexts_keras_mask_and_passes_on_xs():
    embed = PositionalEmbedding(10, 8)  # id 0 is padding: its output carries a Keras mask
    x_tokens, context_tokens = np.array([[3, 4, 0], [5, 0, 0]]), np.array([[6, 7, 8, 0], [9, 0, 0, 0]])
    x, context = embed(x_tokens), embed(context_tokens)
    layer = CrossAttention(num_heads=2, d_model=8)
    implicit = to_numpy(layer(x, context))
    np.testing.assert_allclose(implicit, to_numpy(layer(x, context, context_padding_mask=context_tokens > 0)))
    assert not np.allclose(implicit, to_numpy(layer(x, context, context_padding_mask=np.ones((2, 4), bool))))
    # The output is aligned with x and keeps x's mask: a masked mean downstream averages x's real positions.
    pooled = to_numpy(keras.layers.GlobalAveragePooling1D()(layer(x, context)))
    np.testing.assert_allclose(pooled, [implicit[0, :2].mean(0), implicit[1, 0]], atol=1e-6)


def test_cross_attention_needs_exactly_one_of_context_and_cache():
    layer = CrossAttention(num_heads=2, d_model=8)
    x, context = random_normal(1, 3, 8), random_normal(1, 4, 8)
    layer(x, context)
    cache = layer.project(context, "key", "value")
    for passed in ({}, {"context": context, "cache": cache}):
        with pytest.raises(ValueError, match="pass exactly one of `context` and `cache`"):
            layer(x, **passed)


def test_cross_attention_drops_attention_weights_only_while_training():
    layer = CrossAttention(num_heads=2, d_model=8, dropout=0.5)
    x, context = random_normal(2, 3, 8), random_normal(2, 5, 8)
    inference = to_numpy(layer(x, context))
    np.testing.assert_array_equal(inference, to_numpy(layer(x, context, training=False)))
    assert not np.allclose(to_numpy(layer(x, context, training=True)), inference)


def test_causal_mask_layer_is_lower_triangular_and_combines_with_padding():
    mask = to_numpy(CausalMask()(np.zeros((2, 4), "int32")))
    np.testing.assert_array_equal(mask, np.tril(np.ones((4, 4), bool))[None])
    padding = np.array([[True, True, True, True], [True, True, False, False]])
    combined = to_numpy(CausalMask()(np.zeros((2, 4, 3), "float32"), mask=padding))
    assert combined.shape == (2, 4, 4)
    np.testing.assert_array_equal(combined[1], np.tril(np.ones((4, 4), bool)) & padding[1][None, :])
    # The Keras mask of an embedding is taken up quietly (a layer that did not support masking would warn).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        implicit = to_numpy(CausalMask()(PositionalEmbedding(10, 4)(np.array([[3, 4, 0, 0]], "int32"))))
    np.testing.assert_array_equal(implicit[0], np.tril(np.ones((4, 4), bool)) & [True, True, False, False])


def test_masks_come_out_boolean_and_a_causal_mask_may_hold_no_query():
    """`combine_masks` gives booleans whatever it is given (ints here), even from one mask; a causal mask of
    length 0 (no new query) is allowed, with its key axis as asked."""
    combined = to_numpy(combine_masks(np.array([[1, 0, 2]], "int32")))
    assert combined.dtype == bool and combined.tolist() == [[True, False, True]]
    assert combine_masks(None, None) is None
    assert tuple(make_causal_mask(0).shape) == (1, 0, 0)
    assert tuple(make_causal_mask(0, key_length=3).shape) == (1, 0, 3)


def test_attention_keeps_softmax_in_float32_under_mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        layer = MultiHeadSelfAttention(num_heads=2, d_model=8)
        x = random_normal(1, 5, 8)
        padding = np.array([[True, True, True, False, False]])
        output, weights = layer(x, padding_mask=padding, return_attention_scores=True)
        assert keras.backend.standardize_dtype(output.dtype) == "float16"
        assert keras.backend.standardize_dtype(weights.dtype) == "float32"
        assert np.isfinite(to_numpy(output)).all()
        np.testing.assert_array_equal(to_numpy(weights)[..., 3:], 0.0)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_cache_written_several_positions_at_a_time_equals_attending_all_at_once():
    """A prompt written into the cache in chunks (3 positions, then 2) gives the causal outputs of one pass."""
    layer = MultiHeadSelfAttention(num_heads=2, d_model=8, causal=True)
    x = random_normal(2, 5, 8)
    expected = to_numpy(layer(x))
    cache = layer.empty_cache(2, 6)  # one slot to spare
    first, cache = layer(x[:, :3], cache=cache, cache_index=0)
    second, cache = layer(x[:, 3:], cache=cache, cache_index=3)
    np.testing.assert_allclose(np.concatenate([to_numpy(first), to_numpy(second)], axis=1), expected, atol=1e-5)
    key, value = layer.project(x, "key", "value")
    np.testing.assert_allclose(to_numpy(cache[0])[:, :, :5], to_numpy(key), atol=1e-6)
    np.testing.assert_allclose(to_numpy(cache[1])[:, :, :5], to_numpy(value), atol=1e-6)
    np.testing.assert_array_equal(to_numpy(cache[0])[:, :, 5:], 0.0)  # the spare slot is untouched


def test_cache_keeps_the_compute_dtype_under_mixed_precision():
    """Half-precision buffers (half the memory), written and read without a cast error, close to float32."""
    full = MultiHeadSelfAttention(num_heads=2, d_model=8, causal=True)
    half = MultiHeadSelfAttention(num_heads=2, d_model=8, causal=True, dtype="mixed_float16")
    x = random_normal(1, 4, 8)
    expected = to_numpy(full(x))
    half.build(x.shape)
    half.set_weights(full.get_weights())
    cache = half.empty_cache(1, 4)
    assert [keras.backend.standardize_dtype(part.dtype) for part in cache] == ["float16", "float16"]
    outputs = []
    for t in range(4):
        output, cache = half(x[:, t : t + 1].astype("float16"), cache=cache, cache_index=t)
        outputs.append(to_numpy(output))
    assert [keras.backend.standardize_dtype(part.dtype) for part in cache] == ["float16", "float16"]
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), expected, atol=1e-2)
