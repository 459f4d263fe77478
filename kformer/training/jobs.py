"""Whole jobs, end to end: train a translator, train a language model.

Both check their input and run one sequence, `_train`: set up the strategy,
seeds and precision; learn the vocabularies; build and compile the model
under the strategy; run model.fit (under multiworker, its twin
`fit_across_workers`) with the backup, the budget and (given validation
pairs) the keeper of the best translations; and save the model
directory on the chief. The CLI is a thin
layer over these; notebooks and scripts call them directly.
"""

import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from kformer.data.pairs import DataError, check_pairs
from kformer.data.pipeline import batches_per_epoch, fits, length_limit, make_dataset, pair_lengths
from kformer.data.stream import InMemoryPairs, training_pairs
from kformer.files import require_space, write_atomically
from kformer.model_dir import (
    SOURCE_VOCAB_FILE,
    TARGET_VOCAB_FILE,
    ModelDirectoryError,
    RunDirectory,
    TrainedModel,
    load,
)
from kformer.training.callbacks import Backup, CheckpointAverage, DamagedBackup, TensorBoard, TimeBudget
from kformer.training.config import ARCHITECTURE, ConfigError, TrainingConfig
from kformer.training.distribute import fit_across_workers, make_strategy
from kformer.training.history import forget_epochs, learning_curves, whole_history
from kformer.training.objectives import BudgetSchedule, TransformerSchedule, compile_for_training
from kformer.training.tasks import LANGUAGE_MODEL, TRANSLATION, require

FEW_STEPS = 100  # a budget that ran out before this many steps warns that the model is barely trained


def _schedule(config, steps_per_epoch):
    """The paper's schedule, or the budget's: down to zero at the last epoch's end or when --minutes run out.

    Under --minutes alone the end is not known yet; `TimeBudget` sets it from the measured pace.
    """
    if config.schedule == "noam":
        return TransformerSchedule(config.d_model, config.warmup_steps, config.learning_rate_scale)
    total_steps = steps_per_epoch * _epochs(config) if config.epochs or not config.minutes else 1e9
    return BudgetSchedule(config.d_model, total_steps, config.warmup_steps, config.learning_rate_scale)


def uses_xla(config):
    """Whether the job compiles its training step with XLA.

    `config.jit_compile`, or when that is None: yes, except for bfloat16 on a
    CPU, where TensorFlow's own kernels train faster than XLA's
    (bench/RESULTS.md). Call it where the job's precision policy is in force.
    """
    if config.jit_compile is not None:
        return config.jit_compile
    return config.strategy == "tpu" or keras.mixed_precision.global_policy().compute_dtype != "bfloat16"


@contextlib.contextmanager
def _training_setup(config):
    """What every job sets up first: the strategy, the seeds, the precision policy.

    The global dtype policy belongs to the caller: it is set for building the
    model and put back as it was when the job returns (or fails).

    Yields:
        (strategy, the policy's name).
    """
    strategy = make_strategy(config.strategy)  # first: multi-worker collectives need a fresh runtime
    keras.utils.set_random_seed(config.seed)
    policy = "float32"
    if config.mixed_precision:
        policy = "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield strategy, policy
    finally:
        keras.mixed_precision.set_global_policy(previous)


def _build(strategy, config, builder, vocab_sizes, steps_per_epoch, weights=None):
    """`builder(*vocab_sizes, **model settings)` made (with `weights`, if given) and compiled under the strategy.

    Returns:
        (model, its learning-rate schedule).
    """
    with strategy.scope():
        model = builder(*vocab_sizes, **config.model_settings())
        if weights is not None:
            model.set_weights(weights)
        schedule = _schedule(config, steps_per_epoch)
        compile_for_training(
            model,
            config.d_model,
            config.label_smoothing,
            jit_compile=uses_xla(config),
            clipnorm=config.clipnorm,
            schedule=schedule,
            ema=config.ema,
        )
    return model, schedule


