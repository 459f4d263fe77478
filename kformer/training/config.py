"""The training settings, checked in one place: `TrainingConfig` and the choices it accepts.

Light on purpose (no TensorFlow): the CLI builds its flags from these fields.
"""

import numbers
from dataclasses import dataclass

STRATEGIES = ("default", "mirrored", "multiworker", "tpu")
SCHEDULES = ("budget", "noam")
TASKS = ("translate", "lm")
# The settings that make a model's shape: fine-tuning (--init-from) keeps them.
ARCHITECTURE = ("d_model", "num_heads", "num_layers", "d_ff", "norm_first", "tie_embeddings", "shared_vocab")


class ConfigError(ValueError):
    """A `TrainingConfig` setting out of range: `name` (the field), the `rule` it breaks, and the `value` given."""

    def __init__(self, name, rule, value=None):
        self.name, self.rule, self.value = name, rule, value
        super().__init__(self.describe(name))

    def describe(self, name):
        """The message with the setting called `name` (the CLI passes its flag)."""
        return f"{name} {self.rule}" + ("." if self.value is None else f", not {self.value!r}.")


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


_COUNTS = (  # positive integers; the optional ones may also be None
    "d_model num_heads num_layers d_ff source_vocab_size target_vocab_size max_length batch_size warmup_steps "
    "backup_steps"
).split()
_OPTIONAL_COUNTS = ("batch_tokens", "epochs", "steps_per_epoch")


@dataclass
class TrainingConfig:
    """Everything a training run needs besides the data. The defaults are the paper's recipe at small scale.

    Settings out of range raise `ConfigError` when the config is made, before any work.
    """

    d_model: int = 256
    num_heads: int = 8
    num_layers: int = 2
    d_ff: int = 1024
    dropout: float = 0.1
    norm_first: bool = False
    tie_embeddings: bool = False
    shared_vocab: bool = False
    source_vocab_size: int = 8000
    target_vocab_size: int = 8000
    max_length: int = 40
    batch_size: int = 64
    batch_tokens: int | None = None
    label_smoothing: float = 0.1
    schedule: str = "budget"
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    clipnorm: float | None = None
    ema: float | None = None
    average: int | None = None
    epochs: int | None = None
    minutes: float | None = None
    steps_per_epoch: int | None = None
    patience: int = 5
    backup_steps: int = 500
    seed: int = 0
    jit_compile: bool | None = None
    strategy: str = "default"
    mixed_precision: bool = False
    init_from: str | None = None

    def __post_init__(self):
        for name in _COUNTS + [n for n in _OPTIONAL_COUNTS if getattr(self, n) is not None]:
            if not _is_int(getattr(self, name)) or getattr(self, name) < 1:
                raise ConfigError(name, "must be a positive integer", getattr(self, name))
        if self.d_model % self.num_heads:
            raise ConfigError("num_heads", f"must divide d_model ({self.d_model}) into equal heads", self.num_heads)
        if not _is_int(self.patience) or self.patience < 0:
            raise ConfigError("patience", "must be 0 or a positive integer", self.patience)
        for name in ("dropout", "label_smoothing"):
            if not _is_number(getattr(self, name)) or not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(name, "is a rate from 0 up to (not including) 1", getattr(self, name))
        for name in ("learning_rate_scale", "clipnorm", "minutes"):
            value = getattr(self, name)
            if value is not None and (not _is_number(value) or not value > 0):  # `not >` also catches NaN
                raise ConfigError(name, "must be a positive number", value)
        if self.ema is not None and (not _is_number(self.ema) or not 0.0 < self.ema < 1.0):
            raise ConfigError("ema", "is a decay between 0 and 1 (such as 0.999)", self.ema)
        if self.average is not None and (not _is_int(self.average) or self.average < 2):
            raise ConfigError("average", "is a number of checkpoints, 2 or more", self.average)
        if self.schedule not in SCHEDULES:
            raise ConfigError("schedule", f"is one of {', '.join(SCHEDULES)}", self.schedule)
        if self.strategy not in STRATEGIES:
            raise ConfigError("strategy", f"is one of {', '.join(STRATEGIES)}", self.strategy)
        if self.average and self.strategy == "multiworker":
            raise ConfigError("average", "needs the per-epoch validation that the multiworker strategy does not run")

    def model_settings(self):
        settings = {
            name: getattr(self, name)
            for name in ("d_model", "num_heads", "num_layers", "d_ff", "dropout", "norm_first", "tie_embeddings")
        }
        if self.shared_vocab:  # one table for encoder input, decoder input and output: the paper's section 3.4
            settings.update(share_embeddings=True, tie_embeddings=True)
        return settings
