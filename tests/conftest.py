import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import functools  # noqa: E402
import hashlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import weakref  # noqa: E402
from pathlib import Path  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

if REPO.name == "mutants":  # run by mutmut (tox -e mutation), whose copy wraps each function in a trampoline
    import inspect  # noqa: E402

    # Keras reads a layer's __init__ arguments with getfullargspec, which does not see through the
    # trampoline's functools.wraps; inspect.signature does. Only the copy under test is affected.
    _argspec = inspect.getfullargspec
    inspect.getfullargspec = lambda function: _argspec(inspect.unwrap(function))


# CI (.ci/run) gives the slow tests a deadline, in seconds since the epoch: this machine runs the same tests up to
# twice as fast at one hour as at another, and CI must end inside its hour. A slow test not started by then is
# skipped before its fixtures, named in the summary (-ra) with why; the default tests always run.
SLOW_TESTS_UNTIL = "KFORMER_SLOW_TESTS_UNTIL"


def _slow_tests_until():
    value = os.environ.get(SLOW_TESTS_UNTIL)
    try:
        return None if value is None else int(value)
    except ValueError:
        raise pytest.UsageError(
            f"{SLOW_TESTS_UNTIL}={value!r}: give whole seconds since the epoch, as .ci/run does."
        ) from None


def pytest_configure(config):
    _slow_tests_until()  # a bad value: one sentence before any test, not an error in every slow test's setup


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    deadline = _slow_tests_until()
    if deadline is not None and item.get_closest_marker("slow") and time.time() > deadline:
        pytest.skip(f"{item.nodeid}: not started, past CI's time for the slow tests ({SLOW_TESTS_UNTIL})")


@pytest.fixture(autouse=True)
def _seeded():
    keras.utils.set_random_seed(1234)


def run_fresh_python(code, cwd):
    """Runs `code` in a new Python process (nothing imported, nothing cached)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO))
    if env.get("MUTANT_UNDER_TEST") == "stats":  # mutmut counting which tests call what: a child cannot report
        del env["MUTANT_UNDER_TEST"]
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"fresh process failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    return result.stdout


def count_decode_steps(decoder, monkeypatch):
    """A list that grows by one at each `decoder.decode_step` call (a cached decoding step) from now on."""
    steps, step = [], decoder.decode_step
    monkeypatch.setattr(decoder, "decode_step", lambda *args: steps.append(1) or step(*args))
    return steps


def recorder(monkeypatch, module, name, returns=None):
    """`module.name` replaced by a recorder of its calls, one (args, kwargs) each, returning `returns`: what the
    caller hands on, with the work itself (a training, an export) not done."""
    calls = []
    monkeypatch.setattr(module, name, lambda *args, **kwargs: calls.append((args, kwargs)) or returns)
    return calls


def to_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


_GRAPHS = weakref.WeakKeyDictionary()


def model_logits(model, encoder_tokens, decoder_tokens):
    """`model([encoder_tokens, decoder_tokens], training=False)` as NumPy, through one graph a model for every
    shape: the step-by-step references call the whole model dozens of times a test, and an eager call of it
    costs about 30 ms where the graph's costs 2. The model's own forward pass, with no decoding code in it."""
    if model not in _GRAPHS:
        held = weakref.ref(model)  # the graph holds the model weakly, so the dictionary forgets it with the model
        spec = tf.TensorSpec([None, None], tf.int32)
        _GRAPHS[model] = tf.function(lambda e, d: held()([e, d], training=False), input_signature=[spec, spec])
    return to_numpy(_GRAPHS[model](np.asarray(encoder_tokens, "int32"), np.asarray(decoder_tokens, "int32")))


def shifted_right(output):
    """The decoder's input that teacher-forces `output` (B, T): [START], then all but its last token."""
    from kformer.data.text import START_ID

    return np.concatenate([np.full((len(output), 1), START_ID), output[:, :-1]], 1).astype("int32")


def numpy_log_softmax(logits):
    """NumPy's float64 log-softmax over the last axis: the reference the searches' log-probabilities meet."""
    logits = np.asarray(logits, "float64")
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def teacher_forced_log_probs(model, sources, outputs):
    """log p of each output row `(B, T)` given its source ([END] included, the [PAD] after it left out): NumPy's
    float64 log-softmax of the model's teacher-forced logits, independent of the search that chose the tokens."""
    from kformer.data.text import END_ID, PAD_ID

    outputs = np.asarray(outputs)
    decoder_tokens = shifted_right(outputs)
    decoder_tokens[decoder_tokens == END_ID] = PAD_ID
    log_softmax = numpy_log_softmax(to_numpy(model([sources, decoder_tokens])))
    picked = np.take_along_axis(log_softmax, outputs[..., None].astype("int64"), -1)[..., 0]
    return np.where(outputs != PAD_ID, picked, 0.0).sum(1)