def _callbacks(run, config, keeper, budget, backup, average, chief, own):
    """What runs at each step, in this order, under every strategy: the average first (the keeper judges it at the
    end), the keeper next (EarlyStopping and the logs read the val_chrf it adds), the logs, the user's `own`, the
    budget, the backup last (an epoch is logged before a Ctrl-C stops the run there). The workers of a cluster
    that are not its chief run only the budget and the backup, which all of them must agree on."""
    if not chief:
        return [callback for callback in (budget, backup) if callback is not None]
    run.training.mkdir(parents=True, exist_ok=True)  # for the CSVLogger, whichever callback opens its file first
    callbacks = [average] if average is not None else []
    if keeper is not None:
        baseline = keeper.best if keeper.best >= 0 else None  # resumed: the best chrF from before the restart
        stopper = keras.callbacks.EarlyStopping("val_chrf", mode="max", patience=config.patience, baseline=baseline)
        callbacks += [keeper, stopper]
    callbacks += [
        keras.callbacks.CSVLogger(str(run.history), append=True),
        TensorBoard(str(run.logs), update_freq=100),
        *own,
    ]
    if budget is not None:
        callbacks.append(budget)
    return callbacks + [backup]


def _epochs(config):
    """The epochs asked for; with only a time budget, more than the budget allows; else 10."""
    return config.epochs or (10_000 if config.minutes else 10)


def _fit(model, schedule, train, valid, steps_per_epoch, run, config, verbose, keeper=None, own=()):
    """model.fit under the epoch count or the wall-clock budget, or under the multiworker strategy its twin
    `fit_across_workers`, with the same callbacks and the user's `own`; returns (history, summary)."""
    chief, across_workers = is_chief(config), config.strategy == "multiworker"
    backup, out = Backup(run.backup, config.backup_steps, write=chief), run.root
    try:
        initial_epoch = backup.restore(model)
    except DamagedBackup as error:
        raise ModelDirectoryError(
            f"{error}; the interrupted run in {out} cannot be resumed: delete {backup.directory} to start it "
            "over, or choose another --out."
        ) from None
    except ValueError:  # Keras: the saved weights do not fit this model
        raise ModelDirectoryError(
            f"{out}: holds an interrupted run of a model of another shape; resume it with the settings it "
            "was started with, or choose another --out."
        ) from None
    if chief:  # the epochs from initial_epoch on run again (all of them in a new run)
        forget_epochs(run.history, initial_epoch)
    if backup.restored_step is not None:
        if isinstance(schedule, BudgetSchedule) and not config.minutes and not across_workers:
            # fit reruns the interrupted epoch whole: the schedule ends where this run will, not at
            # epochs x steps_per_epoch, or the rerun steps past that would train at rate zero.
            remaining = (_epochs(config) - initial_epoch) * steps_per_epoch
            schedule.total_steps.assign(float(backup.restored_step + remaining))
        if keeper is not None:
            keeper.resume()
        if not across_workers:  # the data goes on where it was: the batches trained on are read and skipped
            train = train.skip(backup.restored_step)  # (fit_across_workers skips in each worker's share)
        if verbose:
            print(
                f"Resuming the interrupted run in {out}: step {backup.restored_step:,}, epoch {initial_epoch + 1} "
                f"(first reading past the {backup.restored_step:,} batches it trained on) ...",
                flush=True,
            )
    budget_only = config.minutes and not config.epochs  # epochs mean little: the budget shows the time left instead
    shown = verbose if budget_only else 0
    budget = TimeBudget(config.minutes, backup.seconds, schedule, verbose=shown) if config.minutes else None
    average = CheckpointAverage(config.average, config.backup_steps, keeper) if config.average else None
    callbacks = _callbacks(run, config, keeper, budget, backup, average, chief, own)
    shown = 0 if budget_only else verbose
    started = time.perf_counter()
    with backup.guard_interrupts():
        if across_workers:
            at, valid = (backup.restored_step or 0, initial_epoch), valid if chief else None
            history = fit_across_workers(
                model, train, _epochs(config), steps_per_epoch, callbacks, budget, backup, *at, valid, shown
            )
        else:
            history = model.fit(
                train,
                validation_data=valid,
                epochs=_epochs(config),
                initial_epoch=initial_epoch,
                steps_per_epoch=steps_per_epoch,
                callbacks=callbacks,
                shuffle=False,  # the dataset shuffles itself
                verbose=shown,
            )
    seconds = time.perf_counter() - started
    # The chief's record covers the epochs before a restart too; the other workers know only their own.
    resumed = backup.restored_step is not None and chief
    epochs = whole_history(run.history) if resumed else history.history
    summary = _summary(
        model, epochs, seconds, "epochs or early stopping", config, budget, budget and budget.first_step_seconds
    )
    if backup.restored_step is not None:
        summary["resumed_from"] = backup.restored_step
    if average is not None and average.chrf is not None:
        summary["val_chrf_average"] = average.chrf
    _report(summary, epochs, run.learning_curves if chief else None)
    return history, summary


