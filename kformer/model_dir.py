"""A trained model directory: the .keras model, its vocabularies and a config.

DIR/model.keras         the Keras model (kformer layers, weights)
DIR/source_vocab.txt    one token a line; line n is id n (translators only)
DIR/target_vocab.txt
DIR/config.json         model and training settings, with "kind": "translator"
                        or "language_model"; written last, so a directory
                        without it is incomplete
"""

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import keras

from kformer.text import Tokenizer

MODEL_FILE = "model.keras"
SOURCE_VOCAB_FILE = "source_vocab.txt"
TARGET_VOCAB_FILE = "target_vocab.txt"
CONFIG_FILE = "config.json"


class ModelDirectoryError(ValueError):
    """A model directory that is missing, incomplete or inconsistent."""


def write_atomically(path, write):
    """Calls write(temporary_path), then renames it to `path`: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(handle)
    try:
        write(temporary)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_json(path, data):
    """Writes `data` as indented JSON, atomically."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    write_atomically(path, lambda temporary: Path(temporary).write_text(text, encoding="utf-8"))


KINDS = ("translator", "language_model")


@dataclass
class TrainedModel:
    """A model with its tokenizers and settings, as saved in a model directory.

    A translator (`build_transformer`) has both tokenizers; a language model
    (`build_decoder_only`) has only `target_tokenizer`, and `source_tokenizer`
    is None. `config["kind"]` says which ("translator" when absent).
    """

    model: keras.Model
    source_tokenizer: Tokenizer | None
    target_tokenizer: Tokenizer
    config: dict = field(default_factory=dict)

    @property
    def kind(self):
        return self.config.get("kind", "translator")

    @property
    def max_length(self):
        return self.config.get("max_length", 40)

    def save(self, directory):
        """Writes the directory; config.json last, each file replaced atomically."""
        directory = Path(directory)
        write_atomically(directory / MODEL_FILE, self.model.save)
        if self.source_tokenizer is not None:
            write_atomically(directory / SOURCE_VOCAB_FILE, self.source_tokenizer.save)
        write_atomically(directory / TARGET_VOCAB_FILE, self.target_tokenizer.save)
        write_json(directory / CONFIG_FILE, {"kind": self.kind, **self.config})


def _embedding_rows(model, layer_name):
    return model.get_layer(layer_name).embedding.vocab_size


def load(directory):
    """Loads a model directory written by `kformer train` or `TrainedModel.save`.

    Raises:
        ModelDirectoryError: the directory is missing, lacks a piece, or its
            vocabularies do not match the model; the message says which.
    """
    # Register what a saved model refers to before loading it: the layers and
    # models, and the loss, metric and learning-rate schedule it was compiled with.
    import kformer.model  # noqa: F401
    import kformer.training  # noqa: F401

    directory = Path(directory)
    if not directory.is_dir():
        raise ModelDirectoryError(f"{directory}: no such model directory; train one with `kformer train`.")
    if not (directory / CONFIG_FILE).is_file():
        raise ModelDirectoryError(
            f"{directory}: incomplete model directory, missing {CONFIG_FILE}; "
            "was training interrupted? Run `kformer train` again with the same --out to resume."
        )
    try:
        config = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelDirectoryError(f"{directory / CONFIG_FILE}: not valid JSON ({error}).") from None
    kind = config.get("kind", "translator") if isinstance(config, dict) else None
    if kind not in KINDS:
        raise ModelDirectoryError(f"{directory / CONFIG_FILE}: unknown model kind {kind!r}; expected one of {KINDS}.")
    needed = (MODEL_FILE, TARGET_VOCAB_FILE) + ((SOURCE_VOCAB_FILE,) if kind == "translator" else ())
    missing = [name for name in needed if not (directory / name).is_file()]
    if missing:
        raise ModelDirectoryError(
            f"{directory}: incomplete model directory, missing {', '.join(missing)}; "
            "was training interrupted? Run `kformer train` again with the same --out to resume."
        )
    try:
        model = keras.saving.load_model(directory / MODEL_FILE)
    except Exception as error:  # noqa: BLE001  (Keras raises many types for a bad file)
        raise ModelDirectoryError(f"{directory / MODEL_FILE}: cannot be loaded as a Keras model ({error}).") from None
    try:
        target = Tokenizer.load(directory / TARGET_VOCAB_FILE)
        source = Tokenizer.load(directory / SOURCE_VOCAB_FILE) if kind == "translator" else None
    except ValueError as error:
        raise ModelDirectoryError(f"{directory}: a vocabulary file is not valid: {error}") from None
    vocabularies = [("target", target, "decoder")] + ([("source", source, "encoder")] if source else [])
    for name, tokenizer, layer in vocabularies:
        rows = _embedding_rows(model, layer)
        if rows != tokenizer.vocab_size:
            raise ModelDirectoryError(
                f"{directory}: the {name} vocabulary has {tokenizer.vocab_size} tokens but the model's "
                f"{layer} was trained with {rows}; the vocabulary files belong to another model."
            )
    return TrainedModel(model, source, target, config)