def tiny_seq2seq(vocab_size=20, d_model=16, num_heads=2, d_ff=32):
    """A one-layer encoder-decoder made of kformer layers, for save/convert tests."""
    import kformer

    encoder_tokens = keras.Input((None,), dtype="int32", name="encoder_tokens")
    decoder_tokens = keras.Input((None,), dtype="int32", name="decoder_tokens")
    source_padding = kformer.make_padding_mask(encoder_tokens)
    target_padding = kformer.make_padding_mask(decoder_tokens)
    context = kformer.PositionalEmbedding(vocab_size, d_model)(encoder_tokens)
    context = kformer.TransformerBlock(d_model, num_heads, d_ff)(context, padding_mask=source_padding)
    x = kformer.PositionalEmbedding(vocab_size, d_model)(decoder_tokens)
    x = kformer.TransformerBlock(d_model, num_heads, d_ff, causal=True, cross_attention=True)(
        x, context=context, padding_mask=target_padding, context_padding_mask=source_padding
    )
    logits = keras.layers.Dense(vocab_size, name="logits")(x)
    return keras.Model([encoder_tokens, decoder_tokens], logits)


TINY_BATCH = (
    np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 12]], dtype="int32"),
    np.array([[1, 5, 6, 0], [1, 9, 10, 11]], dtype="int32"),
)


VOCAB = ["[PAD]", "[UNK]", "[START]", "[END]"] + [chr(c) for c in range(ord("a"), ord("a") + 12)]


def copy_task_model():
    """A small model trained to copy sequences of letters "a".."l": its outputs are known.

    Trained once per test process; each call gets its own copy (tests train it on, ruin its weights).
    """
    import kformer
    from kformer.data.text import Tokenizer
    from kformer.training.objectives import compile_for_training

    model = kformer.build_transformer(len(VOCAB), len(VOCAB), **_COPY_TASK_SIZE)
    compile_for_training(model, 32, label_smoothing=0.0, warmup_steps=200)
    model.optimizer.build(model.trainable_variables)  # built, so that a saved model holds its variables
    model.set_weights(_copy_task_weights())
    keras.utils.set_random_seed(0)  # the same random state after the first call (which trains) as after the others
    return kformer.TrainedModel(model, Tokenizer(VOCAB), Tokenizer(VOCAB), {"max_length": 12})


def hesitant_model():
    """An untrained translator of the letters whose [END] is about as likely as a letter (its output bias):
    beam search's hypotheses end at different lengths, and the length penalty decides among them."""
    import kformer
    from kformer.data.text import END_ID

    keras.utils.set_random_seed(5)
    model = kformer.build_transformer(len(VOCAB), len(VOCAB), **_COPY_TASK_SIZE)
    model.get_layer("decoder").output_projection.bias.assign(np.eye(len(VOCAB), dtype="float32")[END_ID])
    return model


_COPY_TASK_SIZE = dict(d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0)


# A folder that every xdist worker of this test run shares (None when the run is one process).
_SHARED = {"folder": None}


@pytest.fixture(scope="session", autouse=True)
def _shared_folder(tmp_path_factory, worker_id):
    if worker_id != "master":  # pytest-xdist's recipe: the workers' base folders have one parent, this run's
        _SHARED["folder"] = tmp_path_factory.getbasetemp().parent


@functools.cache
def _copy_task_weights():
    """The copy task's weights, trained once a test run: the first worker that needs them trains and shares them."""
    import filelock

    if _SHARED["folder"] is not None:
        path = _SHARED["folder"] / "copy_task.npz"
    elif _training_runs_unmutated():  # named by the code that trains it: a change to it trains afresh
        code = b"".join(path.read_bytes() for path in sorted([*(REPO / "kformer").rglob("*.py"), Path(__file__)]))
        path = REPO / f"copy_task-{hashlib.sha256(code).hexdigest()[:16]}.npz"
    else:
        return _train_copy_task()
    with filelock.FileLock(f"{path}.lock"):
        if not path.is_file():
            np.savez(path, *_train_copy_task())
        with np.load(path) as saved:
            return [saved[f"arr_{i}"] for i in range(len(saved.files))]


# What `_train_copy_task` runs of kformer: the model and its layers, the loss, metric and schedule.
_COPY_TASK_CODE = ("kformer.layers.", "kformer.model.", "kformer.training.objectives.")