def _summary(model, epochs, seconds, ended_by, config, budget, first_step_seconds):
    """The run's result for config.json: steps, time, epochs, why it stopped (the time `budget`, or else what
    `ended_by` names), and the last epoch's metrics."""
    summary = {
        "steps": int(model.optimizer.iterations.numpy()),
        "seconds": round(seconds, 1),
        "epochs_run": len(epochs.get("loss", [])),
        "stopped_by": "time budget" if budget is not None and budget.expired else ended_by,
    }
    if budget is not None:
        summary["first_step_seconds"] = round(first_step_seconds or 0.0, 1)
    if budget is not None and budget.expired and summary["steps"] < FEW_STEPS:
        summary["warning"] = (
            f"only {summary['steps']} training steps ran in {config.minutes:g} minutes (the first took "
            f"{summary['first_step_seconds']:.0f} s): too few to learn from; give more --minutes"
        )
    summary.update({name: round(float(values[-1]), 4) for name, values in epochs.items() if values})
    return summary


def _report(summary, epochs, curves):
    """Prints the summary's warning (to stderr, under --quiet too: it is about the result), and draws the learning
    curves to `curves` (None: this worker writes nothing)."""
    if "warning" in summary:
        print(f"warning: {summary['warning']}.", file=sys.stderr, flush=True)
    if curves is not None and epochs.get("loss"):
        learning_curves(epochs, curves)


