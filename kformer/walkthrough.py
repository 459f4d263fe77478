"""The seeds' worked examples, computed by kformer's own layers.

`kformer walkthrough` prints these so a learner can hold the seed in one
hand and the numbers in the other: every value printed in the seed comes out
of `scaled_dot_product_attention` and `MultiHeadSelfAttention`.
"""

import numpy as np
from keras import ops

from kformer.layers import MultiHeadSelfAttention, scaled_dot_product_attention

BUMRAH_TOKENS = ["Bumrah", "bowled", "it"]
BUMRAH_X = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]], dtype="float32")
BUMRAH_W_Q = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype="float32")
BUMRAH_W_K = np.array([[0, 1, 0], [1, 0, 1], [0, 0, 1], [1, 1, 0]], dtype="float32")
BUMRAH_W_V = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], dtype="float32")

CAT_TOKENS = ["the", "black", "cat", "sleeps"]
CAT_EMBEDDINGS = np.array(
    [[0.10, 0.30, -0.20], [0.80, -0.40, 0.60], [0.50, 0.90, 0.10], [-0.30, 0.20, 0.70]], dtype="float32"
)
# The seed prints only the projected tables; these signed permutations give them.
CAT_W_Q = np.array([[1, 0, 0], [0, 0, 1], [0, 1, 0]], dtype="float32")
CAT_W_K = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]], dtype="float32")
CAT_W_V = np.array([[1, 0, 0], [0, 1, 0], [0, 0, -1]], dtype="float32")


def seed_attention_layer(w_q, w_k, w_v):
    """A one-head, bias-free `MultiHeadSelfAttention` holding the given matrices.

    W_O copies the head's values into the first `head_dim` output columns, so
    the layer's output shows the attention output z unchanged.
    """
    d_model, head_dim = w_q.shape
    layer = MultiHeadSelfAttention(num_heads=1, d_model=d_model, head_dim=head_dim, use_bias=False)
    layer.build((1, None, d_model))
    w_o = np.eye(head_dim, d_model, dtype="float32")
    layer.set_weights([w_q[:, None, :], w_k[:, None, :], w_v[:, None, :], w_o[None]])
    return layer


def _table(title, row_labels, values, decimals):
    values = np.asarray(values)
    width = max(8, decimals + 4)
    lines = [title]
    for label, row in zip(row_labels, values, strict=True):
        lines.append(f"  {label:>8} " + " ".join(f"{v:+{width}.{decimals}f}" for v in row))
    return "\n".join(lines)


def bumrah_report():
    """Seed 000's three-token example, "Bumrah bowled it", as printed tables."""
    layer = seed_attention_layer(BUMRAH_W_Q, BUMRAH_W_K, BUMRAH_W_V)
    output, weights = layer(BUMRAH_X[None], return_attention_scores=True)
    q, k, v = BUMRAH_X @ BUMRAH_W_Q, BUMRAH_X @ BUMRAH_W_K, BUMRAH_X @ BUMRAH_W_V
    scaled = q @ k.T / np.sqrt(q.shape[1])
    return "\n\n".join(
        [
            'Seed 000: "Bumrah bowled it", d_model = 4, one head with d_k = d_v = 3',
            _table("Q = X W_Q", BUMRAH_TOKENS, q, 0),
            _table("K = X W_K", BUMRAH_TOKENS, k, 0),
            _table("V = X W_V", BUMRAH_TOKENS, v, 0),
            _table("scores = Q K^T / sqrt(3)", BUMRAH_TOKENS, scaled, 3),
            _table("weights = softmax(scores), row by row", BUMRAH_TOKENS, ops.convert_to_numpy(weights)[0, 0], 4),
            _table("output = weights V", BUMRAH_TOKENS, ops.convert_to_numpy(output)[0, :, :3], 3),
        ]
    )


def black_cat_report():
    """Seed 003's "the black cat sleeps": averaging, plain and projected attention."""
    e = CAT_EMBEDDINGS
    # Part 2 is unscaled: undo the core's 1/sqrt(d) by scaling the queries up.
    z_plain, weights_plain = scaled_dot_product_attention(e * np.sqrt(3.0), e, e)
    layer = seed_attention_layer(CAT_W_Q, CAT_W_K, CAT_W_V)
    z, weights = layer(e[None], return_attention_scores=True)
    return "\n\n".join(
        [
            'Seed 003: "the black cat sleeps", 3-dimensional embeddings',
            _table("Part 1: the averaged context vector (same for any word order)", ["average"], [e.mean(0)], 2),
            _table("Part 2: scores e_i . e_j", CAT_TOKENS, e @ e.T, 2),
            _table("Part 2: weights = softmax(scores)", CAT_TOKENS, ops.convert_to_numpy(weights_plain), 2),
            _table("Part 2: z = weights E", CAT_TOKENS, ops.convert_to_numpy(z_plain), 2),
            _table("Part 3: queries", CAT_TOKENS, e @ CAT_W_Q, 2),
            _table("Part 3: keys", CAT_TOKENS, e @ CAT_W_K, 2),
            _table("Part 3: values", CAT_TOKENS, e @ CAT_W_V, 2),
            _table("Part 3: weights = softmax(q . k / sqrt(3))", CAT_TOKENS, ops.convert_to_numpy(weights)[0, 0], 2),
            _table("Part 3: z = weights V", CAT_TOKENS, ops.convert_to_numpy(z)[0], 2),
        ]
    )