def _training_runs_unmutated():
    """True under mutmut in its clean run, or with a mutant of code the copy task's training never runs
    (the decoding loops, the data, evaluation, the CLI, ...).

    Then every mutant's worker loads the copy task's weights from mutmut's copy of the repository
    instead of training them again; a mutant of the layers, the model or the loss still trains its own.
    Not in mutmut's stats run, which must see training call the loss and the layers.
    """
    mutant = os.environ.get("MUTANT_UNDER_TEST")
    return REPO.name == "mutants" and mutant not in (None, "stats") and not mutant.startswith(_COPY_TASK_CODE)


def _train_copy_task():
    import kformer
    from kformer.data.text import END_ID, START_ID
    from kformer.training.objectives import compile_for_training

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    count = 12_000
    lengths = rng.integers(2, 8, size=count)
    source = np.zeros((count, 7), "int32")
    for row, length in enumerate(lengths):
        source[row, :length] = rng.integers(4, len(VOCAB), size=length)
    decoder_tokens = np.concatenate([np.full((count, 1), START_ID, "int32"), source], 1)
    labels = np.concatenate([source, np.zeros((count, 1), "int32")], 1)
    labels[np.arange(count), lengths] = END_ID
    model = kformer.build_transformer(len(VOCAB), len(VOCAB), **_COPY_TASK_SIZE)
    compile_for_training(model, 32, label_smoothing=0.0, warmup_steps=200)
    # Three epochs: one left it copying 88-95% of short test sequences, depending on float rounding.
    model.fit([source, decoder_tokens], labels, batch_size=32, epochs=3, verbose=0)
    return model.get_weights()


# Text that has broken translators: every entry point must give one translation each, or one clear error.
ODD_TEXTS = {
    "empty": "",
    "whitespace only": " \t  ",
    "10,000 characters": "a b c " * 1_667,
    "100,000 characters in 2,000 sentences": "a b c d e f g h i j k l a b c d e f g h i j k l?! " * 2_000,
    "one 10,000-letter word": "ab" * 5_000,
    "NUL bytes": "a\x00b\x00",
    "control characters": "\x1b[31mc\x07\x7f",
    "newline inside": "a b\nc d",
    "right-to-left (Arabic, Hebrew)": "مرحبا بالعالم שלום",
    "emoji with joiners and skin tones": "a 🐈‍⬛ b 👍🏽 👨‍👩‍👧",
    "combining marks": "a\u0301 e\u0308\u0323 n\u0303",
    "zero-width characters": "a\u200bb\u200c c\u200d\ufeff",
    "CJK without spaces": "我喜欢猫和狗",
    "replacement character": "\ufffd\ufffd",
    "several sentences, too long read whole": "a b c d e. F g h i j? k l a b c! ¿d e f g h?",
}


# A small translator of the built-in corpus, trained through `kformer train` with the default recipe (only the
# size is small): 400 steps learn the corpus, so it is a real model for the resilience and export tests.
EPOCHS, STEPS_PER_EPOCH = 5, 80
SMALL_RUN = [
    "--data", "builtin", "--d-model", "32", "--num-heads", "2", "--num-layers", "1", "--d-ff", "64",
    "--vocab-size", "300", "--warmup-steps", "100", "--steps-per-epoch", str(STEPS_PER_EPOCH),
]  # fmt: skip


# The same model and schedule as TrainingConfig settings, for the tests that call the training job directly.
SMALL_SETTINGS = dict(
    d_model=32, num_heads=2, num_layers=1, d_ff=64, source_vocab_size=300, target_vocab_size=300, warmup_steps=100
)


def train_command(out, *extra):
    return [sys.executable, "-m", "kformer", "--quiet", "train", "--out", str(out), *SMALL_RUN, *extra]


@pytest.fixture(scope="session")
def clean_run(tmp_path_factory):
    """An uninterrupted run of that command, in this process (kformer.cli.main): (model directory, what it printed)."""
    import contextlib
    import io

    from kformer.cli import main

    out = tmp_path_factory.mktemp("clean") / "model"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(train_command(out, "--epochs", str(EPOCHS), "--backup-steps", "20")[3:]) == 0
    return out, printed.getvalue()


def tensorboard_epoch_scalars(folder, steps=False):
    """{tag: its values in step order} of the `epoch_*` scalars in the TensorBoard event files in `folder`
    ({tag: {step: value}} with `steps`)."""
    import tensorflow as tf

    values = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag.startswith("epoch_"):
                    values.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    if steps:
        return values
    return {tag: [by_step[step] for step in sorted(by_step)] for tag, by_step in values.items()}
