"""The seeds' worked examples, computed by kformer's own layers.

`kformer walkthrough` prints these so a learner can hold the seed in one
hand and the numbers in the other: every value printed in the seed comes out
of kformer's code: `MultiHeadSelfAttention` (its projections and output), the
attention core (`attention_scores`) and the stages of `kformer.teaching.mvp`.
"""

import keras
import numpy as np
from keras import ops

from kformer.layers import MultiHeadSelfAttention, attention_scores
from kformer.teaching.mvp import DotProductSelfAttention, build_mvp

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


def seed_attention(w_q, w_k, w_v, x):
    """Runs seed matrices through kformer's self-attention layer on one sentence `x` `(T, D)`.

    Returns:
        A dict of numpy arrays: "q", "k", "v" `(T, K)` (the layer's own
        projections), "scores" `(T, T)` (Q K^T / sqrt(d_k) from the attention
        core), "weights" `(T, T)` and "output" `(T, K)` (the layer's output).
    """
    layer = seed_attention_layer(w_q, w_k, w_v)
    x = np.asarray(x, "float32")[None]  # (1, T, D)
    query = layer.project(x, "query")[0]  # (1, 1, T, K)
    key, value = layer.project(x, "key", "value")
    output, weights = layer(x, return_attention_scores=True)
    head_dim = w_q.shape[1]
    return {
        "q": ops.convert_to_numpy(query)[0, 0],
        "k": ops.convert_to_numpy(key)[0, 0],
        "v": ops.convert_to_numpy(value)[0, 0],
        "scores": ops.convert_to_numpy(attention_scores(query, key))[0, 0],
        "weights": ops.convert_to_numpy(weights)[0, 0],
        "output": ops.convert_to_numpy(output)[0, :, :head_dim],
    }


def plain_attention(embeddings):
    """Seed 003's Part 2 through `kformer.teaching.mvp.DotProductSelfAttention`: {"scores", "weights", "z"}."""
    e = np.asarray(embeddings, "float32")
    z, weights = DotProductSelfAttention()(e[None], return_attention_scores=True)
    return {
        "scores": ops.convert_to_numpy(attention_scores(e, e, scale=1.0)),
        "weights": ops.convert_to_numpy(weights)[0],
        "z": ops.convert_to_numpy(z)[0],
    }


def averaged_context(embeddings):
    """Seed 003's Part 1 context vector: the averaging of `build_mvp(1)` over the given embedding rows."""
    e = np.asarray(embeddings, "float32")
    model = build_mvp(1, source_vocab_size=len(e) + 1, target_vocab_size=2, d_model=e.shape[1])
    model.get_layer("embedding").set_weights([np.concatenate([np.zeros_like(e[:1]), e])])  # id 0 = padding
    average = keras.Model(model.input, model.get_layer("average").output)
    return ops.convert_to_numpy(average(np.arange(1, len(e) + 1, dtype="int32")[None]))[0]


def _table(title, row_labels, values, decimals):
    values = np.asarray(values)
    width = max(8, decimals + 4)
    lines = [title]
    for label, row in zip(row_labels, values, strict=True):
        lines.append(f"  {label:>8} " + " ".join(f"{v:+{width}.{decimals}f}" for v in row))
    return "\n".join(lines)


def bumrah_report():
    """Seed 000's three-token example, "Bumrah bowled it", as printed tables."""
    seed = seed_attention(BUMRAH_W_Q, BUMRAH_W_K, BUMRAH_W_V, BUMRAH_X)
    return "\n\n".join(
        [
            'Seed 000: "Bumrah bowled it", d_model = 4, one head with d_k = d_v = 3',
            _table("Q = X W_Q", BUMRAH_TOKENS, seed["q"], 0),
            _table("K = X W_K", BUMRAH_TOKENS, seed["k"], 0),
            _table("V = X W_V", BUMRAH_TOKENS, seed["v"], 0),
            _table("scores = Q K^T / sqrt(3)", BUMRAH_TOKENS, seed["scores"], 3),
            _table("weights = softmax(scores), row by row", BUMRAH_TOKENS, seed["weights"], 4),
            _table("output = weights V", BUMRAH_TOKENS, seed["output"], 3),
        ]
    )


def black_cat_report():
    """Seed 003's "the black cat sleeps": averaging, plain and projected attention."""
    plain = plain_attention(CAT_EMBEDDINGS)
    seed = seed_attention(CAT_W_Q, CAT_W_K, CAT_W_V, CAT_EMBEDDINGS)
    average = [averaged_context(CAT_EMBEDDINGS)]
    return "\n\n".join(
        [
            'Seed 003: "the black cat sleeps", 3-dimensional embeddings',
            _table("Part 1: the averaged context vector (same for any word order)", ["average"], average, 2),
            _table("Part 2: scores e_i . e_j", CAT_TOKENS, plain["scores"], 2),
            _table("Part 2: weights = softmax(scores)", CAT_TOKENS, plain["weights"], 2),
            _table("Part 2: z = weights E", CAT_TOKENS, plain["z"], 2),
            _table("Part 3: queries", CAT_TOKENS, seed["q"], 2),
            _table("Part 3: keys", CAT_TOKENS, seed["k"], 2),
            _table("Part 3: values", CAT_TOKENS, seed["v"], 2),
            _table("Part 3: weights = softmax(q . k / sqrt(3))", CAT_TOKENS, seed["weights"], 2),
            _table("Part 3: z = weights V", CAT_TOKENS, seed["output"], 2),
        ]
    )
