"""kformer: a Transformer built from scratch as Keras 3 layers on TensorFlow.

Shapes are written with one alphabet throughout the package:
    B batch, S source length, T target length, D model width (d_model),
    H heads, K head width (head_dim), V vocabulary size.

The package, lowest first (nothing imports a package above it):
    layers/     the seed's pieces, one layer per file; the attention core and masks
    data/       tokenizer, pair files, the tf.data pipeline, the built-in corpus
    model.py    the paper's figure: Encoder, Decoder, build_transformer, build_decoder_only
    model_dir.py  a trained model on disk: model.keras, vocabularies, config.json
    inference/  decoding loops, Translator, Generator
    training/   config, objectives, callbacks, strategies, evaluation, the jobs
    deploy/     the export writers (the clients are in the repository's export/)
    teaching/   the eight stages, the seeds' walkthrough, attention heatmaps
    cli.py      `kformer ...`

`import kformer` loads Keras (and TensorFlow, its backend) and registers every
Keras object the package defines (layers, models, the loss, the metric, the
learning-rate schedules), so `keras.saving.load_model` reads a `.keras` file
of kformer layers in any import order. The course's stage models register
when `kformer.teaching` is imported, as the notebooks do. The rest (`kformer.Translator`,
`kformer.train_translator`, ...) loads on first use. It changes no global
state besides defaulting KERAS_BACKEND to "tensorflow", the only backend
kformer runs on.

The `kformer` command (`python -m kformer`, or the console script) is the one
exception: its process registers the Keras objects after parsing its
arguments, so `kformer --help` answers without loading TensorFlow, and it
hides TensorFlow's native start-up notes there (TF_CPP_MIN_LOG_LEVEL=0 keeps them).
"""

import importlib
import os
import sys

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
        ["Decoder", "Encoder", "SharedEmbeddingTransformer", "Transformer", "build_decoder_only", "build_transformer"],
        "kformer.model",
    ),
    **dict.fromkeys(["ModelDirectoryError", "TrainedModel", "load"], "kformer.model_dir"),
    **dict.fromkeys(["DataError", "read_pairs", "split_pairs"], "kformer.data.pairs"),
    **dict.fromkeys(["Tokenizer", "build_vocabulary"], "kformer.data.text"),
    "make_dataset": "kformer.data.pipeline",
    "builtin_splits": "kformer.data.corpus",
    "compile_for_training": "kformer.training.objectives",
    **dict.fromkeys(["ConfigError", "TrainingConfig"], "kformer.training.config"),
    **dict.fromkeys(["train_language_model", "train_translator"], "kformer.training.jobs"),
    **dict.fromkeys(["BestTranslations", "evaluate", "score"], "kformer.training.evaluation"),
    **dict.fromkeys(
        ["BudgetSchedule", "MaskedAccuracy", "MaskedSparseCrossEntropy", "TransformerSchedule"],
        "kformer.training.objectives",
    ),
    "Translator": "kformer.inference.translator",
    "Generator": "kformer.inference.generator",
    "export": "kformer.deploy.export",
}
_SUBMODULES = {"cli", "data", "deploy", "inference", "layers", "model", "model_dir", "teaching", "training"}

__all__ = sorted(_EXPORTS)


def register_keras_objects():
    """Imports the modules whose Keras objects a saved kformer model refers to, which registers them.

    `import kformer` calls it; only the `kformer` command calls it later, itself.
    """
    importlib.import_module("kformer.layers")
    importlib.import_module("kformer.model")
    importlib.import_module("kformer.training.objectives")


def _started_as_command():
    """True in the `kformer` command's own process: `python -m kformer[.module]` or the console script.

    While `python -m` locates its module, Python sets sys.argv[0] to "-m".
    """
    argv = getattr(sys, "argv", None) or [""]
    return argv[0] == "-m" or os.path.basename(argv[0]) == "kformer"


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


if not _started_as_command():
    register_keras_objects()
