"""The sinusoidal encoding against the seed's formula, and what it buys."""

import re

import keras
import numpy as np
import pytest
from conftest import REPO, to_numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from kformer import MultiHeadSelfAttention, PositionalEmbedding, sinusoidal_encoding


def formula(length, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same), element by element."""
    table = np.zeros((length, d_model))
    for pos in range(length):
        for dim in range(d_model):
            i = dim // 2
            angle = pos / 10000 ** (2 * i / d_model)
            table[pos, dim] = np.sin(angle) if dim % 2 == 0 else np.cos(angle)
    return table


@pytest.mark.parametrize("length, d_model", [(1, 2), (4, 3), (50, 16), (7, 128)])
def test_encoding_is_the_seed_formula(length, d_model):
    encoding = sinusoidal_encoding(length, d_model)
    assert keras.backend.standardize_dtype(encoding.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(encoding), formula(length, d_model), atol=2e-6)


def test_encoding_has_no_length_cap():
    encoding = to_numpy(sinusoidal_encoding(20_000, 8))
    assert encoding.shape == (20_000, 8)
    np.testing.assert_allclose(encoding[19_999], formula(20_000, 8)[19_999], atol=2e-3)


@settings(max_examples=20, deadline=None)
@given(st.integers(min_value=-40, max_value=40))
def test_shifted_encoding_is_a_fixed_linear_map_of_the_encoding(k):
    """PE(pos + k) = M_k PE(pos) with M_k independent of pos: a rotation per (sin, cos) pair."""
    d_model = 16
    inverse_frequency = 1.0 / 10000 ** (2 * np.arange(d_model // 2) / d_model)
    m_k = np.zeros((d_model, d_model))
    for i, w in enumerate(inverse_frequency):
        c, s = np.cos(k * w), np.sin(k * w)
        # sin(a + b) = sin a cos b + cos a sin b;  cos(a + b) = cos a cos b - sin a sin b
        m_k[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    encoding = to_numpy(sinusoidal_encoding(200, d_model)).astype("float64")
    positions = np.arange(max(0, -k), min(200, 200 - k))
    np.testing.assert_allclose(encoding[positions] @ m_k.T, encoding[positions + k], atol=1e-4)


def test_embedding_is_scaled_token_embedding_plus_encoding():
    layer = PositionalEmbedding(vocab_size=11, d_model=6)
    ids = np.array([[3, 1, 4, 1, 5]])
    output = to_numpy(layer(ids))
    (table,) = layer.get_weights()
    np.testing.assert_allclose(output[0], table[ids[0]] * np.sqrt(6) + formula(5, 6), atol=1e-5)
    unscaled = PositionalEmbedding(vocab_size=11, d_model=6, scale=False)
    unscaled(ids)
    unscaled.set_weights([table])
    np.testing.assert_allclose(to_numpy(unscaled(ids))[0], table[ids[0]] + formula(5, 6), atol=1e-5)
    # The table is the layer's one weight, under a name that says what it is (summaries, TensorBoard).
    assert [weight.path.split("/", 1)[1] for weight in layer.weights] == ["token_embedding/embeddings"]


def test_id_zero_is_padding_and_its_mask_reaches_downstream_layers():
    ids = np.array([[5, 7, 9, 0, 0], [5, 7, 9, 2, 3]])
    np.testing.assert_array_equal(to_numpy(PositionalEmbedding(10, 8).compute_mask(ids)), ids != 0)
    token_ids = keras.Input((None,), dtype="int32")
    x = PositionalEmbedding(vocab_size=10, d_model=8)(token_ids)
    model = keras.Model(token_ids, MultiHeadSelfAttention(num_heads=2, d_model=8)(x))
    # No padding_mask is passed: only the propagated mask can hide the padding.
    padded = to_numpy(model(ids))[0, :3]
    unpadded = to_numpy(model(ids[:1, :3]))[0]
    np.testing.assert_allclose(padded, unpadded, atol=1e-5)


def test_the_readmes_encoder_snippet_hides_padding_with_no_mask_passed():
    """README, "Architecture": its encoder snippet, run as written; the mask reaches `TransformerBlock` unaided."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    (snippet,) = [block for block in blocks if "padding mask propagates" in block]
    namespace = {}
    exec(snippet, namespace)
    ids = np.array([[5, 7, 9, 0, 0], [5, 7, 9, 2, 3]])
    padded = to_numpy(namespace["encoder"](ids))[0, :3]
    np.testing.assert_allclose(padded, to_numpy(namespace["encoder"](ids[:1, :3]))[0], atol=1e-5)


def test_positional_embedding_breaks_permutation_equivariance():
    ids = np.array([[1, 2, 3, 4, 5]])
    permutation = np.array([4, 2, 0, 1, 3])
    embedding = PositionalEmbedding(vocab_size=10, d_model=8, mask_zero=False)
    attention = MultiHeadSelfAttention(num_heads=2, d_model=8)

    def encode(token_ids, with_positions):
        x = embedding(token_ids)
        if not with_positions:
            x = x - sinusoidal_encoding(token_ids.shape[1], 8)
        return to_numpy(attention(x))

    np.testing.assert_allclose(encode(ids[:, permutation], False), encode(ids, False)[:, permutation], atol=1e-5)
    assert not np.allclose(encode(ids[:, permutation], True), encode(ids, True)[:, permutation], atol=1e-3)
