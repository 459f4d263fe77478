"""The `kformer` command line."""

import argparse
import csv
import dataclasses
import io
import json
import math
import os
import re
import subprocess
import sys
import warnings
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REPO, recorder, tensorboard_epoch_scalars

from kformer.cli import (
    _config,
    _leaks,
    _load_pairs,
    _non_negative_float,
    _non_negative_int,
    _stdin_batches,
    build_parser,
    main,
)
from kformer.training.config import ARCHITECTURE, TrainingConfig


def test_walkthrough_prints_the_seeds_numbers(capsys):
    assert main(["walkthrough"]) == 0
    out = capsys.readouterr().out
    assert "+0.0702  +0.7070  +0.2228" in out  # seed 000, Bumrah's weights
    assert "+1.000   +1.365   +0.701" in out  # seed 000, "it"'s output
    assert "+0.26    +0.20    +0.37    +0.18" in out  # seed 003, Part 3, "black"


def _table_after(title, text):  # the rows of numbers printed under `title`
    lines = text.split(title, 1)[1].strip("\n").split("\n\n", 1)[0].splitlines()
    return [[float(number) for number in line.split()[1:]] for line in lines]


def test_walkthrough_numbers_are_computed_by_the_layers(capsys, monkeypatch):
    """Double what kformer's attention layer returns, and the printed outputs double: nothing is hard-coded."""
    from kformer.layers import MultiHeadSelfAttention

    assert main(["walkthrough"]) == 0
    before = _table_after("output = weights V", capsys.readouterr().out)
    call = MultiHeadSelfAttention.call

    def doubled(self, *args, **kwargs):
        result = call(self, *args, **kwargs)
        if isinstance(result, tuple):  # (output, weights), with return_attention_scores
            return (2 * result[0], *result[1:])
        return 2 * result

    monkeypatch.setattr(MultiHeadSelfAttention, "call", doubled)
    assert main(["walkthrough"]) == 0
    after = _table_after("output = weights V", capsys.readouterr().out)
    assert len(before) == 3
    np.testing.assert_allclose(after, 2 * np.array(before), atol=0.0015)


def test_the_command_hides_tensorflows_start_up_notes_unless_asked(tmp_path):
    """A fresh `kformer` process: its error is its only stderr line. TF_CPP_MIN_LOG_LEVEL=0 lets the notes through."""
    argv = [sys.executable, "-m", "kformer", "translate", "--model", "nowhere", "hello"]
    stderr = {}
    for level in (None, "0"):
        env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"} | {"PYTHONPATH": str(REPO)}
        env |= {"TF_CPP_MIN_LOG_LEVEL": level} if level else {}
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 2
        stderr[level] = done.stderr.strip().splitlines()
    assert stderr[None] == [
        "kformer translate: error: nowhere: no such model directory; train one with `kformer train`."
    ], stderr[None]
    assert len(stderr["0"]) > 1 and stderr["0"][-1] == stderr[None][0]  # the notes this machine's TensorFlow prints


def test_unknown_command_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_docs_cli_md_is_each_commands_help(capsys, monkeypatch):
    """docs/cli.md, the command reference, is what `kformer CMD --help` prints (wrapping aside): every flag,
    default and help text, so none changes without the page (and a broken help text fails here)."""
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("PYTHON_COLORS", "0")  # Python 3.14 colours help when asked to
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^## `kformer( \w+)?`\n\n```text\n(.*?)```", page, re.MULTILINE | re.DOTALL)
    listed = re.findall(r"^    (\w+)", blocks[0][1], re.MULTILINE)  # the commands `kformer --help` lists
    assert [command for command, _ in blocks] == ["", *(f" {name}" for name in listed)]  # a section each
    for command, documented in blocks:
        with pytest.raises(SystemExit) as exit_info:
            main([*command.split(), "--help"])
        printed = capsys.readouterr().out
        assert exit_info.value.code == 0
        assert " ".join(documented.split()) == " ".join(printed.split()), f"docs/cli.md: `kformer{command}`:\n{printed}"


TINY = "--d-model 16 --num-heads 2 --num-layers 1 --d-ff 32 --vocab-size 60 --max-length 8"  # trains in seconds


def _write_letter_pairs(path, sources="abcdefgh", targets="ijklmnop", copies=1):
    """Writes "a i<TAB>i a" lines, each source letter with each target letter, `copies` times; returns the lines."""
    lines = [f"{a} {b}\t{b} {a}" for a in sources for b in targets] * copies
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


