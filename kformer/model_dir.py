"""A trained model directory: the .keras model, its vocabularies and a config.

DIR/model.keras         the Keras model (kformer layers, weights)
DIR/source_vocab.txt    one token a line; line n is id n (translators only)
DIR/target_vocab.txt
DIR/config.json         model and training settings, with "kind": "translator"
                        or "language_model"; written last, so a directory
                        without it is incomplete

A training run's directory (`RunDirectory`) holds these once it ends, and
meanwhile what the run needs to resume:

DIR/.kformer.lock       while a run writes the directory: its pid, host and start
DIR/learning_curves.png
DIR/training/run.json   the task the run trains: {"kind": ...}
DIR/training/backup/    the resumable copy (`Backup`)
DIR/training/history.csv  a line an epoch; DIR/training/logs/: TensorBoard's
DIR/training/best.weights.h5  the best validation weights (`BestTranslations`)
"""

import contextlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import keras

from kformer.data.text import Tokenizer
from kformer.files import ModelDirectoryError, run_lock, writable_directory, write_atomically, write_json

MODEL_FILE = "model.keras"
SOURCE_VOCAB_FILE = "source_vocab.txt"
TARGET_VOCAB_FILE = "target_vocab.txt"
CONFIG_FILE = "config.json"


KINDS = ("translator", "language_model")


@dataclass
class TrainedModel:
    """A model with its tokenizers and settings, as saved in a model directory.

    A translator (`build_transformer`) has both tokenizers; a language model
    (`build_decoder_only`) has only `target_tokenizer`, and `source_tokenizer`
    is None. `config["kind"]` says which (when absent, as in a model built in
    memory: "language_model" without a source tokenizer, else "translator").
    """

    model: keras.Model
    source_tokenizer: Tokenizer | None
    target_tokenizer: Tokenizer
    config: dict = field(default_factory=dict)

    @property
    def kind(self):
        return self.config.get("kind", "translator" if self.source_tokenizer is not None else "language_model")

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


@dataclass(frozen=True)
class RunDirectory:
    """Every path a training run writes under its --out (the module docstring's list), named here once."""

    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    training = property(lambda self: self.root / "training")
    backup = property(lambda self: self.training / "backup")
    history = property(lambda self: self.training / "history.csv")
    logs = property(lambda self: self.training / "logs")
    best_weights = property(lambda self: self.training / "best.weights.h5")
    learning_curves = property(lambda self: self.root / "learning_curves.png")
    _task = property(lambda self: self.training / "run.json")

    @contextlib.contextmanager
    def claim(self, task, overwrite=False, chief=True):
        """The directory held (`run_lock`) for this run of `task` (`TRANSLATION` or `LANGUAGE_MODEL` of
        kformer.training.tasks) and made ready for it, by the `chief` alone.

        A directory without config.json is new or holds an interrupted run,
        which training resumes. One with config.json holds a finished model:
        it is an error unless `overwrite`, which removes what a run writes
        (config.json first, so the directory never looks complete meanwhile).

        Raises:
            ModelDirectoryError: a finished model is there and `overwrite` is
                False, or an interrupted run of another task.
        """
        if not chief:
            yield self
            return
        with run_lock(self.root):
            self._prepare(task, overwrite)
            yield self

    def _prepare(self, task, overwrite):
        writable_directory(self.root)
        finished = (self.root / CONFIG_FILE).is_file()
        if finished and not overwrite:
            raise ModelDirectoryError(
                f"{self.root}: already holds a trained model; choose another --out, "
                "or pass --overwrite to train a new one in its place."
            )
        if finished:
            for path in (self.root / CONFIG_FILE, self.root / MODEL_FILE, self.learning_curves):
                path.unlink(missing_ok=True)
            for name in (SOURCE_VOCAB_FILE, TARGET_VOCAB_FILE):
                (self.root / name).unlink(missing_ok=True)
            shutil.rmtree(self.training, ignore_errors=True)
        held = json.loads(self._task.read_text(encoding="utf-8"))["kind"] if self._task.is_file() else task.kind
        if held != task.kind:
            raise ModelDirectoryError(
                f"{self.root}: holds an interrupted run that trains a {held.replace('_', ' ')}, not a "
                f"{task.noun}; resume it with its own command, or choose another --out."
            )
        if not self._task.is_file():  # noted before the run's first file (its vocabularies), checked on a resume
            write_json(self._task, {"kind": task.kind})

    def finish(self, trained):
        """Saves the finished model; its resumable backup is then no longer needed."""
        trained.save(self.root)
        shutil.rmtree(self.backup, ignore_errors=True)


def load(directory):
    """Loads a model directory written by `kformer train` or `TrainedModel.save`.

    Raises:
        ModelDirectoryError: the directory is missing, lacks a piece, or its
            vocabularies do not match the model; the message says which.
    """
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
    if not isinstance(config, dict):
        raise ModelDirectoryError(f"{directory / CONFIG_FILE}: must hold a JSON object, not {type(config).__name__}.")
    kind = config.get("kind", "translator")
    if kind not in KINDS:
        raise ModelDirectoryError(f"{directory / CONFIG_FILE}: unknown model kind {kind!r}; expected one of {KINDS}.")
    max_length = config.get("max_length", 40)
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
        raise ModelDirectoryError(
            f"{directory / CONFIG_FILE}: max_length must be a positive integer, got {max_length!r}."
        )
    needed = (MODEL_FILE, TARGET_VOCAB_FILE) + ((SOURCE_VOCAB_FILE,) if kind == "translator" else ())
    missing = [name for name in needed if not (directory / name).is_file()]
    if missing:
        raise ModelDirectoryError(
            f"{directory}: incomplete model directory, missing {', '.join(missing)}; "
            "was training interrupted? Run `kformer train` again with the same --out to resume."
        )
    try:
        model = keras.saving.load_model(directory / MODEL_FILE, safe_mode=True)  # no arbitrary code (lambdas)
    except Exception as error:  # noqa: BLE001  (Keras raises many types for a bad file)
        raise ModelDirectoryError(f"{directory / MODEL_FILE}: cannot be loaded as a Keras model ({error}).") from None
    try:
        target = Tokenizer.load(directory / TARGET_VOCAB_FILE)
        source = Tokenizer.load(directory / SOURCE_VOCAB_FILE) if kind == "translator" else None
    except ValueError as error:
        raise ModelDirectoryError(f"{directory}: a vocabulary file is not valid: {error}") from None
    vocabularies = [("target", target, "decoder")] + ([("source", source, "encoder")] if source else [])
    for name, tokenizer, layer in vocabularies:
        rows = model.get_layer(layer).embedding.vocab_size
        if rows != tokenizer.vocab_size:
            raise ModelDirectoryError(
                f"{directory}: the {name} vocabulary has {tokenizer.vocab_size} tokens but the model's "
                f"{layer} was trained with {rows}; the vocabulary files belong to another model."
            )
    return TrainedModel(model, source, target, config)
