"""The training settings, checked in one place: `TrainingConfig` and the choices it accepts.

Light on purpose (no TensorFlow): the CLI builds its flags from these fields.
"""

import dataclasses
import numbers
import typing
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


def _setting(default, help=None, flag=True, choices=None):
    """A `TrainingConfig` field; its `help` and `choices` become the CLI's flag (`flag=False`: no flag of its own)."""
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag, "choices": choices})


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


_COUNTS = (  # positive integers; the optional ones may also be None
    "d_model num_heads num_layers d_ff source_vocab_size target_vocab_size batch_size warmup_steps "
    "backup_steps shuffle_buffer vocab_sample"
).split()
_OPTIONAL_COUNTS = ("max_length", "batch_tokens", "epochs", "steps_per_epoch")


@dataclass
class TrainingConfig:
    """Everything a training run needs besides the data. The defaults are the paper's recipe at small scale.

    Settings out of range raise `ConfigError` when the config is made, before any work.
    """

    d_model: int = _setting(256, "D, the model width")
    num_heads: int = _setting(8, "H, attention heads per layer")
    num_layers: int = _setting(2, "N, layers in the encoder and in the decoder")
    d_ff: int = _setting(1024, "the feed-forward hidden width")
    dropout: float = _setting(0.1, "dropout rate while training")
    norm_first: bool = _setting(False, "pre-LN blocks")
    tie_embeddings: bool = _setting(False, "the target embedding as the output projection")
    shared_vocab: bool = _setting(
        False, "one vocabulary for both languages and one embedding table for encoder, decoder and output"
    )
    source_vocab_size: int = _setting(8000, flag=False)  # both sides: the CLI's --vocab-size
    target_vocab_size: int = _setting(8000, flag=False)
    max_length: int | None = _setting(
        None,
        "the most tokens a sentence may have; longer pairs are left out of training, not cut (default: from the "
        "data, what 99%% of the pairs fit, and never below 40)",
    )
    batch_size: int = _setting(64, "sentences a batch")
    batch_tokens: int | None = _setting(None, "batches of this many padded tokens a side instead")
    shuffle_buffer: int = _setting(500_000, "pairs held in the shuffle buffer (a corpus read as a stream: its memory)")
    vocab_sample: int = _setting(200_000, "the vocabularies are learned from the first this many training pairs")
    label_smoothing: float = _setting(0.1, "the label smoothing of the loss")
    schedule: str = _setting(
        "budget",
        "budget: warmup, then linear decay to zero when --minutes or --epochs end; noam: the paper's 1/sqrt(step)",
        choices=SCHEDULES,
    )
    warmup_steps: int = _setting(4000, "steps of linear warmup to the paper's peak rate")
    learning_rate_scale: float = _setting(1.0, "multiplies the schedule's rate")
    clipnorm: float | None = _setting(None, "clip each weight's gradient to this norm (Keras's clipnorm, per weight)")
    ema: float | None = _setting(None, "keep and save a moving average of the weights with this decay")
    average: int | None = _setting(
        None, "end with the mean of the last K checkpoints (every --backup-steps), if it translates validation better"
    )
    epochs: int | None = _setting(None, "number of epochs (without --minutes: 10)")
    minutes: float | None = _setting(None, "wall-clock training budget, counted from the first step")
    steps_per_epoch: int | None = _setting(None, "steps an epoch (default: one pass over the training split)")
    patience: int = _setting(5, "epochs without a better validation chrF before stopping early")
    backup_steps: int = _setting(500, "steps between resumable backups")
    seed: int = _setting(0, "the seed of initialisation, dropout and shuffling")
    # None: XLA unless bfloat16 on a CPU. False: the CLI's --no-xla (which decodes `kformer train`'s test split
    # without XLA too).
    jit_compile: bool | None = _setting(None, flag=False)
    strategy: str = _setting("default", "the tf.distribute strategy", choices=STRATEGIES)
    mixed_precision: bool = _setting(False, "float16 (GPU) or bfloat16 (CPU, TPU) compute")
    init_from: str | None = _setting(None, "a trained translator's directory to start from (fine-tuning)")

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

    def model_settings(self):
        settings = {
            name: getattr(self, name)
            for name in ("d_model", "num_heads", "num_layers", "d_ff", "dropout", "norm_first", "tie_embeddings")
        }
        if self.shared_vocab:  # one table for encoder input, decoder input and output: the paper's section 3.4
            settings.update(share_embeddings=True, tie_embeddings=True)
        return settings


def flags():
    """(name, type, default, help, choices) of each setting the CLI offers as `--name`, in the config's order.

    The type is the field's without None: bool (a switch), int, float or str.
    """
    for field in dataclasses.fields(TrainingConfig):
        if field.metadata["flag"]:
            kind = next(t for t in typing.get_args(field.type) or (field.type,) if t is not type(None))
            yield field.name, kind, field.default, field.metadata["help"], field.metadata["choices"]