@pytest.mark.slow  # 25 s: trains, evaluates and translates
def test_train_evaluate_translate_on_a_pair_file(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    lines = _write_letter_pairs(data, "abcdefghijkl", "mnopqrstuvwx", copies=2)  # a few held out
    out = tmp_path / "model"
    argv = f"train --data {data} --out {out} --epochs 2 --steps-per-epoch 4 --warmup-steps 10 --no-xla {TINY}"
    argv += " --batch-size 16"
    assert main(argv.split()) == 0
    assert "Saved the model directory" in capsys.readouterr().out
    assert (out / "learning_curves.png").stat().st_size > 0
    with open(out / "training" / "history.csv", newline="") as file:
        epochs = list(csv.DictReader(file))
    assert len(epochs) == 2
    # TensorBoard holds each epoch's scalars too, though 4 steps an epoch is no multiple of its update_freq.
    train, valid = (tensorboard_epoch_scalars(out / "training" / "logs" / side) for side in ("train", "validation"))
    for events, tag, column in (
        (train, "epoch_loss", "loss"),
        (valid, "epoch_chrf", "val_chrf"),
        (valid, "epoch_bleu", "val_bleu"),
        (valid, "epoch_loss", "val_loss"),
    ):
        assert events[tag] == pytest.approx([float(epoch[column]) for epoch in epochs], rel=1e-6), tag

    assert main(["evaluate", "--model", str(out), "--data", str(data), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert {"bleu", "chrf", "exact_match", "n"} <= scores.keys() and scores["n"] == len(lines)

    assert main(["translate", "--model", str(out), "--beam", "3", "a i", "b j"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2

    assert main(["attention", "--model", str(out), "a i", "--out", str(tmp_path / "attention.png")]) == 0
    assert (tmp_path / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_batch_tokens_and_the_papers_schedule_reach_the_training_itself(tmp_path, capsys, monkeypatch):
    """The flags reach the config (below); these two reach what trains: batches of `--batch-tokens` padded
    tokens, and the optimizer of the saved model on the paper's schedule."""
    import kformer.training.jobs

    sizes = []  # of the first batch of each training dataset the job makes (validation's: kformer.training.tasks)

    def make_dataset(*args, **kwargs):
        dataset = original(*args, **kwargs)
        sizes.append(int(next(iter(dataset))[1].shape[0]))
        return dataset

    original = kformer.training.jobs.make_dataset
    monkeypatch.setattr(kformer.training.jobs, "make_dataset", make_dataset)
    data = tmp_path / "pairs.tsv"
    _write_letter_pairs(data)
    out = tmp_path / "model"
    argv = f"train --data {data} --out {out} --epochs 1 --batch-tokens 64 --schedule noam --warmup-steps 10 {TINY}"
    argv += " --no-xla"
    assert main(argv.split()) == 0
    pairs, steps = re.search(r"on ([\d,]+) pairs \((\d+) steps an epoch", capsys.readouterr().out).groups()
    # Every pair is 2 letters a side, one token each, 3 with [START] or [END]: all in the first bucket, 8
    # tokens wide, so 64 // 8 = 8 pairs a batch (the default --batch-size would take 64), and so counted.
    assert sizes[0] == 8 and int(steps) == math.ceil(int(pairs.replace(",", "")) / 8) > 2
    with zipfile.ZipFile(out / "model.keras") as saved:
        compiled = json.loads(saved.read("config.json"))["compile_config"]
    schedule = compiled["optimizer"]["config"]["learning_rate"]
    assert (schedule["class_name"], schedule["config"]) == (
        "TransformerSchedule",
        {"d_model": 16, "warmup_steps": 10, "scale": 1.0},
    )


class _Stop(Exception):
    """Raised by a spy to end a `kformer train` run once it has seen what the test wants."""


def test_train_data_reads_txt_zip_and_aligned_files_splits_2_2_and_learns_from_the_training_split(
    tmp_path, monkeypatch
):
    """`--data` as .txt, .zip and two aligned files gives the job the same splits: 2% validation and 2% test,
    by source sentence (a source's two translations stay together), together the file's pairs; and the
    vocabularies are learned from the training split alone. The run is stopped where the learning would start."""
    import kformer.training.jobs as jobs
    import kformer.training.tasks as tasks

    words = "casa perro gato sol luna mar pan agua".split()
    sources = [f"{words[i % 8]} {i}" for i in range(2500)]
    # Each source twice, with two translations 2,500 lines apart: a split by pair would part them.
    pairs = [(source, f"{words[i // 8 % 8]} {i}") for i, source in enumerate(sources)]
    pairs += [(source, f"{words[i // 64 % 8]} {i} bis") for i, source in enumerate(sources)]
    (tmp_path / "pairs.txt").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    with zipfile.ZipFile(tmp_path / "pairs.zip", "w") as archive:
        archive.write(tmp_path / "pairs.txt", "pairs.txt")
    (tmp_path / "a.en").write_text("".join(f"{s}\n" for s, _ in pairs), encoding="utf-8")
    (tmp_path / "a.es").write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")

    seen = {}

    def train_translator(splits, *args, **kwargs):
        seen["splits"] = {name: list(split) for name, split in splits.items()}
        return original(splits, *args, **kwargs)

    def build_vocabularies(wanted):
        seen["learned from"] = [sentences for sentences, _ in wanted]
        raise _Stop

    original = jobs.train_translator
    monkeypatch.setattr(jobs, "train_translator", train_translator)
    monkeypatch.setattr(tasks, "build_vocabularies", build_vocabularies)
    splits_of = {}
    for data in ("pairs.txt", "pairs.zip", "a.en,a.es"):
        seen.clear()
        files = ",".join(str(tmp_path / name) for name in data.split(","))
        with pytest.raises(_Stop):
            main(["--quiet", "train", "--data", files, "--out", str(tmp_path / ("out-" + data.replace(",", "-")))])
        splits = splits_of[data] = seen["splits"]
        train = splits["train"]
        assert seen["learned from"] == [[s for s, _ in train], [t for _, t in train]]
        assert sorted(train + splits["valid"] + splits["test"]) == sorted(pairs)
        for held_out in ("valid", "test"):
            assert abs(len(splits[held_out]) / len(pairs) - 0.02) < 0.012  # 4 standard errors at 2,500 sources
            held_out_sources = [s for s, _ in splits[held_out]]
            assert not set(held_out_sources) & {s for s, _ in train}
            assert all(held_out_sources.count(source) == 2 for source in held_out_sources)  # both translations
    assert splits_of["pairs.txt"] == splits_of["pairs.zip"] == splits_of["a.en,a.es"]


@pytest.mark.parametrize("strategy", ["default", "mirrored"])
def test_strategy_flag_builds_the_model_that_trains_under_that_strategy(strategy, tmp_path, monkeypatch):
    """`--strategy mirrored` reaches the model `model.fit` trains (its variables mirrored across this machine's
    devices); the default does not. Stopped where the fit would start."""
    import tensorflow as tf

    import kformer.training.jobs as jobs

    built_under = []

    def fit(model, *args, **kwargs):
        built_under.append((model.distribute_strategy, model.weights[0]))
        raise _Stop

    monkeypatch.setattr(jobs, "_fit", fit)
    _write_letter_pairs(tmp_path / "pairs.tsv")
    argv = f"--quiet train --data {tmp_path / 'pairs.tsv'} --out {tmp_path / 'model'} --strategy {strategy} {TINY}"
    with pytest.raises(_Stop):
        main(argv.split())
    (used, weight), mirrored = built_under[0], strategy == "mirrored"
    assert isinstance(used, tf.distribute.MirroredStrategy) == mirrored
    assert isinstance(weight.value, tf.distribute.DistributedValues) == mirrored


@pytest.mark.slow
def test_demo_runs_end_to_end_on_a_tiny_budget(tmp_path, capsys, monkeypatch):
    """Without --out: the model directory kformer-demo/ with its learning curves, the test split's BLEU and
    exact match, and a translation of each seed sentence."""
    from kformer.data.corpus import SEED_SENTENCES

    monkeypatch.chdir(tmp_path)
    assert main(["--quiet", "demo", "--minutes", "0.02"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"held-out test: BLEU [\d.]+ +chrF [\d.]+ +exact match [\d.]+%", out), out
    assert all(f"  {sentence}  ->  " in out for sentence in SEED_SENTENCES)
    assert "the black cat sleeps" in SEED_SENTENCES
    assert (tmp_path / "kformer-demo" / "config.json").is_file()
    assert (tmp_path / "kformer-demo" / "learning_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--data", "missing.tsv", "--out", "x"], "kformer train: error: missing.tsv: no such file"),
        (["evaluate", "--model", "nowhere", "--data", "builtin"], "nowhere: no such model directory"),
        (["translate", "--model", "nowhere", "hi"], "nowhere: no such model directory"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_train_a_decoder_only_language_model_on_plain_text(tmp_path, capsys):
    text = tmp_path / "corpus.txt"
    text.write_text(
        "\n".join(f"the {a} sees the {b}" for a in ("cat", "dog", "bird") for b in ("tree", "house")) + "\n"
    )
    argv = f"train --task lm --data {text} --out {tmp_path / 'lm'} --epochs 1 --steps-per-epoch 3 --no-xla"
    argv += " --d-model 16 --num-heads 2 --num-layers 1 --d-ff 32 --vocab-size 50 --warmup-steps 10"
    assert main(argv.split()) == 0
    assert "No line held out to measure perplexity on" in capsys.readouterr().out  # six lines: none hashed out
    config = json.loads((tmp_path / "lm" / "config.json").read_text())
    assert config["kind"] == "language_model" and config["result"]["steps"] == 3


@pytest.mark.slow  # 14 s: trains twice
def test_training_twice_into_one_directory_refuses_then_overwrites(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    _write_letter_pairs(data)
    out = tmp_path / "model"
    argv = f"train --data {data} --out {out} --epochs 2 --steps-per-epoch 3 --warmup-steps 10 --no-xla {TINY}"
    argv = (argv + " --batch-size 16").split()
    assert main(argv) == 0
    before = (out / "model.keras").stat().st_mtime_ns
    capsys.readouterr()
    assert main(argv) == 2
    assert "already holds a trained model" in capsys.readouterr().err
    assert (out / "model.keras").stat().st_mtime_ns == before  # untouched
    assert main(argv + ["--overwrite"]) == 0
    assert (out / "training" / "history.csv").read_text().count("\n") == 3  # a header and one row per epoch


# A value unlike each default, per setting type; the two vocabulary sizes and jit_compile have flags of their own.
FLAG_VALUES = {int: ("3", 3), float: ("0.5", 0.5), bool: (None, True)}
CHOICES = {"schedule": ("noam", "noam"), "strategy": ("mirrored", "mirrored"), "init_from": ("base", "base")}


FLAGGED = [field for field in dataclasses.fields(TrainingConfig) if field.metadata["flag"]]


@pytest.mark.parametrize("field", FLAGGED, ids=lambda field: field.name)
def test_every_training_setting_is_a_flag_that_reaches_the_config(field):
    if field.name in CHOICES:
        text, value = CHOICES[field.name]
    else:  # int, float, bool, or one of them | None
        typed = field.type if field.type in FLAG_VALUES else next(t for t in field.type.__args__ if t is not type(None))
        text, value = FLAG_VALUES[typed]
    flag = ["--" + field.name.replace("_", "-")] + ([text] if text is not None else [])
    args = build_parser().parse_args(["train", "--data", "builtin", "--out", "x", *flag])
    overrides = {"d_model": 6, "num_heads": 3} if field.name in ("d_model", "num_heads") else {}  # heads divide D
    config = _config(args, **overrides)
    assert getattr(config, field.name) == value != field.default


def test_vocab_size_and_no_xla_set_their_settings():
    args = build_parser().parse_args(["train", "--data", "builtin", "--out", "x", "--vocab-size", "300", "--no-xla"])
    config = _config(args)
    assert (config.source_vocab_size, config.target_vocab_size, config.jit_compile) == (300, 300, False)
    assert set(ARCHITECTURE) <= {field.name for field in FLAGGED}


def test_kformer_train_and_the_translator_default_to_what_the_readme_states():
    """README: label smoothing 0.1, dropout 0.1, d_model 256, 2+2 layers, 8 heads, batches of 64 sentences,
    a backup every 500 steps; the Translator decodes under XLA, beam search with GNMT's alpha 0.6."""
    import inspect

    from kformer import Translator

    config = _config(build_parser().parse_args(["train", "--data", "builtin", "--out", "x"]))
    assert (config.d_model, config.num_layers, config.num_heads, config.dropout) == (256, 2, 8, 0.1)
    assert (config.label_smoothing, config.batch_size, config.backup_steps) == (0.1, 64, 500)
    defaults = inspect.signature(Translator).parameters
    assert (defaults["length_penalty"].default, defaults["xla"].default) == (0.6, True)


def test_kformer_export_hands_every_flag_to_export(monkeypatch):
    import kformer.deploy.export

    calls = recorder(monkeypatch, kformer.deploy.export, "export")
    argv = (
        "export --model m --out o --formats saved_model,,onnx --quantize int8,float16 --name ende --version 3 --beam 4"
    )
    assert main([*argv.split(), "--length-penalty", "0.2", "--max-tokens", "9", "--xla"]) == 0
    assert main("export --model m --out o".split()) == 0
    assert calls == [
        (("m", "o"), dict(formats=["saved_model", "onnx"], quantize=["int8", "float16"], name="ende", version=3,
                          beam_size=4, length_penalty=0.2, max_new_tokens=9, xla=True)),
        (("m", "o"), dict(formats=["saved_model", "tflite", "onnx", "ctranslate2"], quantize=[], name="kformer",
                          version=1, beam_size=1, length_penalty=None, max_new_tokens=50, xla=False)),
    ]  # fmt: skip


def test_kformer_demo_trains_the_demo_recipe_over_its_last_run_and_shows_the_seed_sentences(
    tmp_path, monkeypatch, capsys
):
    """The training and the scoring recorded, not run (the end-to-end run is slow, above)."""
    import kformer.inference.translator
    import kformer.training.evaluation
    import kformer.training.jobs
    from kformer.cli import DEMO_CONFIG
    from kformer.data.corpus import SEED_SENTENCES, builtin_splits

    trained = SimpleNamespace(config={"result": {"steps": 1234, "seconds": 95.4}})
    scores = dict(bleu=40.04, chrf=60.0, exact_match=12.5, n=1000, seconds=3.2)
    trainings = recorder(monkeypatch, kformer.training.jobs, "train_translator", returns=trained)
    evaluations = recorder(monkeypatch, kformer.training.evaluation, "evaluate", returns=scores)

    def translator(given):
        assert given is trained
        return SimpleNamespace(translate=lambda sentences: [f"<{sentence}>" for sentence in sentences])

    monkeypatch.setattr(kformer.inference.translator, "Translator", translator)
    assert main(["--quiet", "demo", "--out", str(tmp_path / "d"), "--minutes", "0.5"]) == 0
    splits = builtin_splits()
    [((given_splits, out, config, verbose), settings)] = trainings
    assert (given_splits, out, verbose, settings) == (splits, str(tmp_path / "d"), 0, {"overwrite": True})
    assert config == TrainingConfig(minutes=0.5, **DEMO_CONFIG)
    assert evaluations == [((trained, splits["test"]), {})]
    assert capsys.readouterr().out == "\n".join(
        [
            "Built-in English->Spanish corpus: 20,000 training pairs, 1,000 compositional test pairs (adjective-noun "
            "pairs never seen in training).",
            "Trained 1,234 steps in 95 s.",
            "held-out test: BLEU 40.0  chrF 60.0  exact match 12.5%  (1,000 sentences, 3 s)",
            *(f"  {sentence}  ->  <{sentence}>" for sentence in SEED_SENTENCES),
            f"Saved the model directory to {tmp_path / 'd'}/ (learning curves: {tmp_path / 'd'}/learning_curves.png).",
            "",
        ]
    )
    assert SEED_SENTENCES[0] == "the black cat sleeps"  # seed 003's, as the README says
    assert main(["--quiet", "demo"]) == 0
    assert trainings[1][0][1] == "kformer-demo" and trainings[1][0][2].minutes == 2.6


def test_kformer_train_task_lm_hands_its_text_and_held_out_lines_on_and_reports_perplexity(
    tmp_path, monkeypatch, capsys
):
    """One line in fifty held out by its hash (`split_of`'s rule); the job recorded, not run."""
    import kformer.training.jobs
    from kformer.data.corpus import builtin_splits
    from kformer.data.pairs import split_of

    scored = SimpleNamespace(config={"result": {"val_perplexity": 12.345, "loss": 2.5}})
    calls = recorder(monkeypatch, kformer.training.jobs, "train_language_model", scored)
    text, out = tmp_path / "text.txt", tmp_path / "lm"
    lines = [f"line {i}" for i in range(300)]
    text.write_text("\n".join(lines) + "\n")
    assert main(["--quiet", "train", "--task", "lm", "--data", str(text), "--out", str(out), "--epochs", "3"]) == 0
    [((given, given_out, config, verbose, overwrite, valid), _)] = calls
    held = [line for line in lines if split_of(line, test_fraction=0.0) == "valid"]
    assert (valid, given) == (held, [line for line in lines if line not in held]) and 0 < len(held) < 20
    assert (given_out, config.epochs, verbose, overwrite) == (str(out), 3, 0, False)
    assert capsys.readouterr().out == (
        f"Perplexity on {len(held)} held-out lines: 12.3.\n"
        f'Saved the language model to {out}/ (try: kformer generate --model {out} "el gato").\n'
    )
    unscored = SimpleNamespace(config={"result": {"loss": 2.5}})  # no line hashed out: the training loss instead
    calls = recorder(monkeypatch, kformer.training.jobs, "train_language_model", unscored)
    assert main(["--quiet", "train", "--task", "lm", "--data", "builtin", "--out", str(out), "--overwrite"]) == 0
    [((given, _, _, _, overwrite, valid), _)] = calls
    splits = builtin_splits()
    assert (given, valid, overwrite) == ([t for _, t in splits["train"]], [t for _, t in splits["valid"]], True)
    assert (
        "No line held out to measure perplexity on (one in fifty is); training loss 2.500.\n" in capsys.readouterr().out
    )


def test_kformer_train_scores_the_test_split_and_a_cluster_worker_leaves_saving_to_the_chief(
    tmp_path, monkeypatch, capsys
):
    import kformer.training.evaluation
    import kformer.training.jobs
    from kformer.data.corpus import builtin_splits

    trained = SimpleNamespace(config={"result": {}})
    trainings = recorder(monkeypatch, kformer.training.jobs, "train_translator", trained)
    recorder(monkeypatch, kformer.training.jobs, "train_language_model", trained)
    by_length = [dict(words="1-10", n=600, bleu=35.04, chrf=55.0, length=0.98), dict(words="11-", n=1400, bleu=28.0,
                 chrf=48.25, length=1.021)]  # fmt: skip
    scores = dict(bleu=30.0, chrf=50.0, exact_match=1.0, n=2000, seconds=2.0, by_length=by_length)
    evaluations = recorder(monkeypatch, kformer.training.evaluation, "evaluate", scores)
    out = tmp_path / "m"
    assert main(["--quiet", "train", "--data", "builtin", "--out", str(out), "--batch-size", "8"]) == 0
    splits = builtin_splits()
    [((given, given_out, config, verbose, overwrite), _)] = trainings
    assert (given, given_out, config.batch_size, verbose, overwrite) == (splits, str(out), 8, 0, False)
    assert evaluations == [((trained, splits["test"]), {"xla": True})]
    assert capsys.readouterr().out == (
        "test split: BLEU 30.0  chrF 50.0  exact match 1.0%  (2,000 sentences, 2 s)\n"
        "  source words  sentences   BLEU   chrF  length (words, output over reference)\n"
        "          1-10        600   35.0   55.0    0.98\n"
        "           11-      1,400   28.0   48.2    1.02\n"
        f"Saved the model directory to {out}/.\n"
    )
    del by_length[1:]  # one length bucket: no table; --no-xla: the test split decoded without XLA too
    assert main(["--quiet", "train", "--data", "builtin", "--out", str(out), "--no-xla"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"Saved the model directory to {out}/."
    assert evaluations[1] == ((trained, splits["test"]), {"xla": False})
    cluster = {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    for task, saved in (("translate", "model directory"), ("lm", "language model")):
        argv = ["--quiet", "train", "--task", task, "--data", "builtin", "--out", str(out), "--strategy", "multiworker"]
        assert main(argv) == 0
        said = f"Done: this worker's part of the training; the chief saves the {saved} to {out}/.\n"
        assert capsys.readouterr().out == said
    assert len(evaluations) == 2  # the chief scores


def _record_training_and_scoring(monkeypatch):
    """`kformer train`'s training and its test split's scoring recorded, not run: the list of the trainings' calls."""
    import kformer.training.evaluation
    import kformer.training.jobs

    scores = dict(bleu=0.0, chrf=0.0, exact_match=0.0, n=1, seconds=0.0)
    recorder(monkeypatch, kformer.training.evaluation, "evaluate", scores)
    return recorder(monkeypatch, kformer.training.jobs, "train_translator", SimpleNamespace(config={"result": {}}))


def test_kformer_train_held_out_caps_the_carved_validation_and_test_splits(tmp_path, monkeypatch, capsys):
    trainings = _record_training_and_scoring(monkeypatch)
    corpus = tmp_path / "corpus.tsv"
    _write_letter_pairs(corpus, "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz")  # 676 pairs
    argv = ["--quiet", "train", "--data", str(corpus), "--out", str(tmp_path / "m")]
    assert main(argv) == 0 and main([*argv, "--held-out", "3"]) == 0
    (default, _), (capped, _) = trainings
    assert len(default[0]["valid"]) > 3 and len(default[0]["test"]) > 3  # 2% of 676 each, under the default cap
    assert (capped[0]["valid"], capped[0]["test"]) == (default[0]["valid"][:3], default[0]["test"][:3])
    for bad in ("0", "x"):
        with pytest.raises(SystemExit):
            main([*argv, "--held-out", bad])
        assert "argument --held-out: " in capsys.readouterr().err


def test_kformer_without_a_command_is_a_usage_error_that_names_what_is_missing(capsys):
    with pytest.raises(SystemExit) as exit:
        main([])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kformer ")
    assert err.endswith("kformer: error: the following arguments are required: COMMAND\n")


@pytest.mark.parametrize("terminal, verbose", [(True, 1), (False, 2)])
def test_kformer_train_shows_a_live_bar_on_a_terminal_and_a_line_an_epoch_in_logs(
    tmp_path, monkeypatch, capsys, terminal, verbose
):
    """Without --quiet, the verbosity handed to the training is Keras' live bar (1) when standard output is a
    terminal and its line an epoch (2) when it is a file or a pipe, as --quiet's help says; --quiet gives 0."""
    trainings = _record_training_and_scoring(monkeypatch)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: terminal)
    argv = ["train", "--data", "builtin", "--out", str(tmp_path / "m")]
    assert main(argv) == 0 and main(["--quiet", *argv]) == 0
    assert [verbose_given for (_, _, _, verbose_given, _), _ in trainings] == [verbose, 0]


def test_kformer_train_quiet_reads_its_corpus_without_a_word(tmp_path, monkeypatch, capsys):
    """--quiet reaches the reading of --data: read whole (its count of pairs) or as a stream (its start)."""
    import kformer.data.stream
    import kformer.training.jobs

    trainings = recorder(monkeypatch, kformer.training.jobs, "train_translator", SimpleNamespace(config={"result": {}}))
    corpus = tmp_path / "corpus.tsv"
    _write_letter_pairs(corpus, "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz")  # 676 pairs
    argv = ["train", "--data", str(corpus), "--out", str(tmp_path / "m"), "--valid", str(tmp_path / "none.tsv")]
    for said in (f"Read 676 pairs from {corpus} (", f"{corpus}: 0 MB, read as a stream. Reading its start: "):
        assert main(argv) == 2  # --valid is missing: refused after --data is read
        assert capsys.readouterr().out.startswith(said)
        assert main(["--quiet", *argv]) == 2
        assert capsys.readouterr().out == ""
        monkeypatch.setattr(kformer.data.stream, "STREAM_ABOVE_BYTES", 1000)  # then as a stream
    assert trainings == []


class RecordedTranslator:
    """`Translator` as `kformer translate` uses it, recorded: what it was made with and asked, and for each
    sentence s its hypotheses s0, s1, ... scored -1.00004, -2.00004, ... (-1.0000, ... to 4 places), aligned "0-0".
    `fails` and `warns`: {a batch's first sentence: the error it raises, or the warning it gives}."""

    made, asked, fails, warns = [], [], {}, {}

    def __init__(self, trained, **settings):
        RecordedTranslator.made.append(settings)

    def translate(self, sentences, batch_size, prefix=None, **options):
        RecordedTranslator.asked.append(dict(sentences=sentences, batch_size=batch_size, prefix=prefix, **options))
        if sentences[0] in RecordedTranslator.fails:
            raise RecordedTranslator.fails[sentences[0]]
        if sentences[0] in RecordedTranslator.warns:
            warnings.warn(RecordedTranslator.warns[sentences[0]], stacklevel=2)

        def hypothesis(sentence, k):
            found = (f"{sentence}{k}", -1.00004 - k) if options.get("with_scores") else (f"{sentence}{k}",)
            found += ("0-0",) if options["with_alignments"] else ()
            return found if len(found) > 1 else found[0]

        n_best = options.get("n_best", 1)
        return [[hypothesis(s, k) for k in range(n_best)] if n_best > 1 else hypothesis(s, 0) for s in sentences]


@pytest.fixture
def recorded_translator(monkeypatch):
    import kformer.cli
    import kformer.inference.translator

    monkeypatch.setattr(kformer.inference.translator, "Translator", RecordedTranslator)
    vocabulary = SimpleNamespace(target_tokenizer=SimpleNamespace(vocab_size=50))
    monkeypatch.setattr(kformer.cli, "_load_translator", lambda path: vocabulary)
    for name, value in dict(made=[], asked=[], fails={}, warns={}).items():
        monkeypatch.setattr(RecordedTranslator, name, value)
    return RecordedTranslator


def translated(capsys, *argv):
    assert main(["translate", "--model", "m", *argv]) == 0
    return capsys.readouterr().out


def test_kformer_translate_hands_its_flags_to_the_translator_and_prints_each_format(
    recorded_translator, monkeypatch, capsys
):
    made, asked = recorded_translator.made, recorded_translator.asked
    assert translated(capsys, "--beam", "3", "--n-best", "2", "--scores", "a", "b") == (
        "0\t-1.0000\ta0\n0\t-2.0000\ta1\n1\t-1.0000\tb0\n1\t-2.0000\tb1\n"
    )
    defaults = dict(length_penalty=0.6, max_output_ratio=2.0, no_repeat_ngram=0, temperature=0.0, top_k=0, top_p=1.0)
    assert made[-1] == dict(beam_size=3, **defaults, seed=0)
    assert asked[-1] == dict(sentences=["a", "b"], batch_size=64, prefix=None, n_best=2, with_scores=True,
                             with_alignments=False)  # fmt: skip
    flags = "--json --alignments --length-penalty 1 --max-output-ratio 3 --no-repeat-ngram 2 --temperature 0.5"
    flags += " --top-k 5 --top-p 0.9 --seed 7 --batch-size 8 --prefix"
    out = translated(capsys, *flags.split(), "el", "á")
    assert json.loads(out) == {"index": 0, "source": "á", "hypotheses": [{"translation": "á0", "score": -1.0,
                                                                          "alignment": "0-0"}]}  # fmt: skip
    assert '"á"' in out and '"score": -1.0,' in out  # not escaped; rounded to 4 places, a float
    assert made[-1] == dict(beam_size=1, length_penalty=1.0, max_output_ratio=3.0, no_repeat_ngram=2,
                            temperature=0.5, top_k=5, top_p=0.9, seed=7)  # fmt: skip
    assert asked[-1] == dict(sentences=["á"], batch_size=8, prefix=["el"], n_best=1, with_scores=True,
                             with_alignments=True)  # fmt: skip
    assert translated(capsys, "--alignments", "a", "b") == "a0 ||| 0-0\nb0 ||| 0-0\n"
    assert asked[-1] == dict(sentences=["a", "b"], batch_size=64, prefix=None, with_alignments=True)
    assert translated(capsys, "--scores", "--alignments", "a") == "-1.0000\ta0 ||| 0-0\n"
    assert json.loads(translated(capsys, "--json", "a")) == {"index": 0, "source": "a", "hypotheses": [
        {"translation": "a0", "score": -1.0}]}  # fmt: skip
    assert translated(capsys, "a") == "a0\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO("x\ny\nz\nw\nv\n"))  # batches of --batch-size, counted on
    assert translated(capsys, "--beam", "2", "--n-best", "2", "--batch-size", "2") == (
        "0\tx0\n0\tx1\n1\ty0\n1\ty1\n2\tz0\n2\tz1\n3\tw0\n3\tw1\n4\tv0\n4\tv1\n"
    )
    assert [ask["sentences"] for ask in asked[-3:]] == [["x", "y"], ["z", "w"], ["v"]]


def test_kformer_translate_flushes_each_translation_as_it_prints_it(recorded_translator, monkeypatch):
    """A program reading `kformer translate`'s output through a pipe gets each line when it is done."""

    class Flushes(io.StringIO):
        def __init__(self):
            super().__init__()
            self.flushed, self.pending = [], ""

        def write(self, text):
            self.pending += text
            return super().write(text)

        def flush(self):
            self.flushed.append(self.pending)
            self.pending = ""

    for argv, lines in ((["a", "b"], ["a0\n", "b0\n"]), (["--scores", "a"], ["-1.0000\ta0\n"])):
        monkeypatch.setattr(sys, "stdout", Flushes())
        assert main(["translate", "--model", "m", *argv]) == 0
        assert [text for text in sys.stdout.flushed if text] == lines


def test_kformer_translate_names_the_argument_or_stdin_line_of_a_refusal_or_a_cut_translation(
    recorded_translator, monkeypatch, capsys
):
    import linecache

    from kformer.inference.translator import OutputLimitWarning, SentenceTooLong

    recorded_translator.fails = {"a": SentenceTooLong(1, 30, 24)}
    assert main(["translate", "--model", "m", "--n-best", "1", "--scores", "a", "b"]) == 2
    assert capsys.readouterr().err == (
        "kformer translate: error: argument 2 has 30 tokens, more than max_length (24); --n-best, --scores, --json, "
        "--prefix and --alignments read each sentence whole: split it, or translate it without them (then it is read "
        "in pieces).\n"
    )
    recorded_translator.fails = {"z": SentenceTooLong(1, 30, 24)}  # the second batch's second: counted on
    monkeypatch.setattr(sys, "stdin", io.StringIO("x\ny\nz\nw\n"))
    assert main(["translate", "--model", "m", "--scores", "--batch-size", "2"]) == 2
    assert capsys.readouterr().err.startswith("kformer translate: error: stdin line 4 has 30 tokens, ")
    recorded_translator.fails = {"a": ValueError("prefix 0 ('ñ') has no tokens; give target text, or no prefix.")}
    assert main(["translate", "--model", "m", "--prefix", "ñ", "a"]) == 2
    assert capsys.readouterr().err == (
        "kformer translate: error: --prefix 'ñ': prefix 0 ('ñ') has no tokens; give target text, or no prefix.\n"
    )
    recorded_translator.fails = {}
    settings = SimpleNamespace(max_output_ratio=2.0, max_length=24)
    recorded_translator.warns = {"x": OutputLimitWarning([1], settings), "v": OutputLimitWarning([0], settings)}
    monkeypatch.setattr(sys, "stdin", io.StringIO("x\ny\nz\nw\nv\n"))  # the third batch's first: line 5
    assert main(["translate", "--model", "m", "--batch-size", "2", "--max-output-ratio", "1.5"]) == 0
    out, err = capsys.readouterr()
    assert out == "x0\ny0\nz0\nw0\nv0\n"
    cut = "its translation stopped at the output limit before its end and may be cut short; raise --max-output-ratio"
    assert (
        err == f"kformer: warning: stdin line 2: {cut} (now 1.5).\nkformer: warning: stdin line 5: {cut} (now 1.5).\n"
    )
    recorded_translator.warns = {"a": UserWarning("another library's warning")}
    with pytest.warns(UserWarning, match="another library's warning") as shown:  # shown as it would have been:
        assert main(["translate", "--model", "m", "a"]) == 0
    (record,) = shown  # where its stacklevel points, the call in kformer/cli.py
    assert "translator.translate(" in linecache.getline(record.filename, record.lineno), (
        record.filename,
        record.lineno,
    )
    recorded_translator.warns["x"] = OutputLimitWarning([0], settings)
    monkeypatch.setattr(sys, "stdin", io.StringIO("a\nx\n"))
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("ignore", UserWarning)  # the user's filter holds for others' warnings, not for ours
        assert main(["translate", "--model", "m", "--batch-size", "1"]) == 0
    assert shown == []
    assert capsys.readouterr().err == f"kformer: warning: stdin line 2: {cut} (now 2).\n"
    recorded_translator.warns = {}
    assert translated(capsys, "--beam", "50", "a") == "a0\n"  # as wide as the fake's target vocabulary, no wider:
    assert main(["translate", "--model", "m", "--beam", "51", "a"]) == 2
    assert capsys.readouterr().err == (
        "kformer translate: error: --beam 51 is more than the 50 tokens of m's target vocabulary; give at most 50.\n"
    )


def failures():
    import errno

    from kformer.data.pairs import DataError
    from kformer.training.callbacks import TrainingDiverged, TrainingInterrupted, WorkerLost

    return [
        (TrainingInterrupted("stopped at step 7 and saved; run the same command to resume."), 130,
         "kformer walkthrough: stopped at step 7 and saved; run the same command to resume.\n"),
        (KeyboardInterrupt(), 130, "kformer walkthrough: interrupted.\n"),
        (TrainingDiverged("the loss became NaN at step 3."), 1,
         "kformer walkthrough: error: the loss became NaN at step 3.\n"),
        (WorkerLost("worker 1 stopped answering."), 1, "kformer walkthrough: error: worker 1 stopped answering.\n"),
        (OSError(errno.ENOSPC, "No space left on device", "/runs/model.keras"), 1,
         "kformer walkthrough: error: /runs/model.keras: No space left on device.\n"),
        (OSError("cannot fork"), 1, "kformer walkthrough: error: cannot fork.\n"),
        (DataError("pairs.tsv, line 2: no tab."), 2, "kformer walkthrough: error: pairs.tsv, line 2: no tab.\n"),
    ]  # fmt: skip


@pytest.mark.parametrize("raised, code, said", failures(), ids=lambda value: type(value).__name__)
def test_each_way_a_command_fails_is_one_line_and_its_exit_code(monkeypatch, capsys, raised, code, said):
    import kformer.cli

    def fails(args):
        raise raised

    monkeypatch.setattr(kformer.cli, "_walkthrough", fails)
    assert main(["walkthrough"]) == code
    assert capsys.readouterr().err == said


def test_stdin_lines_come_as_given_each_bad_byte_named_and_only_the_first_lines_bom_dropped(monkeypatch, capsys):
    raw = b"\xef\xbb\xbfone \t\r\n\xef\xbb\xbftwo\nthr\xffee\nTAX\n"  # a BOM starts a file, not a later line
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw)))
    assert list(_stdin_batches(2)) == [["one \t", "\ufefftwo"], ["thr\ufffdee", "TAX"]]
    assert capsys.readouterr().err == "kformer: stdin line 3 is not UTF-8; its bad bytes were read as U+FFFD.\n"
    # stdin replaced by a text stream (no .buffer): a byte Python's reader could not decode comes as a surrogate.
    monkeypatch.setattr(sys, "stdin", io.StringIO("caf\udce9\nok\n"))
    assert list(_stdin_batches(64)) == [["caf\ufffd", "ok"]]
    assert capsys.readouterr().err == "kformer: stdin line 1 is not UTF-8; its bad bytes were read as U+FFFD.\n"


def test_the_zero_or_more_flags_take_zero_and_refuse_words_negatives_and_infinity():
    assert (_non_negative_int("0"), _non_negative_float("0")) == (0, 0.0)
    for text in ("x", "-1", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^expected a whole number of 0 or more, got '{text}'$"):
            _non_negative_int(text)
    for text in ("x", "-0.5", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^expected a number of 0 or more, got '{text}'$"):
            _non_negative_float(text)


def test_leaks_count_the_held_out_sources_that_training_has_too_in_a_streams_sample():
    pairs = {"valid": [("a", "1"), ("c", "2"), ("a", "3")], "test": [("b", "4")]}
    assert _leaks({"train": [("a", "x"), ("b", "y")], **pairs}) == {"valid": 2, "test": 1}
    stream = SimpleNamespace(sample=[("c", "z")])  # a stream is not read through: its sample stands for it
    assert _leaks({"train": stream, **pairs, "test": []}) == {"valid": 1}


def test_kformer_train_warns_on_stderr_of_each_held_out_split_whose_sources_training_has_too(
    tmp_path, monkeypatch, capsys
):
    """The training and the scoring recorded: the leaks of --valid and --test each named in one whole line on
    stderr, with their counts; a split without one says nothing; standard output carries no warning."""
    trainings = _record_training_and_scoring(monkeypatch)
    corpus, valid, test = (tmp_path / f"{name}.tsv" for name in ("corpus", "valid", "test"))
    _write_letter_pairs(corpus, "abcdef", "ghijkl")  # sources "a g" ... "f l": 36 pairs
    valid.write_text("a g\tx\nb h\ty\nz z\tz\n", encoding="utf-8")  # 2 of its 3 sources are training's
    test.write_text("z y\tq\n", encoding="utf-8")
    argv = ["--quiet", "train", "--data", str(corpus), "--valid", str(valid), "--test", str(test)]
    assert main([*argv, "--out", str(tmp_path / "m")]) == 0
    out, err = capsys.readouterr()
    valid_leaks = (
        "warning: 2 of the 3 valid pairs have a source that the training pairs have too; their scores will look "
        "better than unseen text's.\n"
    )
    assert err == valid_leaks and "warning" not in out and len(trainings) == 1
    test.write_text("c i\tq\nd j\tr\n" * 600, encoding="utf-8")  # 1,200 pairs, every one a leak: counts in full
    assert main([*argv, "--out", str(tmp_path / "m2")]) == 0
    out, err = capsys.readouterr()
    assert err == valid_leaks + (
        "warning: 1,200 of the 1,200 test pairs have a source that the training pairs have too; their scores will "
        "look better than unseen text's.\n"
    )
    assert "warning" not in out and len(trainings) == 2


def test_load_pairs_mixes_corpora_by_weight_and_keeps_each_ones_held_out_pairs(tmp_path):
    from kformer.data.pairs import read_pairs, split_pairs
    from kformer.data.stream import Mixture

    first, second = tmp_path / "first.tsv", tmp_path / "second.tsv"
    _write_letter_pairs(first, "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz")  # 676 pairs
    _write_letter_pairs(second, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    carved = [split_pairs(read_pairs(path)) for path in (first, second)]  # each corpus's own three splits
    assert all(len(split["valid"]) >= 2 and len(split["test"]) >= 2 for split in carved)

    splits = _load_pairs([str(first), str(second)])
    assert isinstance(splits["train"], Mixture) and splits["train"].weights == [1.0, 1.0]
    assert [list(part) for part in splits["train"].parts] == [split["train"] for split in carved]
    for name in ("valid", "test"):
        assert splits[name] == carved[0][name] + carved[1][name]
    assert _load_pairs([str(first), str(second)], weights=[1, 3])["train"].weights == [1.0, 3.0]
    one = _load_pairs([str(first), str(second)], held_out=1)
    assert (len(one["valid"]), len(one["test"])) == (2, 2)  # the first of each corpus's


def test_load_pairs_takes_the_users_own_splits_and_a_streams_sample_size(tmp_path, monkeypatch):
    from kformer.data import stream
    from kformer.data.pairs import read_pairs, split_pairs

    first, valid, test = (tmp_path / f"{name}.tsv" for name in ("first", "valid", "test"))
    _write_letter_pairs(first, "abcdefghijklmnopqrstuvwxyz", "abcdefghijklmnopqrstuvwxyz")  # 676 pairs
    _write_letter_pairs(valid, "ab", "cd")
    _write_letter_pairs(test, "ef", "gh")
    carved = split_pairs(read_pairs(first))
    own = _load_pairs(str(first), own={"valid": str(valid), "test": str(test)})
    assert (own["valid"], own["test"]) == (read_pairs(valid), read_pairs(test))
    assert own["train"] == read_pairs(first)  # nothing carved out of --data for a split the user brings
    half = _load_pairs(str(first), own={"valid": str(valid), "test": None})
    assert (half["valid"], half["test"]) == (read_pairs(valid), carved["test"])  # the test split carved as before
    assert len(half["train"]) == len(carved["train"]) + len(carved["valid"])

    monkeypatch.setattr(stream, "STREAM_ABOVE_BYTES", 0)  # read as a stream: its sample is --vocab-sample's pairs
    assert len(_load_pairs(str(first), sample_size=5)["train"].sample) == 5
    assert len(_load_pairs(str(first))["train"].sample) == len(carved["train"])  # the default, 200,000, holds all
