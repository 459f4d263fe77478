"""kformer: a Transformer built from scratch as Keras 3 layers on TensorFlow.

Shapes are written with one alphabet throughout the package:
    B batch, S source length, T target length, D model width (d_model),
    H heads, K head width (head_dim), V vocabulary size.

`import kformer` is cheap: it imports TensorFlow and Keras only when a name
that needs them is first used (`kformer.Translator`, `kformer.layers`, ...),
and it changes no global state besides defaulting KERAS_BACKEND to
"tensorflow", the only backend kformer runs on. Import `kformer.layers` (or
call `kformer.load`) before `keras.saving.load_model` on a file holding
kformer layers, so that they are registered.
"""

import importlib
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    **dict.fromkeys(
        [
            "CausalMask",
            "CrossAttention",
            "FeedForward",
            "MultiHeadSelfAttention",
            "PositionalEmbedding",
            "TransformerBlock",
            "attention_scores",
            "combine_masks",
            "make_causal_mask",
            "make_padding_mask",
            "scaled_dot_product_attention",
            "sinusoidal_encoding",
        ],
        "kformer.layers",
    ),
    **dict.fromkeys(
        ["Decoder", "Encoder", "SharedEmbeddingTransformer", "build_decoder_only", "build_transformer"], "kformer.model"
    ),
    **dict.fromkeys(["TrainedModel", "load"], "kformer.model_dir"),
    **dict.fromkeys(["TrainingConfig", "train_language_model", "train_translator"], "kformer.recipes"),
    **dict.fromkeys(["BestTranslations", "evaluate", "score"], "kformer.evaluation"),
    **dict.fromkeys(
        ["BudgetSchedule", "MaskedAccuracy", "MaskedSparseCrossEntropy", "TransformerSchedule"], "kformer.training"
    ),
    "Translator": "kformer.translator",
    "Generator": "kformer.generator",
}
_SUBMODULES = {
    "choices",
    "cli",
    "corpus",
    "data",
    "decoding",
    "evaluation",
    "export",
    "generator",
    "layers",
    "model",
    "model_dir",
    "mvp",
    "plots",
    "recipes",
    "text",
    "training",
    "translator",
    "walkthrough",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    """Imports a public name's module on first use (PEP 562)."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"kformer.{name}")
    else:
        raise AttributeError(f"module 'kformer' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)
