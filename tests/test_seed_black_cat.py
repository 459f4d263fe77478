"""Seed 003 ("A ground-up construction"): "the black cat sleeps".

The seed's tables, each to the two decimals it prints: Part 1's averaged
context vector, Part 2's unprojected and unscaled self-attention, and Part 3's
query/key/value projections with scaled attention.
"""

import numpy as np
from conftest import to_numpy

from kformer import MultiHeadSelfAttention, scaled_dot_product_attention

TOKENS = ["the", "black", "cat", "sleeps"]
EMBEDDINGS = np.array(
    [[0.10, 0.30, -0.20], [0.80, -0.40, 0.60], [0.50, 0.90, 0.10], [-0.30, 0.20, 0.70]], dtype="float32"
)

PART1_CONTEXT = [0.28, 0.25, 0.30]

PART2_SCORES = [
    [+0.14, -0.16, +0.30, -0.11],
    [-0.16, +1.16, +0.10, +0.10],
    [+0.30, +0.10, +1.07, +0.10],
    [-0.11, +0.10, +0.10, +0.62],
]
PART2_WEIGHTS = [
    [0.27, 0.20, 0.32, 0.21],
    [0.14, 0.51, 0.18, 0.18],
    [0.21, 0.17, 0.45, 0.17],
    [0.18, 0.22, 0.22, 0.37],
]
PART2_Z = [[+0.28, +0.33, +0.25], [+0.46, +0.03, +0.42], [+0.33, +0.43, +0.23], [+0.20, +0.24, +0.38]]

PART3_QUERIES = [[+0.10, -0.20, +0.30], [+0.80, +0.60, -0.40], [+0.50, +0.10, +0.90], [-0.30, +0.70, +0.20]]
PART3_KEYS = [[+0.30, +0.10, -0.20], [-0.40, +0.80, +0.60], [+0.90, +0.50, +0.10], [+0.20, -0.30, +0.70]]
PART3_VALUES = [[+0.10, +0.30, +0.20], [+0.80, -0.40, -0.60], [+0.50, +0.90, -0.10], [-0.30, +0.20, -0.70]]
PART3_WEIGHTS = [
    [0.23, 0.24, 0.24, 0.28],
    [0.26, 0.20, 0.37, 0.18],
    [0.19, 0.25, 0.27, 0.29],
    [0.21, 0.35, 0.23, 0.20],
]
PART3_Z = [[+0.25, +0.25, -0.32], [+0.32, +0.36, -0.23], [+0.27, +0.26, -0.34], [+0.36, +0.17, -0.33]]

# The seed prints the projected tables, not the matrices; these are the
# (signed permutation) matrices its tables imply, e @ W with e a row vector.
W_Q = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0]], dtype="float32")
W_K = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]], dtype="float32")
W_V = np.array([[1, 0, 0], [0, 1, 0], [0, 0, -1]], dtype="float32")


def assert_two_decimals(actual, printed):
    np.testing.assert_allclose(to_numpy(actual), printed, rtol=0, atol=0.005 + 1e-6)


def test_part1_context_vector_ignores_word_order():
    assert_two_decimals(EMBEDDINGS.mean(axis=0), PART1_CONTEXT)
    reversed_sentence = EMBEDDINGS[::-1]  # "sleeps cat black the"
    np.testing.assert_allclose(reversed_sentence.mean(axis=0), EMBEDDINGS.mean(axis=0), atol=1e-7)


def test_part2_unprojected_unscaled_self_attention():
    assert_two_decimals(EMBEDDINGS @ EMBEDDINGS.T, PART2_SCORES)
    # Unscaled: undo the core's 1/sqrt(d_k) by scaling the queries by sqrt(3).
    z, weights = scaled_dot_product_attention(EMBEDDINGS * np.sqrt(3.0), EMBEDDINGS, EMBEDDINGS)
    assert_two_decimals(weights, PART2_WEIGHTS)
    assert_two_decimals(z, PART2_Z)


def test_part3_projections():
    assert_two_decimals(EMBEDDINGS @ W_Q, PART3_QUERIES)
    assert_two_decimals(EMBEDDINGS @ W_K, PART3_KEYS)
    assert_two_decimals(EMBEDDINGS @ W_V, PART3_VALUES)


def test_part3_scaled_attention_through_the_core():
    z, weights = scaled_dot_product_attention(EMBEDDINGS @ W_Q, EMBEDDINGS @ W_K, EMBEDDINGS @ W_V)
    assert_two_decimals(weights, PART3_WEIGHTS)
    assert_two_decimals(z, PART3_Z)


def test_part3_scaled_attention_through_the_layer():
    layer = MultiHeadSelfAttention(num_heads=1, d_model=3, use_bias=False)
    layer.build((1, 4, 3))
    layer.set_weights([W_Q[:, None, :], W_K[:, None, :], W_V[:, None, :], np.eye(3, dtype="float32")[None]])
    z, weights = layer(EMBEDDINGS[None], return_attention_scores=True)
    assert_two_decimals(weights[0, 0], PART3_WEIGHTS)
    assert_two_decimals(z[0], PART3_Z)


def test_part3_projections_move_black_to_attend_to_cat():
    _, weights = scaled_dot_product_attention(EMBEDDINGS @ W_Q, EMBEDDINGS @ W_K, EMBEDDINGS @ W_V)
    _, unprojected = scaled_dot_product_attention(EMBEDDINGS * np.sqrt(3.0), EMBEDDINGS, EMBEDDINGS)
    black, cat = TOKENS.index("black"), TOKENS.index("cat")
    assert np.argmax(to_numpy(unprojected)[black]) == black
    assert np.argmax(to_numpy(weights)[black]) == cat
