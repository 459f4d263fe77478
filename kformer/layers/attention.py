"""The one scaled dot-product attention core and the boolean masks it takes.

Masks are booleans, True = may attend, combined by logical AND and applied in
exactly one place: `scaled_dot_product_attention`, before the softmax.
"""

import math

from keras import ops

# Large enough that exp(score - max) underflows to exactly 0 in float32, where
# the softmax is always computed.
_MASKED_SCORE = -1e9


def make_padding_mask(token_ids):
    """True where `token_ids` is a real token, False where it is padding (id 0).

    Args:
        token_ids: int tensor `(B, T)`.

    Returns:
        bool tensor `(B, T)`.
    """
    return ops.not_equal(token_ids, 0)


def make_causal_mask(length, key_length=None, start=0):
    """The lower-triangular mask that lets position i attend to j <= i only.

    Args:
        length: T, the number of query positions: a Python int or a scalar
            int tensor (may be dynamic).
        key_length: S, the number of key positions; defaults to T.
        start: the position of the first query (a scalar, may be a tensor):
            decoding with a cache puts T new queries after `start` earlier keys.

    Returns:
        bool tensor `(1, T, S)`: query i sees keys 0 .. start + i.
    """
    if isinstance(length, int) and length < 0:
        raise ValueError(f"length must be 0 or more, got length={length}.")
    query_positions = ops.expand_dims(start + ops.arange(length), 1)  # (T, 1)
    key_positions = ops.expand_dims(ops.arange(length if key_length is None else key_length), 0)  # (1, S)
    return ops.expand_dims(ops.greater_equal(query_positions, key_positions), 0)


def key_padding_mask(keys_padding_mask):
    """Turns a `(B, S)` padding mask into a `(B, 1, S)` attention mask over keys."""
    return ops.expand_dims(keys_padding_mask, 1)


def combine_masks(*masks):
    """Logical AND of the masks that are not None (None if all are None)."""
    present = [m for m in masks if m is not None]
    if not present:
        return None
    combined = ops.cast(present[0], "bool")
    for mask in present[1:]:
        combined = ops.logical_and(combined, ops.cast(mask, "bool"))
    return combined


def attention_scores(query, key, scale=None):
    """The raw attention scores Q K^T, scaled: every query against every key.

    Args:
        query: `(..., T, K)`.
        key: `(..., S, K)`.
        scale: the factor applied to Q K^T; defaults to 1 / sqrt(d_k), the
            paper's scaling. Seed 003's Part 2 uses plain dot products (1.0).

    Returns:
        float32 `(..., T, S)`.
    """
    d_k = ops.shape(query)[-1]
    if not isinstance(d_k, int):
        raise ValueError(f"attention needs a static last dimension for `query`, got shape {query.shape}.")
    if key.shape[-1] is not None and key.shape[-1] != d_k:
        raise ValueError(
            f"query and key must have the same last dimension (d_k), got shapes {query.shape} and {key.shape}."
        )
    scores = ops.cast(ops.matmul(query, ops.swapaxes(key, -1, -2)), "float32")  # (..., T, S)
    return scores / math.sqrt(d_k) if scale is None else scores * scale


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, scale=None):
    """softmax(Q K^T / sqrt(d_k)) V over the last two axes.

    The softmax runs in float32 whatever the input dtype, so the masked score
    stays far below every real one under mixed precision too.

    Args:
        query: `(..., T, K)`.
        key: `(..., S, K)`.
        value: `(..., S, K_v)`.
        mask: optional boolean tensor broadcastable to `(..., T, S)`;
            True = query t may attend to key s. Applied before the softmax.
            A row with no True entry gives zero weights and a zero output.
        dropout: optional callable (a `keras.layers.Dropout`) applied to the
            weights before they mix the values; the returned weights are the
            ones before dropout.
        scale: the factor on Q K^T (see `attention_scores`); 1 / sqrt(d_k)
            unless given.

    Returns:
        `(output, weights)`: output `(..., T, K_v)` in the dtype of `value`,
        weights `(..., T, S)` in float32, each unmasked row summing to 1.
    """
    scores = attention_scores(query, key, scale)  # (..., T, S)
    if None not in (key.shape[-2], value.shape[-2]) and key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must hold the same number of positions (S), got shapes {key.shape} and {value.shape}."
        )
    if mask is not None:
        mask = ops.cast(mask, "bool")
        scores = ops.where(mask, scores, _MASKED_SCORE)
    if scores.shape[-1] == 1:  # one key takes all the weight (Keras warns on a softmax over one element)
        weights = ops.ones_like(scores)
    else:
        weights = ops.softmax(scores, axis=-1)
    if mask is not None:
        # A fully masked row softmaxes to uniform over masked keys; zero it.
        row_has_key = ops.any(mask, axis=-1, keepdims=True)
        weights = weights * ops.cast(row_has_key, weights.dtype)
    mixing = weights if dropout is None else dropout(weights)
    output = ops.matmul(ops.cast(mixing, value.dtype), value)  # (..., T, K_v)
    return output, weights
