"""The seeds' pieces of the Transformer, one layer per file."""

import keras

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        f"kformer needs the TensorFlow Keras backend, but KERAS_BACKEND is {keras.backend.backend()!r}; "
        "set KERAS_BACKEND=tensorflow before importing keras."
    )

from kformer.layers.attention import (  # noqa: E402
    attention_scores,
    combine_masks,
    make_causal_mask,
    make_padding_mask,
    scaled_dot_product_attention,
)
from kformer.layers.causal_mask import CausalMask
from kformer.layers.cross_attention import CrossAttention
from kformer.layers.dropout import Dropout
from kformer.layers.feed_forward import FeedForward
from kformer.layers.multi_head_self_attention import MultiHeadSelfAttention
from kformer.layers.positional_embedding import PositionalEmbedding, sinusoidal_encoding
from kformer.layers.transformer_block import TransformerBlock

__all__ = [
    "attention_scores",
    "CausalMask",
    "CrossAttention",
    "Dropout",
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