def _training_data(pairs, source, target, config):
    """`input_context -> dataset`: the training batches of one worker's share of `pairs` (a `TrainingStream`'s
    or `InMemoryPairs`' `share`).

    A share's batches hold the per-replica part of `config.batch_size` (or of `batch_tokens`).
    """

    def share(context):
        settings = dict(
            batch_size=max(1, config.batch_size // context.num_replicas_in_sync),
            batch_tokens=config.batch_tokens and max(1, config.batch_tokens // context.num_replicas_in_sync),
            max_length=config.max_length,
            shuffle_buffer=config.shuffle_buffer,
        )
        mine = pairs.share(context.input_pipeline_id, context.num_input_pipelines)
        return make_dataset(mine, source, target, repeat=True, seed=config.seed, **settings)

    return share


def _length_limit(task, config, pairs, source, target, base, verbose):
    """`config` with its `max_length` settled, how many training pairs (a language model's lines) it leaves out
    (`make_dataset`), and the `pair_lengths` it counted them by.

    Unset, the limit is the model's it fine-tunes, or what 99% of the pairs fit (`length_limit`). A
    stream's pairs are counted in its sample and the count scaled to its estimated size.
    """
    sample = pairs.sample
    lengths = pair_lengths(sample, source, target)
    chosen = config.max_length is None
    if chosen:
        config = dataclasses.replace(config, max_length=base.max_length if base else length_limit(*lengths))
    too_long = int(np.sum(~fits(*lengths, config.max_length)))
    if too_long == len(sample):
        raise DataError(
            f"none of the {len(sample):,} training {task.examples} fits max_length={config.max_length} tokens a side; "
            "raise --max-length."
        )
    total = pairs.estimated_pairs
    left_out = round(too_long * total / len(sample))
    if verbose:
        how = "" if not chosen else " (the model's)" if base else f" (from the data: 99% of the {task.examples} fit)"
        about = "about " if pairs.approximate else ""
        print(
            f"Sentences of up to {config.max_length} tokens{how}: {about}{left_out:,} of {about}{total:,} training "
            f"{task.examples} ({too_long / len(sample):.2%}) are longer and left out"
            + ("; raise --max-length to keep them." if left_out else "."),
            flush=True,
        )
    return config, left_out, lengths


def is_chief(config):
    """False only on the workers of a multi-worker cluster that are not its chief: they must not write `out`.

    The chief is the task of type "chief" (TF_CONFIG), or without one worker 0.
    """
    if config.strategy != "multiworker":
        return True
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = tf_config.get("task", {})
    if "chief" in tf_config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type") in (None, "worker") and task.get("index", 0) == 0


def refuse_new_architecture(init_from, asked):
    """Fine-tuning keeps the architecture it starts from: a setting in `asked` that differs is a `ConfigError`.

    Reads only `init_from`/config.json's "training" entry (what `kformer train`
    records); a directory without one is left for `load` to refuse.

    Args:
        asked: {setting: value} the caller chose.
    """
    try:
        saved = json.loads((Path(init_from) / "config.json").read_text(encoding="utf-8"))["training"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    saved = _with_defaults(saved)
    for name, value in asked.items():
        if name in ARCHITECTURE and name in saved and value != saved[name]:
            raise ConfigError(
                name,
                f"asks for {value}, but the model in {init_from} has {saved[name]}: fine-tuning (--init-from) keeps "
                "the architecture it starts from; leave it out",
            )


def _with_defaults(saved):
    """A directory's recorded settings, with the defaults of those that older releases did not record."""
    return {"shared_vocab": False, **saved}  # older directories: separate vocabularies


def _starting_point(config, out):
    """For --init-from: the trained translator to start from, with `config` taking its architecture.

    The new run tokenizes as the old one did (words it never saw fall to
    WordPiece pieces or [UNK]); the chief copies its vocabularies into `out`.

    Returns:
        (the `TrainedModel` or None, the config to train with).
    """
    if not config.init_from:
        return None, config
    base = require(load(config.init_from), TRANSLATION, config.init_from, "--init-from fine-tunes a translator")
    saved = _with_defaults(base.config.get("training", {}))
    if not all(name in saved for name in ARCHITECTURE):
        raise ModelDirectoryError(
            f"{config.init_from}/config.json: does not record the model's settings (its 'training' entry), "
            "so it cannot be trained further; start from a directory written by `kformer train`."
        )
    config = dataclasses.replace(
        config,
        **{name: saved[name] for name in ARCHITECTURE},
        source_vocab_size=base.source_tokenizer.vocab_size,
        target_vocab_size=base.target_tokenizer.vocab_size,
    )
    for name, tokenizer in ((SOURCE_VOCAB_FILE, base.source_tokenizer), (TARGET_VOCAB_FILE, base.target_tokenizer)):
        if is_chief(config) and not (out / name).is_file():  # the chief writes `out`; the others read --init-from
            write_atomically(out / name, tokenizer.save)
    return base, config


def train_translator(splits, out, config=None, verbose=1, overwrite=False, callbacks=()):
    """Trains an encoder-decoder translator and saves its model directory.

    Args:
        splits: {"train": pairs, "valid": pairs, ...}, pairs as (source, target).
        out: the model directory to write (and to resume from if a run was
            killed: its vocabularies and training/backup are reused).
        config: a `TrainingConfig`. With `init_from` (a translator's model
            directory) training starts from that model, its architecture
            and its vocabularies: fine-tuning.
        overwrite: train a new model over a finished one in `out` (otherwise
            that is refused: `ModelDirectoryError`).
        callbacks: your own Keras callbacks (such as Weights & Biases' or
            MLflow's), run after kformer's logs and before its time budget
            and backup, under every strategy (on the chief of a cluster).
            One that raises stops the run with its error; the backup keeps
            the run to that step's last copy.

    Returns:
        The `TrainedModel`, also saved under `out`.
    """
    config = config or TrainingConfig()
    if not isinstance(splits, dict) or "train" not in splits:
        raise DataError('splits must be a dict {"train": pairs, "valid": pairs (optional)}, as split_pairs returns.')
    train_pairs = training_pairs(splits["train"], "splits['train']")
    valid_pairs = check_pairs(splits.get("valid") or [], "splits['valid']")
    if config.init_from:
        asked = {name: getattr(config, name) for name in ARCHITECTURE}
        default = dataclasses.asdict(TrainingConfig())
        refuse_new_architecture(config.init_from, {k: v for k, v in asked.items() if v != default[k]})
    if not train_pairs:  # (a stream is never empty: it was refused when read)
        raise DataError("the training split is empty; give more sentence pairs.")
    with RunDirectory(out).claim(TRANSLATION, overwrite, is_chief(config)) as run:
        base, config = _starting_point(config, run.root)
        return _train(TRANSLATION, train_pairs, valid_pairs, run, config, verbose, base, callbacks)


def train_language_model(lines, out, config=None, verbose=1, overwrite=False, valid_lines=(), callbacks=()):
    """Trains the decoder-only (GPT-style) model on lines of text with the same recipe.

    Each line becomes [START] + tokens -> tokens + [END]. Writes a model
    directory (model.keras, target_vocab.txt, config.json with kind
    "language_model") that `kformer.load` and `kformer.Generator` read.
    Given `valid_lines` (held-out text), the result holds the model's
    perplexity on them, `val_perplexity` (see `evaluation.perplexity`).
    `callbacks`: your own Keras callbacks, as `train_translator` runs them.

    Returns:
        The `TrainedModel` (its `source_tokenizer` is None), also saved under `out`.
    """
    config = config or TrainingConfig()
    if not lines:
        raise DataError("no text to train on; give at least one line.")
    with RunDirectory(out).claim(LANGUAGE_MODEL, overwrite, is_chief(config)) as run:
        for name, given in (("lines", lines), ("valid_lines", valid_lines)):
            if isinstance(given, (str, bytes)) or not all(isinstance(line, str) for line in given):
                raise DataError(f"{name} must be a list of strings, one line of text each.")
        return _train(
            LANGUAGE_MODEL, InMemoryPairs(lines), list(valid_lines), run, config, verbose, callbacks=callbacks
        )


def _train(task, pairs, valid_pairs, run, config, verbose, base=None, callbacks=()):
    """The training sequence both jobs share: vocabularies, model, data, fit, model directory.

    `task`: `TRANSLATION` or `LANGUAGE_MODEL` (kformer.training.tasks), which says what differs; `base` the
    `TrainedModel` to start from (--init-from).
    """
    out = run.root
    with _training_setup(config) as (strategy, policy):
        if base is not None:  # fine-tuning tokenizes as the model it starts from did
            source, target = base.source_tokenizer, base.target_tokenizer
        else:
            source, target = task.vocabularies(out, pairs.sample, config, verbose, write=is_chief(config))
        builder, sizes, model_config = task.model(config, source, target)
        config, left_out, lengths = _length_limit(task, config, pairs, source, target, base, verbose)
        batches = dict(batch_size=config.batch_size, max_length=config.max_length, batch_tokens=config.batch_tokens)
        steps_per_epoch = config.steps_per_epoch or batches_per_epoch(pairs, source, target, **batches, lengths=lengths)
        weights = base.model.get_weights() if base else None
        model, schedule = _build(strategy, model_config, builder, sizes, steps_per_epoch, weights)
        # model.keras, the best weights, and the backup with Adam's two moments (twice while replacing it).
        require_space(out, 8 * 4 * model.count_params(), "training this model")
        train = _training_data(pairs, source, target, config)
        if config.strategy != "multiworker":
            train = train(tf.distribute.InputContext())  # the one share: all of it
        valid, keeper = task.validation(valid_pairs, source, target, batches, run.best_weights)
        if verbose:
            start = f"from {config.init_from}, " if base else ""
            size = f"{'about ' if pairs.approximate else ''}{pairs.estimated_pairs:,}"
            steps = f"{steps_per_epoch} step{'s' if steps_per_epoch != 1 else ''} an epoch"
            print(
                f"Training a {model.count_params():,}-parameter {task.noun} {start}on {size} {task.examples} "
                f"({steps}, {policy}{'' if uses_xla(config) else ' without XLA'}, "
                f"strategy {config.strategy}) ...",
                flush=True,
            )
        try:
            _, summary = _fit(model, schedule, train, valid, steps_per_epoch, run, config, verbose, keeper, callbacks)
        except tf.errors.OpError:
            if pairs.error:  # a bad line deep in a stream: the backup keeps the run so far
                raise DataError(f"{pairs.error} Fix it and run the same command again to resume.") from None
            raise
    if keeper is not None and keeper.best >= 0:
        summary["val_chrf_kept"] = keeper.best
    summary["pairs_left_out"] = left_out
    summary.update(task.results(model, target, valid_pairs, config))
    config_json = {"kind": task.kind, "max_length": config.max_length, "training": dataclasses.asdict(config)}
    trained = TrainedModel(model, source, target, {**config_json, "result": summary})
    if is_chief(config):
        run.finish(trained)
    return trained
