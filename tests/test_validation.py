"""Bad arguments fail early with a ValueError that names the argument and value."""

import keras
import numpy as np
import pytest

from kformer import (
    CrossAttention,
    FeedForward,
    MultiHeadSelfAttention,
    PositionalEmbedding,
    TransformerBlock,
    attention_scores,
    make_causal_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: MultiHeadSelfAttention(num_heads=3, d_model=8), "d_model=8 is not divisible by num_heads=3"),
        (
            lambda: MultiHeadSelfAttention(num_heads=0, d_model=8),
            "^num_heads must be a positive integer, got num_heads=0",
        ),
        (lambda: MultiHeadSelfAttention(num_heads=2, d_model=0), "^d_model must be a positive integer, got d_model=0"),
        (
            lambda: CrossAttention(num_heads=2, d_model=8, head_dim=-1),
            "^head_dim must be a positive integer, got head_dim=-1",
        ),
        (lambda: MultiHeadSelfAttention(num_heads=2, d_model=8, dropout=1.5), "dropout=1.5"),
        (lambda: CrossAttention(num_heads=2, d_model=8, dropout=1.0), r"^dropout must be in \[0, 1\), got dropout=1.0"),
        (lambda: PositionalEmbedding(vocab_size=0, d_model=8), "vocab_size=0"),
        (lambda: PositionalEmbedding(vocab_size=10, d_model=8.0), "d_model=8.0"),
        (lambda: FeedForward(d_model=8, d_ff=None), "d_ff=None"),
        (lambda: FeedForward(d_model=0, d_ff=8), "^d_model.*d_model=0"),
        (lambda: FeedForward(d_model=8, d_ff=16, dropout=1.0), r"dropout must be in \[0, 1\), got dropout=1.0"),
        (lambda: TransformerBlock(8, 3, 16), "d_model=8 is not divisible by num_heads=3"),
        (lambda: TransformerBlock(d_model=0, num_heads=4, d_ff=32), "^d_model.*d_model=0"),
        (lambda: TransformerBlock(d_model=16, num_heads=4, d_ff=0), "^d_ff.*d_ff=0"),
        (lambda: sinusoidal_encoding(4, 0), "d_model=0"),
    ],
)
def test_bad_constructor_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_head_dim_allows_any_width():
    layer = MultiHeadSelfAttention(num_heads=3, d_model=8, head_dim=5)
    assert layer(np.zeros((1, 2, 8), "float32")).shape == (1, 2, 8)


def built(layer):
    layer(np.zeros((1, 2, 8), "float32"), np.zeros((1, 3, 8), "float32"))
    return layer


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: MultiHeadSelfAttention(2, 8)(np.zeros((1, 4, 6), "float32")), "x has width 6 but d_model=8"),
        (lambda: MultiHeadSelfAttention(2, 8)(np.zeros((4, 8), "float32")), "x must have rank 3"),
        (lambda: MultiHeadSelfAttention(2, 8)(np.zeros((1, 4, 8), "int32")), "x must be a float tensor"),
        (
            lambda: CrossAttention(2, 8)(np.zeros((1, 4, 8), "float32"), np.zeros((1, 4), "float32")),
            "context must have rank 3",
        ),
        (  # a decoder's cache of a source: token ids given where the encoder's output belongs
            lambda: built(CrossAttention(2, 8)).project(np.zeros((1, 4, 8), "int32"), "key", "value"),
            "^x must be a float tensor",
        ),
        (
            lambda: CrossAttention(2, 8)(keras.Input((4, 8)), keras.Input((3, None))),
            r"context needs a known last dimension, got \(None, 3, None\)",
        ),
        (lambda: FeedForward(8, 16)(np.zeros((1, 4, 5), "float32")), "x has width 5 but d_model=8"),
        (lambda: PositionalEmbedding(10, 8)(np.zeros((1, 4), "float32")), "token_ids must hold integer"),
        (lambda: TransformerBlock(8, 2, 16, cross_attention=True)(np.zeros((1, 4, 8), "float32")), "needs `context`"),
        (
            lambda: TransformerBlock(8, 2, 16)(np.zeros((1, 4, 8), "float32"), context=np.zeros((1, 4, 8), "float32")),
            "pass `context` exactly when cross_attention=True",
        ),
        (  # one context for two sentences would be broadcast silently; three for two failed inside a matmul
            lambda: CrossAttention(2, 8)(np.zeros((2, 4, 8), "float32"), np.zeros((1, 3, 8), "float32")),
            "x holds 2 sequences but context 1; each sequence attends to its own context",
        ),
        (lambda: make_causal_mask(-1), "length must be 0 or more, got length=-1"),
        (
            lambda: scaled_dot_product_attention(np.zeros((1, 4, 8)), np.zeros((1, 3, 6)), np.zeros((1, 3, 8))),
            r"query and key must have the same last dimension \(d_k\), got shapes \(1, 4, 8\) and \(1, 3, 6\)",
        ),
        (
            lambda: scaled_dot_product_attention(np.zeros((1, 4, 8)), np.zeros((1, 3, 8)), np.zeros((1, 5, 8))),
            r"key and value must hold the same number of positions \(S\)",
        ),
    ],
)
def test_bad_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def traced(function, *shapes):
    """`function` traced on float32 inputs of `shapes` (None: known only when it runs)."""
    import tensorflow as tf

    return tf.function(function, input_signature=[tf.TensorSpec(shape) for shape in shapes]).get_concrete_function()


def test_attention_names_a_last_dimension_known_only_at_run_time_or_unequal_beside_an_unknown_length():
    with pytest.raises(ValueError, match=r"attention needs a static last dimension for `query`, got shape"):
        traced(attention_scores, (1, 4, None), (1, 3, 8))
    with pytest.raises(ValueError, match=r"query and key must have the same last dimension \(d_k\)"):
        traced(attention_scores, (None, None, 8), (None, None, 6))  # the key's length unknown until it runs


def test_attention_scores_are_float32_whatever_keras_float_type():
    floatx = keras.config.floatx()
    keras.config.set_floatx("float16")
    try:
        scores = attention_scores(np.ones((1, 2, 4), "float16"), np.ones((1, 3, 4), "float16"))
    finally:
        keras.config.set_floatx(floatx)
    assert keras.backend.standardize_dtype(scores.dtype) == "float32"
