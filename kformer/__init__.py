"""kformer: a Transformer built from scratch as Keras 3 layers on TensorFlow.

Shapes are written with one alphabet throughout the package:
    B batch, S source length, T target length, D model width (d_model),
    H heads, K head width (head_dim), V vocabulary size.
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        f"kformer needs the TensorFlow Keras backend, but KERAS_BACKEND is {keras.backend.backend()!r}; "
        "set KERAS_BACKEND=tensorflow."
    )

from kformer.layers import (  # noqa: E402
    CausalMask,
    CrossAttention,
    FeedForward,
    MultiHeadSelfAttention,
    PositionalEmbedding,
    TransformerBlock,
    combine_masks,
    make_causal_mask,
    make_padding_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)

__version__ = "0.1.0"

__all__ = [
    "CausalMask",
    "CrossAttention",
    "FeedForward",
    "MultiHeadSelfAttention",
    "PositionalEmbedding",
    "TransformerBlock",
    "make_causal_mask",
    "combine_masks",
    "make_padding_mask",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
