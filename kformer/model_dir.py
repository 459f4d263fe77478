"""A trained model directory: the .keras model, both vocabularies and a config.

DIR/model.keras         the Keras model (kformer layers, weights)
DIR/source_vocab.txt    one token a line; line n is id n
DIR/target_vocab.txt
DIR/config.json         model and training settings; written last, so a
                        directory without it is incomplete
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


@dataclass
class TrainedModel:
    """A translation model with its tokenizers and settings, as saved in a model directory."""

    model: keras.Model
    source_tokenizer: Tokenizer
    target_tokenizer: Tokenizer
    config: dict = field(default_factory=dict)

    @property
    def max_length(self):
        return self.config.get("max_length", 40)

    def save(self, directory):
        """Writes the directory; config.json last, each file replaced atomically."""
        directory = Path(directory)
        write_atomically(directory / MODEL_FILE, self.model.save)
        write_atomically(directory / SOURCE_VOCAB_FILE, self.source_tokenizer.save)
        write_atomically(directory / TARGET_VOCAB_FILE, self.target_tokenizer.save)
        write_json(directory / CONFIG_FILE, self.config)


def _embedding_rows(model, layer_name):
    return model.get_layer(layer_name).embedding.vocab_size


def load(directory):
    """Loads a model directory written by `kformer train` or `TrainedModel.save`.

    Raises:
        ModelDirectoryError: the directory is missing, lacks a piece, or its
            vocabularies do not match the model; the message says which.
    """
    import kformer  # noqa: F401  (registers the layers before loading)

    directory = Path(directory)
    if not directory.is_dir():
        raise ModelDirectoryError(f"{directory}: no such model directory; train one with `kformer train`.")
    missing = [
        name
        for name in (MODEL_FILE, SOURCE_VOCAB_FILE, TARGET_VOCAB_FILE, CONFIG_FILE)
        if not (directory / name).is_file()
    ]
    if missing:
        raise ModelDirectoryError(
            f"{directory}: incomplete model directory, missing {', '.join(missing)}; "
            "was training interrupted? Run `kformer train` again with the same --out to resume."
        )
    try:
        config = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelDirectoryError(f"{directory / CONFIG_FILE}: not valid JSON ({error}).") from None
    try:
        model = keras.saving.load_model(directory / MODEL_FILE)
    except Exception as error:  # noqa: BLE001  (Keras raises many types for a bad file)
        raise ModelDirectoryError(f"{directory / MODEL_FILE}: cannot be loaded as a Keras model ({error}).") from None
    try:
        source, target = Tokenizer.load(directory / SOURCE_VOCAB_FILE), Tokenizer.load(directory / TARGET_VOCAB_FILE)
    except ValueError as error:
        raise ModelDirectoryError(f"{directory}: a vocabulary file is not valid: {error}") from None
    for name, tokenizer, layer in [("source", source, "encoder"), ("target", target, "decoder")]:
        rows = _embedding_rows(model, layer)
        if rows != tokenizer.vocab_size:
            raise ModelDirectoryError(
                f"{directory}: the {name} vocabulary has {tokenizer.vocab_size} tokens but the model's "
                f"{layer} was trained with {rows}; the vocabulary files belong to another model."
            )
    return TrainedModel(model, source, target, config)
