"""kformer: a Transformer built from scratch as Keras 3 layers on TensorFlow.

Shapes are written with one alphabet throughout the package:
    B batch, S source length, T target length, D model width (d_model),
    H heads, K head width (head_dim), V vocabulary size.
"""

import contextlib
import os
import sys


@contextlib.contextmanager
def _quiet_native_stderr():
    """Hides what TensorFlow's C++ start-up writes to fd 2 before its logging is set up.

    On CPU machines it prints CUDA probing and oneDNN notes that bury the output
    people came for, and TF_CPP_MIN_LOG_LEVEL does not reach those lines.
    TF_CPP_MIN_LOG_LEVEL=0 keeps them.
    """
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0" or "tensorflow" in sys.modules:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

with _quiet_native_stderr():
    import keras  # noqa: E402
    import tensorflow  # noqa: E402, F401  (keras imports it lazily on some paths)

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
    attention_scores,
    combine_masks,
    make_causal_mask,
    make_padding_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)
from kformer.model import Decoder, Encoder, build_decoder_only, build_transformer  # noqa: E402
from kformer.model_dir import TrainedModel, load  # noqa: E402
from kformer.recipes import TrainingConfig, evaluate, train_language_model, train_translator  # noqa: E402
from kformer.training import MaskedAccuracy, MaskedSparseCrossEntropy, TransformerSchedule  # noqa: E402
from kformer.translator import Translator  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "CausalMask",
    "CrossAttention",
    "Decoder",
    "Encoder",
    "FeedForward",
    "MaskedAccuracy",
    "MaskedSparseCrossEntropy",
    "MultiHeadSelfAttention",
    "PositionalEmbedding",
    "TrainedModel",
    "TrainingConfig",
    "TransformerBlock",
    "TransformerSchedule",
    "Translator",
    "attention_scores",
    "build_decoder_only",
    "build_transformer",
    "combine_masks",
    "evaluate",
    "load",
    "make_causal_mask",
    "make_padding_mask",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
    "train_language_model",
    "train_translator",
]
