"""kformer inside someone else's program: an import that registers its Keras objects and changes nothing else."""

import json
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
from conftest import REPO, run_fresh_python

import kformer
from kformer.data.corpus import builtin_splits
from kformer.training.config import TrainingConfig
from kformer.training.jobs import train_translator

RELEASE_0_1_0 = REPO / "tests" / "data" / "release-0.1.0"  # written by its make.py with the 0.1.0 package layout
# Every class the source registers, read from the source text (not from what the import registered).
# (Not the course's: kformer.teaching registers its stage models itself, test_mvp.py.)
_SOURCE = "".join(path.read_text() for path in (REPO / "kformer").rglob("*.py") if "teaching" not in path.parts)
KERAS_OBJECTS = sorted(re.findall(r'register_keras_serializable\(package="kformer"\)\nclass (\w+)', _SOURCE))
# Every decorator was read (none followed by another decorator or written another way).
assert len(KERAS_OBJECTS) == _SOURCE.count("@keras.saving.register_keras_serializable")


@pytest.mark.parametrize("imports", ["import kformer, keras", "import keras, kformer"])
def test_import_kformer_registers_every_keras_object_in_either_order(imports, tmp_path):
    code = f"""
    import json, os
    os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
    {imports}
    missing = [n for n in {KERAS_OBJECTS!r} if keras.saving.get_registered_object("kformer>" + n) is None]
    model = keras.saving.load_model({str(RELEASE_0_1_0 / "layers.keras")!r})  # a Keras user's file of kformer layers
    output = model.predict(keras.ops.convert_to_tensor([[3, 4, 5, 0]]), verbose=0).tolist()
    print(json.dumps([missing, output, os.environ.get("TF_CPP_MIN_LOG_LEVEL")]))
    """
    missing, output, log_level = json.loads(run_fresh_python(code, tmp_path))
    assert missing == [] and log_level is None  # registered, and TensorFlow's log level left to the caller
    expected = json.loads((RELEASE_0_1_0 / "golden.json").read_text())["layers_output"]
    np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-6)


def test_model_directories_saved_by_release_0_1_0_translate_and_generate_as_they_did():
    """Model directories written before the package layout changed, and what that release translated with them."""
    golden = json.loads((RELEASE_0_1_0 / "golden.json").read_text())
    translator = kformer.load(RELEASE_0_1_0 / "translator")  # shared vocabulary: saved as SharedEmbeddingTransformer
    # Outputs of at most max_length tokens, as that release wrote: greedy under XLA (the default), the searches
    # after it without (XLA's beams give the plain loop's tokens: test_decoding.py, slow), one compile, not three.
    then = dict(max_output_ratio=0.01)
    assert kformer.Translator(translator, **then).translate(golden["sentences"]) == golden["greedy"]
    then_plain = dict(then, xla=False)
    # Beam search has since kept its finished hypotheses apart: on this barely trained model it finds translations
    # the model scores higher (GNMT's score of the teacher-forced log-probability) than that release's beams.
    beam = kformer.Translator(translator, beam_size=4, **then_plain)

    def gnmt(translations):
        return [s.log_prob / ((5 + s.tokens) / 6) ** 0.6 for s in beam.score(golden["sentences"], translations)]

    now, then_scores = gnmt(beam.translate(golden["sentences"])), gnmt(golden["beam4"])
    assert all(a >= b - 1e-4 for a, b in zip(now, then_scores, strict=True))
    assert sum(a > b + 1e-3 for a, b in zip(now, then_scores, strict=True)) >= len(now) // 2
    # With today's longer output limit, only the outputs that release stopped at its limit go on.
    now = kformer.Translator(translator, xla=False).translate(golden["sentences"])
    stopped = [
        len(ids) >= translator.max_length for ids in translator.target_tokenizer.tokenize(golden["greedy"]).to_list()
    ]
    assert [a for a, cut in zip(now, stopped, strict=True) if not cut] == [
        b for b, cut in zip(golden["greedy"], stopped, strict=True) if not cut
    ]
    assert 0 < sum(stopped) < len(stopped)
    generator = kformer.Generator(RELEASE_0_1_0 / "language_model", max_new_tokens=8)
    assert generator.generate(["el gato", "la"]) == golden["lm"]


def test_import_kformer_loads_what_registers_and_leaves_the_rest_and_the_callers_policy_alone(tmp_path):
    code = """
    import sys
    import keras
    keras.mixed_precision.set_global_policy("mixed_bfloat16")  # the caller's choice, made first
    import kformer
    later = ["kformer.inference", "kformer.deploy", "kformer.training.jobs", "kformer.cli", "kformer.model_dir",
             "kformer.teaching"]  # fmt: skip
    print(sorted(name for name in later if name in sys.modules))
    print(keras.mixed_precision.global_policy().name)
    kformer.Translator  # first use
    print("kformer.inference.translator" in sys.modules)
    """
    assert run_fresh_python(code, tmp_path).split() == ["[]", "mixed_bfloat16", "True"]


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


@pytest.mark.slow  # 27 s: trains in a fresh process
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


@pytest.mark.slow  # moved from the default suite to keep it within 8 minutes
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


def test_import_kformer_defaults_the_keras_backend_to_tensorflow_over_a_keras_json_that_says_otherwise(tmp_path):
    """A machine whose ~/.keras/keras.json names another backend, no KERAS_BACKEND: kformer still gets TensorFlow."""
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "jax"}))
    code = f"""
    import os
    os.environ.pop("KERAS_BACKEND", None)
    os.environ["KERAS_HOME"] = {str(tmp_path)!r}
    import kformer
    import keras
    print(os.environ.get("KERAS_BACKEND"), keras.backend.backend())
    """
    assert run_fresh_python(code, tmp_path).split() == ["tensorflow", "tensorflow"]
