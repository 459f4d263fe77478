"""Seed 003 ("A ground-up construction"): "the black cat sleeps".

The seed's tables, each to the two decimals it prints: Part 1's averaged
context vector, Part 2's unprojected and unscaled self-attention, and Part 3's
query/key/value projections with scaled attention.
"""

import keras
import numpy as np
import pytest
from conftest import to_numpy

from kformer import MultiHeadSelfAttention, attention_scores, scaled_dot_product_attention
from kformer.teaching.mvp import DotProductSelfAttention, build_mvp

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


@pytest.fixture
def projected():
    """One head, no bias, the seed's W_Q, W_K, W_V; W_O = identity so the output is z."""
    layer = MultiHeadSelfAttention(num_heads=1, d_model=3, use_bias=False)
    layer.build((1, 4, 3))
    layer.set_weights([W_Q[:, None, :], W_K[:, None, :], W_V[:, None, :], np.eye(3, dtype="float32")[None]])
    return layer


def stage_1_average(embeddings):
    """The context vector of `build_mvp(1)` holding the seed's embeddings (ids 1-4; 0 is padding)."""
    model = build_mvp(1, source_vocab_size=5, target_vocab_size=2, d_model=3)
    model.get_layer("embedding").set_weights([np.concatenate([np.zeros((1, 3), "float32"), embeddings])])
    average = keras.Model(model.input, model.get_layer("average").output)
    return lambda token_ids: to_numpy(average(np.array([token_ids], "int32")))[0]


def test_part1_context_vector_ignores_word_order():
    average = stage_1_average(EMBEDDINGS)
    assert_two_decimals(average([1, 2, 3, 4]), PART1_CONTEXT)
    np.testing.assert_allclose(average([4, 3, 2, 1]), average([1, 2, 3, 4]), atol=1e-7)  # "sleeps cat black the"


def test_part2_unprojected_unscaled_self_attention():
    assert_two_decimals(attention_scores(EMBEDDINGS, EMBEDDINGS, scale=1.0), PART2_SCORES)
    z, weights = DotProductSelfAttention()(EMBEDDINGS[None], return_attention_scores=True)
    assert_two_decimals(weights[0], PART2_WEIGHTS)
    assert_two_decimals(z[0], PART2_Z)


def test_part3_projections(projected):
    key, value = projected.project(EMBEDDINGS[None], "key", "value")
    assert_two_decimals(projected.project(EMBEDDINGS[None], "query")[0][0, 0], PART3_QUERIES)
    assert_two_decimals(key[0, 0], PART3_KEYS)
    assert_two_decimals(value[0, 0], PART3_VALUES)


def test_part3_scaled_attention_through_the_core(projected):
    query = projected.project(EMBEDDINGS[None], "query")[0][0, 0]
    key, value = (x[0, 0] for x in projected.project(EMBEDDINGS[None], "key", "value"))
    z, weights = scaled_dot_product_attention(query, key, value)
    assert_two_decimals(weights, PART3_WEIGHTS)
    assert_two_decimals(z, PART3_Z)


def test_part3_scaled_attention_through_the_layer(projected):
    z, weights = projected(EMBEDDINGS[None], return_attention_scores=True)
    assert_two_decimals(weights[0, 0], PART3_WEIGHTS)
    assert_two_decimals(z[0], PART3_Z)


def test_part3_projections_move_black_to_attend_to_cat(projected):
    _, weights = projected(EMBEDDINGS[None], return_attention_scores=True)
    _, unprojected = DotProductSelfAttention()(EMBEDDINGS[None], return_attention_scores=True)
    black, cat = TOKENS.index("black"), TOKENS.index("cat")
    assert np.argmax(to_numpy(unprojected)[0, black]) == black
    assert np.argmax(to_numpy(weights)[0, 0, black]) == cat
