"""Seed 000 ("Transformer Architecture from Scratch"): "Bumrah bowled it".

Every number below is printed in the seed; the layers must reproduce each one
to the precision printed there.
"""

import numpy as np
import pytest
from conftest import to_numpy

from kformer import MultiHeadSelfAttention, attention_scores, scaled_dot_product_attention

X = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype="float32")
W_Q = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype="float32")
W_K = np.array([[0, 1, 0], [1, 0, 1], [0, 0, 1], [1, 1, 0]], dtype="float32")
W_V = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], dtype="float32")

# As printed in the seed.
Q = [[2, 0, 1], [0, 2, 0], [1, 1, 0]]
K = [[0, 1, 1], [2, 1, 1], [1, 1, 1]]
V = [[1, 0, 1], [1, 2, 1], [1, 1, 0]]
TOKEN_1_SCALED_SCORES = [0.577, 2.887, 1.732]
WEIGHTS = [[0.0702, 0.7070, 0.2228], [0.3333, 0.3333, 0.3333], [0.1679, 0.5329, 0.2992]]
OUTPUTS = [[1.000, 1.637, 0.777], [1.000, 1.000, 0.667], [1.000, 1.365, 0.701]]


def assert_as_printed(actual, printed, decimals):
    """Equal to the seed's number once rounded to the decimals it prints."""
    np.testing.assert_allclose(to_numpy(actual), printed, rtol=0, atol=0.5 * 10.0**-decimals + 1e-6)


@pytest.fixture
def seed_attention():
    """One head, head_dim 3, no bias, with the seed's W_Q, W_K, W_V set."""
    layer = MultiHeadSelfAttention(num_heads=1, d_model=4, head_dim=3, use_bias=False)
    layer.build((1, 3, 4))
    # W_O copies the 3 head values into the first 3 output columns, so the
    # layer's output shows the seed's z rows unchanged.
    w_o = np.eye(3, 4, dtype="float32")
    layer.set_weights([W_Q[:, None, :], W_K[:, None, :], W_V[:, None, :], w_o[None]])
    return layer


def test_multi_head_self_attention_reproduces_the_seed(seed_attention):
    output, scores = seed_attention(X[None], return_attention_scores=True)
    assert scores.shape == (1, 1, 3, 3)
    assert_as_printed(scores[0, 0], WEIGHTS, 4)
    assert_as_printed(to_numpy(output)[0, :, :3], OUTPUTS, 3)
    np.testing.assert_array_equal(to_numpy(output)[0, :, 3], 0.0)


def test_multi_head_self_attention_projects_to_the_printed_q_k_v(seed_attention):
    query = seed_attention.project(X[None], "query")[0]  # (1, 1, 3, 3)
    key, value = seed_attention.project(X[None], "key", "value")
    assert_as_printed(query[0, 0], Q, 0)
    assert_as_printed(key[0, 0], K, 0)
    assert_as_printed(value[0, 0], V, 0)


def test_the_core_gives_every_printed_score_weight_and_output(seed_attention):
    query = seed_attention.project(X[None], "query")[0][0, 0]  # (3, 3)
    key, value = (x[0, 0] for x in seed_attention.project(X[None], "key", "value"))
    assert_as_printed(attention_scores(query, key)[0], TOKEN_1_SCALED_SCORES, 3)
    output, weights = scaled_dot_product_attention(query, key, value)
    assert_as_printed(weights, WEIGHTS, 4)
    assert_as_printed(output, OUTPUTS, 3)


def test_tied_scores_give_exactly_uniform_weights(seed_attention):
    # Token 2's query probes only the keys' second coordinate, which is 1 for all.
    _, weights = seed_attention(X[None], return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(weights)[0, 0, 1], [1 / 3] * 3, atol=1e-7)
