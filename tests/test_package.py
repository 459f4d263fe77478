"""kformer as a library inside someone else's program: a cheap import that changes nothing it does not own."""

import subprocess
import sys

import keras
from conftest import REPO, run_fresh_python

import kformer
from kformer.corpus import builtin_splits
from kformer.recipes import TrainingConfig, train_translator


def test_import_kformer_loads_neither_tensorflow_nor_keras(tmp_path):
    code = """
    import os, sys
    os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    import kformer, kformer.cli
    kformer.cli.build_parser()
    print(sorted(m for m in ("tensorflow", "keras", "matplotlib") if m in sys.modules))
    print(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
    """
    assert run_fresh_python(code, tmp_path).split("\n")[:2] == ["[]", "None"]


def test_kformer_help_answers_without_loading_tensorflow():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kformer", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0 and "generate" in result.stdout
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "kformer.cli" in imported and "tensorflow" not in imported


def test_every_public_name_resolves():
    for name in kformer.__all__:
        assert getattr(kformer, name) is not None, name
    assert set(kformer.__all__) <= set(dir(kformer))


def test_training_puts_the_callers_precision_policy_back(tmp_path):
    keras.mixed_precision.set_global_policy("float32")
    config = TrainingConfig(
        d_model=16,
        num_heads=2,
        num_layers=1,
        d_ff=32,
        source_vocab_size=300,
        target_vocab_size=300,
        epochs=1,
        steps_per_epoch=2,
        mixed_precision=True,
    )
    splits = builtin_splits(train_size=64, valid_size=8, test_size=8)
    trained = train_translator(splits, tmp_path / "model", config, verbose=0)
    assert trained.model.get_layer("encoder").compute_dtype == "bfloat16"  # it did train in mixed precision
    assert trained.model.jit_compile is False  # bfloat16 on a CPU: TensorFlow's kernels, not XLA's
    assert keras.mixed_precision.global_policy().name == "float32"
    assert "val_chrf_kept" in trained.config["result"]  # it translated during training, in mixed precision
    for model in (trained, tmp_path / "model"):  # and translates after, in memory and loaded
        assert len(kformer.Translator(model).translate(["the black cat sleeps"])) == 1


def test_a_fresh_program_loads_a_model_directory_with_nothing_imported_first(tmp_path):
    config = TrainingConfig(
        d_model=16, num_heads=2, num_layers=1, d_ff=32, source_vocab_size=300, target_vocab_size=300, epochs=1
    )
    config.steps_per_epoch, config.jit_compile = 2, False
    train_translator(builtin_splits(train_size=64, valid_size=8, test_size=8), tmp_path / "model", config, verbose=0)
    code = """
    import kformer
    trained = kformer.load("model")  # registers the layers, loss, metric and schedule it needs
    print(len(kformer.Translator(trained).translate(["the black cat sleeps"])))
    """
    assert run_fresh_python(code, tmp_path).strip() == "1"
