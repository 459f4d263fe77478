"""Export: SavedModel, TFLite and ONNX artifacts, each proven equal to Keras in a fresh process."""

import errno
import json
import os
import re
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import ODD_TEXTS, REPO, VOCAB, copy_task_model, run_fresh_python, teacher_forced_log_probs, to_numpy

from kformer import Translator
from kformer.cli import main
from kformer.data.text import END_ID, PAD_ID, START_ID
from kformer.deploy.export import ExportError, export
from kformer.inference.decoding import decode

SENTENCES = ["a b c", "l k j i h", "d e f g", "b"]


@pytest.fixture(scope="module")
def trained():
    return copy_task_model()


@pytest.fixture(scope="module")
def translator(trained):
    """The Keras model's greedy Translator (XLA, the default), which the runtimes must agree with: one a module."""
    return Translator(trained)


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """`kformer export` with its default formats (all four) and both quantizations: (out, manifest).

    Its --out is an empty folder of mode 0700, which the export takes, under a umask of 027.
    """
    model = tmp_path_factory.mktemp("model") / "copy"
    trained.save(model)
    out = tmp_path_factory.mktemp("export") / "deploy"
    out.mkdir(mode=0o700)
    previous = os.umask(0o027)
    try:
        assert main(["--quiet", "export", "--model", str(model), "--out", str(out), "--quantize", "float16,int8"]) == 0
    finally:
        os.umask(previous)
    return out, json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def saved_model(exported):
    """The export's SavedModel, loaded in this process once a module."""
    return tf.saved_model.load(str(exported[0] / "saved_model" / "kformer" / "1"))


@pytest.fixture(scope="module")
def reference(trained, exported):
    """What the Keras model gives on fixed inputs, saved for the fresh processes."""
    out, _ = exported
    tokens = np.array([[4, 5, 6, 0, 0], [15, 14, 13, 12, 11], [7, 8, 9, 10, 0], [5, 0, 0, 0, 0]], "int32")
    decoder_tokens = np.array([[2, 4, 5, 6], [2, 15, 14, 13], [2, 7, 8, 9], [2, 5, 0, 0]], "int32")
    ids = to_numpy(decode(trained.model, tokens, max_length=20))  # the output limit of 5 tokens: max(12, 2 x 5 + 10)
    log_probs = teacher_forced_log_probs(trained.model, tokens, ids).astype("float32")
    logits = to_numpy(trained.model([tokens, decoder_tokens]))
    directory = out.parent
    arrays = [("tokens", tokens), ("decoder_tokens", decoder_tokens), ("ids", ids), ("logits", logits)]
    for name, array in [*arrays, ("log_probs", log_probs)]:
        np.save(directory / f"{name}.npy", array)
    return directory


def test_layout_and_manifest(exported):
    out, manifest = exported
    expected = {
        "source_vocab.txt",
        "target_vocab.txt",
        "serving/models.config",
        "serving/request.json",
        "serving/response.json",
        "tflite/translate_ids.tflite",
        "tflite/translate_ids_float16.tflite",
        "tflite/translate_ids_int8.tflite",
        "tflite/forward.tflite",
        "tflite/translate.tflite",
        "onnx/translate_ids.onnx",
        "onnx/forward.onnx",
        "ctranslate2/model.bin",
        "ctranslate2_float16/model.bin",
        "ctranslate2_int8/model.bin",
        "saved_model/",
    }
    assert expected <= set(manifest["files"])
    files = manifest["files"]  # and each quantization took effect (smaller weights, the same graph)
    quantized = [files[f"tflite/translate_ids{suffix}.tflite"] for suffix in ("", "_float16", "_int8")]
    assert quantized == sorted(quantized, reverse=True) and len(set(quantized)) == 3, quantized
    assert (out / "saved_model" / "kformer" / "1" / "saved_model.pb").is_file()
    assert not list(out.parent.glob(".deploy.partial-*"))


def test_saved_model_cli_lists_both_signatures(exported):
    out, _ = exported
    cli = shutil.which("saved_model_cli") or pytest.fail("saved_model_cli is not on PATH")
    shown = subprocess.run(
        [cli, "show", "--all", "--dir", str(out / "saved_model" / "kformer" / "1")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "signature_def['serving_default']" in shown and "signature_def['translate_ids']" in shown


# What each client must run without: kformer always; TensorFlow and Keras too, unless it loads TensorFlow's own
# formats (the SavedModel, or TFLite with tensorflow-text's tokenizer kernels: `--strings`), which import both.
NOT_NEEDED = ("kformer", "keras", "tensorflow")
_REFUSE_IMPORTS = """
import runpy, sys
refused = set(sys.argv[1].split(","))

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in refused:
            raise ModuleNotFoundError(f"the client imported {name}", name=name)

sys.meta_path.insert(0, Refuse())
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_client(client, *args, refused=NOT_NEEDED):
    """Runs export/`client` in a fresh Python in which importing any of `refused` fails."""
    argv = [sys.executable, "-c", _REFUSE_IMPORTS, ",".join(refused), str(REPO / "export" / client), *args]
    return subprocess.run(argv, capture_output=True, text=True)


def assert_saved_model_runs_alone(out, reference):
    """In a fresh process with only tensorflow and tensorflow_text: the Keras model's ids and translations."""
    run_fresh_python(
        f"""
        import sys, numpy as np, tensorflow as tf, tensorflow_text
        loaded = tf.saved_model.load("{out}/saved_model/kformer/1")
        assert "kformer" not in sys.modules
        found = loaded.signatures["translate_ids"](encoder_tokens=tf.constant(np.load("tokens.npy")))
        np.testing.assert_array_equal(found["output_tokens"].numpy(), np.load("ids.npy"))
        np.testing.assert_allclose(found["log_probs"].numpy(), np.load("log_probs.npy"), rtol=1e-4, atol=1e-4)
        every = loaded.signatures["search_ids"](encoder_tokens=tf.constant(np.load("tokens.npy")))  # greedy: one
        np.testing.assert_array_equal(every["output_tokens"].numpy()[:, 0], np.load("ids.npy"))
        np.testing.assert_allclose(every["log_probs"].numpy()[:, 0], np.load("log_probs.npy"), rtol=1e-4, atol=1e-4)
        texts = loaded.signatures["serving_default"](texts=tf.constant(["a b c", ""]))["translations"].numpy()
        assert [t.decode() for t in texts] == ["a b c", ""], texts
        """,
        cwd=reference,
    )


def test_saved_model_runs_with_only_tensorflow_and_tensorflow_text(exported, reference):
    assert_saved_model_runs_alone(exported[0], reference)


def test_the_rest_request_replays_to_its_response(translator, exported):
    out, _ = exported
    result = run_client("serving_client.py", str(out), refused=("kformer",))
    assert result.returncode == 0, result.stderr[-3000:]
    response = json.loads((out / "serving" / "response.json").read_text())
    assert json.loads(result.stdout.strip().splitlines()[-1]) == response
    # And the response the export wrote is the Keras model's own translation of the request.
    request = json.loads((out / "serving" / "request.json").read_text())
    assert response["predictions"] == translator.translate(request["instances"])
    assert "model_config_list" in (out / "serving" / "models.config").read_text()


def test_tflite_holds_builtin_ops_only_and_matches_keras(exported, reference):
    out, _ = exported
    run_fresh_python(
        f"""
        import numpy as np
        from ai_edge_litert.interpreter import Interpreter
        for name in ["translate_ids", "forward", "translate_ids_float16", "translate_ids_int8"]:
            interpreter = Interpreter(model_path="{out}/tflite/" + name + ".tflite")
            ops = {{op["op_name"] for op in interpreter._get_ops_details()}}
            assert not any(o.startswith("Flex") or o == "CUSTOM" for o in ops), (name, ops)
        run = lambda name, output="output_tokens", **inputs: Interpreter(
            model_path="{out}/tflite/" + name + ".tflite").get_signature_runner()(**inputs)[output]
        tokens = np.load("tokens.npy")
        np.testing.assert_array_equal(run("translate_ids", encoder_tokens=tokens), np.load("ids.npy"))
        log_probs = run("translate_ids", "log_probs", encoder_tokens=tokens)
        np.testing.assert_allclose(log_probs, np.load("log_probs.npy"), rtol=1e-4, atol=1e-4)
        logits = run("forward", "logits", encoder_tokens=tokens, decoder_tokens=np.load("decoder_tokens.npy"))
        np.testing.assert_allclose(logits, np.load("logits.npy"), atol=1e-4)
        for variant, within in [("translate_ids_float16", 0.01), ("translate_ids_int8", 0.05)]:
            agrees = run(variant, encoder_tokens=tokens) == np.load("ids.npy")
            assert agrees.mean() > 0.9, (variant, agrees.mean())
            same = agrees.all(axis=1)  # where it chose Keras's tokens, its log p of them: float16's within 1% of
            # Keras's, int8 weights' within 5% (measured: 0.6% and 4.9%); 0 for all would be 100% off
            assert same.any(), variant
            found = run(variant, "log_probs", encoder_tokens=tokens)[same]
            np.testing.assert_allclose(found, np.load("log_probs.npy")[same], rtol=within, atol=2e-5, err_msg=variant)
        """,
        cwd=reference,
    )


def test_onnx_matches_keras(exported, reference):
    out, _ = exported
    run_fresh_python(
        f"""
        import numpy as np, onnxruntime
        def run(name, output="output_tokens", **inputs):
            session = onnxruntime.InferenceSession("{out}/onnx/" + name + ".onnx")
            assert session.get_modelmeta() is not None
            return session.run([output], {{i.name: inputs[i.name.split(":")[0]] for i in session.get_inputs()}})[0]
        tokens = np.load("tokens.npy")
        np.testing.assert_array_equal(run("translate_ids", encoder_tokens=tokens), np.load("ids.npy"))
        log_probs = run("translate_ids", "log_probs", encoder_tokens=tokens)
        np.testing.assert_allclose(log_probs, np.load("log_probs.npy"), rtol=1e-4, atol=1e-4)
        logits = run("forward", "logits", encoder_tokens=tokens, decoder_tokens=np.load("decoder_tokens.npy"))
        np.testing.assert_allclose(logits, np.load("logits.npy"), atol=1e-4)
        """,
        cwd=reference,
    )


@pytest.mark.parametrize(
    "client, extra, refused",
    [
        ("tflite_client.py", [], NOT_NEEDED),
        ("tflite_client.py", ["--strings"], ("kformer",)),
        ("onnx_client.py", [], NOT_NEEDED),
        ("ctranslate2_client.py", [], NOT_NEEDED),
        ("ctranslate2_client.py", ["--model", "ctranslate2_int8"], NOT_NEEDED),
    ],
)
def test_deployment_clients_translate_like_keras_without_kformer(translator, exported, client, extra, refused):
    out, _ = exported
    expected = translator.translate(SENTENCES)
    result = run_client(client, str(out), *extra, *SENTENCES, refused=refused)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == expected


def test_the_ctranslate2_client_passes_n_best_lists_and_scores_through(trained, exported):
    """--n-best 3 --scores --length-penalty 0: each sentence's 3 hypotheses, best first, each scored with its
    log-probability ([END] included) as kformer's teacher-forced `Translator.score` gives it, the first kformer's
    own beam-3 translation at the same penalty (the lower ones may differ: the two searches stop differently)."""
    out, _ = exported
    command = ["--beam", "3", "--n-best", "3", "--scores", "--length-penalty", "0", *SENTENCES]
    result = run_client("ctranslate2_client.py", str(out), *command, refused=NOT_NEEDED)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    assert [int(index) for index, _, _ in lines] == [i for i in range(len(SENTENCES)) for _ in range(3)]
    translator = Translator(trained, beam_size=3, length_penalty=0.0)
    kformer_best = translator.translate(SENTENCES)
    scores = translator.score([SENTENCES[int(index)] for index, _, _ in lines], [text for _, _, text in lines])
    for (index, score, text), expected in zip(lines, scores, strict=True):
        assert float(score) == pytest.approx(expected.log_prob, abs=2e-3), (index, text)
    for i, best in enumerate(kformer_best):
        hypotheses = [(float(score), text) for index, score, text in lines if int(index) == i]
        assert hypotheses[0][1] == best and [s for s, _ in hypotheses] == sorted(
            (s for s, _ in hypotheses), reverse=True
        )
    refused = run_client("ctranslate2_client.py", str(out), "--beam", "2", "--n-best", "3", "a b", refused=NOT_NEEDED)
    assert refused.returncode != 0 and "n_best must be between 1 and the beam size (2)" in refused.stderr


def test_the_exports_length_penalty_is_in_its_manifest_and_the_ctranslate2_clients_default(
    trained, tmp_path, monkeypatch
):
    """`kformer export --length-penalty 0`: the manifest records 0, and the client, not told, ranks and scores by
    log-probability alone (its scores the teacher-forced ones; at 0.6 they would be divided by length^0.6)."""
    trained.save(tmp_path / "copy")
    out = tmp_path / "deploy"
    export_args = ["--formats", "ctranslate2", "--beam", "3", "--length-penalty", "0"]
    assert main(["--quiet", "export", "--model", str(tmp_path / "copy"), "--out", str(out), *export_args]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["beam_size"], manifest["length_penalty"]) == (3, 0.0)
    result = run_client("ctranslate2_client.py", str(out), "--beam", "3", "--n-best", "2", "--scores", *SENTENCES)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line.split("\t") for line in result.stdout.splitlines()]
    expected = Translator(trained).score([SENTENCES[int(i)] for i, _, _ in lines], [text for _, _, text in lines])
    assert [float(score) for _, score, _ in lines] == pytest.approx([s.log_prob for s in expected], abs=2e-3)
    # Plain translation (no --n-best) searches with the export's alpha too: what reaches CTranslate2.
    monkeypatch.syspath_prepend(str(REPO / "export"))
    import ctranslate2_client

    client, asked = ctranslate2_client.Client(out), []

    class Recording:
        def translate_batch(self, *args, **options):
            asked.append(options.get("length_penalty"))
            return translator.translate_batch(*args, **options)

    translator, client.translator = client.translator, Recording()
    translations = client.translate(SENTENCES, beam_size=3)
    assert translations == [hypotheses[0][0] for hypotheses in client.n_best(SENTENCES, 3, 1)]
    assert asked and set(asked) == {0.0}


def test_a_client_given_the_wrong_folder_says_what_is_missing(exported, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "export"))
    import ctranslate2_client
    import onnx_client
    import tflite_client
    from wordpiece import ExportFolderError

    out, _ = exported
    with pytest.raises(ExportFolderError, match=f"^{tmp_path}: not an export folder \\(no manifest.json\\)"):
        tflite_client.translate_ids(tmp_path, ["a b"])
    with pytest.raises(ExportFolderError, match=r"tflite/missing.tflite: missing; this export has saved_model, "):
        tflite_client.translate_ids(out, ["a b"], model="missing.tflite")
    with pytest.raises(ExportFolderError, match=r"nowhere/model.bin: missing; .*\(quantized: float16, int8\)"):
        ctranslate2_client.translate(out, ["a b"], model="nowhere")
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "language_model"}))
    with pytest.raises(ExportFolderError, match="holds a language_model's export; this client translates"):
        onnx_client.translate(tmp_path, ["a b"])

    # From the command line: one line on stderr, exit status 1, no traceback.
    empty = tmp_path / "empty"
    empty.mkdir()
    for client in ("tflite_client.py", "onnx_client.py", "ctranslate2_client.py", "serving_client.py"):
        argv = [sys.executable, str(REPO / "export" / client), str(empty)] + (
            ["a b"] if client != "serving_client.py" else []
        )
        result = subprocess.run(argv, capture_output=True, text=True)
        lines = [line for line in result.stderr.splitlines() if "error" in line or "Traceback" in line]
        assert (result.returncode, lines) == (
            1,
            [f"{client}: error: {empty}: not an export folder (no manifest.json); write one with `kformer export`."],
        )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(formats=("saved_model", "pdf")),
            "unknown format 'pdf'; choose from saved_model, tflite, onnx, ctranslate2.",
        ),
        (dict(quantize=("int4",)), "unknown quantization 'int4'; choose from float16, int8."),
        (
            dict(formats=("onnx",), quantize=("int8",)),
            "--quantize applies to TFLite and CTranslate2; add tflite or ctranslate2 to --formats.",
        ),
    ],
)
def test_bad_requests_are_refused_before_any_work(trained, tmp_path, kwargs, message):
    with pytest.raises(ExportError) as error:
        export(trained, tmp_path / "out", verbose=False, **kwargs)
    assert str(error.value) == message
    assert not (tmp_path / "out").exists()


def test_the_space_asked_for_is_four_bytes_a_weight_for_each_artifact(trained, tmp_path, monkeypatch):
    """The artifacts, as `_bytes_written` counts them: the SavedModel and the converters' archive; TFLite's three
    models and a variant each quantization; ONNX's two; CTranslate2's model and a variant each quantization."""
    import kformer.deploy.export

    asked = []

    def require_space(path, needed, what, error):
        asked.append((path, needed, what))
        raise error("recorded")

    monkeypatch.setattr(kformer.deploy.export, "require_space", require_space)
    requests = [
        (("saved_model",), (), 2),
        (("tflite",), ("float16", "int8"), 5),
        (("onnx",), (), 2),
        (("ctranslate2",), ("int8",), 2),  # quantized without TFLite: CTranslate2 takes it
        (("saved_model", "tflite", "onnx", "ctranslate2"), (), 8),
    ]
    for formats, quantize, _ in requests:
        with pytest.raises(ExportError, match="^recorded$"):
            export(trained, tmp_path / "out", formats=formats, quantize=quantize, verbose=False)
    weight = 4 * trained.model.count_params()
    assert asked == [(tmp_path / "out", weight * copies, "this export") for *_, copies in requests]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "raised, disk_full",
    [
        # What tf.saved_model.save raises when the disk fills (SaveV2), said or not in its message:
        (tf.errors.ResourceExhaustedError(None, None, "variables.data-00000-of-00001: No space left on device"), True),
        (tf.errors.ResourceExhaustedError(None, None, "variables.data-00000-of-00001; write failed"), True),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (RuntimeError("TFLite conversion failed: write error: No space left on device"), True),  # a converter's
        (PermissionError(errno.EACCES, "Permission denied"), False),
    ],
)
def test_an_error_mid_export_leaves_nothing_and_only_a_full_disk_is_said_to_be_one(
    trained, tmp_path, monkeypatch, raised, disk_full
):
    import kformer.deploy.export

    def fails(job):
        (job.staging / "saved_model").mkdir()
        raise raised

    monkeypatch.setitem(kformer.deploy.export.WRITERS, "saved_model", fails)
    with pytest.raises(ExportError if disk_full else type(raised)) as error:
        export(trained, tmp_path / "out", formats=("saved_model",), verbose=False)
    said = f"{tmp_path / 'out'}: the disk filled up while exporting, and nothing was left there; this export needs "
    assert str(error.value).startswith(said) == disk_full
    assert error.value is raised or disk_full
    assert list(tmp_path.iterdir()) == []


def test_a_staging_folder_clears_this_exports_leftovers_only_and_has_the_users_permissions(tmp_path):
    from kformer.deploy.export import _staging

    out = tmp_path / "out[1]"  # a name glob would read as a pattern: ".out1.partial-x" is another export's
    for leftover in (".out[1].partial-x", ".out1.partial-x", ".other.partial-x"):
        (tmp_path / leftover).mkdir()
    (tmp_path / ".out[1].partial-link").symlink_to(tmp_path / ".other.partial-x")  # rmtree refuses it: no matter
    previous = os.umask(0o027)
    try:
        staging = _staging(out)
    finally:
        os.umask(previous)
    assert staging.parent == tmp_path and staging.name.startswith(".out[1].partial-") and staging.is_dir()
    left = [".out1.partial-x", ".other.partial-x", ".out[1].partial-link", staging.name]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(left)
    assert stat.S_IMODE(staging.stat().st_mode) == 0o750  # the umask's, not mkdtemp's 0700


def test_a_missing_converter_names_the_extra_that_installs_it(trained, tmp_path, monkeypatch):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "tf2onnx" else real_find_spec(name))
    with pytest.raises(ExportError) as error:
        export(trained, tmp_path / "out", verbose=False)
    assert str(error.value) == (
        "the onnx format needs tf2onnx, which is not installed; install it with: pip install 'kformer[export]'."
    )
    assert not (tmp_path / "out").exists()


def test_unwritable_or_occupied_destinations(trained, tmp_path, monkeypatch):
    with pytest.raises(ExportError, match="does not exist"):
        export(trained, tmp_path / "missing" / "out", verbose=False)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ExportError, match="already exists and is not empty"):
        export(trained, tmp_path / "full", verbose=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError) as error:
        export(trained, tmp_path / "file", verbose=False)
    assert (
        str(error.value) == f"{tmp_path / 'file'}: already exists and is not empty; remove it or choose another --out."
    )
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK)  # as root, every directory is writable
    with pytest.raises(ExportError) as error:
        export(trained, tmp_path / "out", verbose=False)
    assert str(error.value) == f"{tmp_path}: cannot write there; choose another --out."
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file", "full"]  # nothing staged nor written


def test_a_failed_export_leaves_nothing_that_looks_complete(trained, tmp_path, monkeypatch):
    """A format written whole (CTranslate2's, the quickest to write), then the next one's converter fails."""
    import kformer.deploy.export

    written = []

    def broken(job):  # as `_write_onnx` goes: its folder, the converters' archive (an empty stand-in), then fails
        written.append((job.staging / "ctranslate2" / "model.bin").is_file())
        (job.staging / "onnx").mkdir()
        job.id_archive()
        raise ExportError("ONNX conversion of translate_ids failed: simulated")

    monkeypatch.setattr(kformer.deploy.export, "_keras_archive", lambda trained, path, *args, **kwargs: path.mkdir())
    monkeypatch.setitem(kformer.deploy.export.WRITERS, "onnx", broken)
    with pytest.raises(ExportError, match="simulated"):
        export(trained, tmp_path / "out", formats=("ctranslate2", "onnx"), verbose=False)
    assert written == [True]
    assert list(tmp_path.iterdir()) == []


def test_too_little_disk_space_is_refused_before_any_work(trained, tmp_path, monkeypatch):
    import types

    monkeypatch.setattr(shutil, "disk_usage", lambda path: types.SimpleNamespace(free=2**20))
    out = tmp_path / "out"
    with pytest.raises(ExportError) as error:
        export(trained, out, verbose=False)
    expected = rf"{re.escape(str(out))}: 1 MiB free, but this export writes about [\d,.]+ MiB; free .*"
    assert re.fullmatch(expected, str(error.value))
    assert list(tmp_path.iterdir()) == []


def test_a_staging_folder_that_cannot_be_made_is_named_by_the_out_the_user_gave(trained, tmp_path, monkeypatch):
    import errno

    import kformer.deploy.export

    def full(**kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(kformer.deploy.export.tempfile, "mkdtemp", full)
    out = tmp_path / "out"
    with pytest.raises(ExportError) as error:
        export(trained, out, formats=("saved_model",), verbose=False)
    assert str(error.value) == f"{out}: cannot write there (No space left on device); choose another --out."


@pytest.mark.slow  # moved from the default suite to keep it within 8 minutes
def test_an_export_killed_halfway_leaves_a_staging_folder_that_the_next_export_clears(trained, tmp_path, monkeypatch):
    import kformer.deploy.export

    def killed(job):  # as SIGKILL would: the export stops and its own cleanup never runs
        monkeypatch.setattr(kformer.deploy.export.shutil, "rmtree", lambda *args, **kwargs: None)
        raise ExportError("simulated kill")

    monkeypatch.setitem(kformer.deploy.export.WRITERS, "onnx", killed)
    with pytest.raises(ExportError, match="simulated kill"):
        export(trained, tmp_path / "out", formats=("ctranslate2", "onnx"), verbose=False)
    (staging,) = tmp_path.iterdir()
    assert staging.name.startswith(".out.partial-") and (staging / "ctranslate2" / "model.bin").is_file()
    monkeypatch.undo()

    (tmp_path / ".other.partial-x").mkdir()  # another destination's staging folder is not this export's business
    export(trained, tmp_path / "out", formats=("ctranslate2",), verbose=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.partial-x", "out"]


def test_cli_names_a_missing_model_directory(tmp_path, capsys):
    assert main(["export", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "out")]) == 2
    assert "no such model directory" in capsys.readouterr().err
    assert tf.io.gfile.listdir(str(tmp_path)) == []


def test_the_clients_read_reserved_tokens_and_spacing_rules_from_the_manifest(exported):
    out, manifest = exported
    sys.path.insert(0, str(REPO / "export"))
    from wordpiece import WordPiece

    from kformer.data.text import RESERVED_TOKENS, SPACING_RULES

    assert manifest["reserved_tokens"] == RESERVED_TOKENS
    assert manifest["spacing_rules"] == [list(rule) for rule in SPACING_RULES]
    client = WordPiece(out / "target_vocab.txt")
    assert (client.pad, client.unk, client.start, client.end) == (0, 1, 2, 3)
    for joined in ["2 : 30 , 70 , 000", "¿ quién ?", "don ' t", "well - known", '" hola "', "casa .", "año - 2"]:
        expected = tf.constant(joined)
        for pattern, replacement in SPACING_RULES:  # TensorFlow's RE2, as the Translator applies them
            expected = tf.strings.regex_replace(expected, pattern, replacement)
        assert client.space(joined) == expected.numpy().decode(), joined


def test_the_export_gets_the_users_normal_permissions_and_takes_an_empty_out(exported):
    out, _ = exported
    assert stat.S_IMODE(out.stat().st_mode) == 0o750  # the umask's: not mkdtemp's 0700, nor the --out it replaced
    for path in out.rglob("*"):  # every format's files: readable by the group, as the umask says, and no more
        assert stat.S_IMODE(path.stat().st_mode) & 0o047 == 0o040, path


def test_every_runtime_gives_keras_translation_of_each_odd_text(translator, saved_model, exported):
    sys.path.insert(0, str(REPO / "export"))
    import ctranslate2_client
    import onnx_client
    import tflite_client

    out, _ = exported
    texts = list(ODD_TEXTS.values())
    expected = translator.translate(texts)
    serving = saved_model.signatures["serving_default"]
    runtimes = {
        "SavedModel": lambda batch: [
            t.decode() for t in serving(texts=tf.constant(batch, tf.string))["translations"].numpy()
        ],
        "TFLite ids": lambda batch: tflite_client.translate_ids(out, batch),
        "TFLite strings": lambda batch: tflite_client.translate_strings(out, batch),
        "ONNX": lambda batch: onnx_client.translate(out, batch),
        "CTranslate2": lambda batch: ctranslate2_client.translate(out, batch),
    }
    for name, translate in runtimes.items():
        assert translate(texts) == expected, name
        assert translate([]) == [], name


@pytest.mark.parametrize(
    "tokens, message",
    [
        (tf.constant([[4.0, 5.0]]), "int32"),
        (tf.constant([4, 5]), r"Shape of tensor encoder_tokens \[2\] is not compatible with expected shape \[\?,\?\]"),
        (tf.constant([[4, 5]], tf.int64), "int32"),
    ],
)
def test_wrong_dtypes_and_shapes_at_the_saved_model_are_refused(saved_model, tokens, message):
    signature = saved_model.signatures["translate_ids"]
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError), match=message):
        signature(encoder_tokens=tokens)


def test_wrong_dtypes_at_the_tflite_and_onnx_models_are_refused(exported):
    import onnxruntime
    from ai_edge_litert.interpreter import Interpreter

    out, _ = exported
    floats = np.array([[4.0, 5.0]], np.float32)
    runner = Interpreter(model_path=str(out / "tflite" / "translate_ids.tflite")).get_signature_runner()
    with pytest.raises(ValueError, match="expected type INT32"):
        runner(encoder_tokens=floats)
    session = onnxruntime.InferenceSession(str(out / "onnx" / "translate_ids.onnx"))
    with pytest.raises(Exception, match=r"expected: \(tensor\(int32\)\)"):
        session.run(None, {session.get_inputs()[0].name: floats})


def ctranslate2_greedy_ids(directory, trained, encoder_tokens, max_length):
    """CTranslate2's greedy output for id rows, as ids, each row cut at [END] (which it leaves out), with the
    export client's options: [PAD] and [START] suppressed (kformer never writes them), no minimum length."""
    import ctranslate2

    source, target = trained.source_tokenizer.vocabulary, trained.target_tokenizer.vocabulary
    batch = [[source[t] for t in row if t != 0] for row in encoder_tokens]
    results = ctranslate2.Translator(str(directory), device="cpu").translate_batch(
        batch,
        beam_size=1,
        max_decoding_length=max_length,
        min_decoding_length=0,  # an empty translation allowed, as in kformer
        suppress_sequences=[[target[PAD_ID]], [target[START_ID]]],
    )
    return [[target.index(t) for t in r.hypotheses[0]] for r in results]


def cut_at_end(ids):
    ids = [int(t) for t in ids]
    return ids[: ids.index(END_ID)] if END_ID in ids else ids


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"norm_first": True},
        {"tie_embeddings": True},
        {"norm_first": True, "tie_embeddings": True},
        {"tie_embeddings": True, "share_embeddings": True},
    ],
    ids=["post-LN", "pre-LN", "tied", "pre-LN tied", "three-way tied"],
)
def test_ctranslate2_gives_kerass_greedy_tokens_on_random_models(tmp_path, settings):
    """Untrained models, post-LN and pre-LN, tied or not: no learned pattern hides a mis-mapped weight."""
    import keras

    from kformer import TrainedModel, build_transformer
    from kformer.data.text import Tokenizer
    from kformer.deploy.ctranslate2_spec import write_ctranslate2

    keras.utils.set_random_seed(1)
    model = build_transformer(len(VOCAB), len(VOCAB), 32, 4, 2, 64, dropout=0.0, **settings)
    trained = TrainedModel(model, Tokenizer(VOCAB), Tokenizer(VOCAB), {"max_length": 12})
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 8, size=32)
    tokens = np.where(np.arange(7) < lengths[:, None], rng.integers(4, len(VOCAB), (32, 7)), 0).astype("int32")
    write_ctranslate2(trained, tmp_path / "ct2")
    expected = [cut_at_end(row) for row in to_numpy(decode(model, tokens, max_length=12))]
    assert ctranslate2_greedy_ids(tmp_path / "ct2", trained, tokens, 12) == expected


@pytest.mark.slow
def test_ctranslate2_translates_the_builtin_test_split_like_keras(clean_run, tmp_path):
    sys.path.insert(0, str(REPO / "export"))
    import ctranslate2_client

    from kformer.data.corpus import builtin_splits
    from kformer.model_dir import load

    model_dir, _ = clean_run
    export(model_dir, tmp_path / "deploy", formats=("ctranslate2",), quantize=("int8",), verbose=False)
    sentences = [source for source, _ in builtin_splits()["test"]]
    expected = Translator(load(model_dir)).translate(sentences)
    assert ctranslate2_client.translate(tmp_path / "deploy", sentences) == expected
    int8 = ctranslate2_client.translate(tmp_path / "deploy", sentences, model="ctranslate2_int8")
    assert np.mean([a == b for a, b in zip(int8, expected, strict=True)]) >= 0.95


@pytest.mark.slow  # moved from the default suite to keep it within 8 minutes
def test_an_xla_saved_model_runs_in_a_fresh_process_and_decodes_like_keras(trained, exported, reference, tmp_path):
    out = tmp_path / "xla"
    assert export(trained, out, formats=("saved_model",), xla=True, verbose=False)["xla"] is True
    graph = out / "saved_model" / "kformer" / "1" / "saved_model.pb"
    plain_graph = exported[0] / "saved_model" / "kformer" / "1" / "saved_model.pb"
    assert b"_XlaMustCompile" in graph.read_bytes() and b"_XlaMustCompile" not in plain_graph.read_bytes()
    assert_saved_model_runs_alone(out, reference)


@pytest.mark.slow
def test_a_mixed_precision_model_exports_in_float32(tmp_path):
    """Its weights are float32 and its graph bfloat16, which TFLite cannot convert: the artifacts compute in float32."""
    import keras
    from ai_edge_litert.interpreter import Interpreter

    from kformer import TrainedModel, build_transformer
    from kformer.data.text import Tokenizer

    keras.utils.set_random_seed(2)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = build_transformer(len(VOCAB), len(VOCAB), 32, 4, 2, 64, dropout=0.0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    float32 = build_transformer(len(VOCAB), len(VOCAB), 32, 4, 2, 64, dropout=0.0)
    float32.set_weights(mixed.get_weights())
    assert mixed.compute_dtype == "bfloat16"
    trained = TrainedModel(mixed, Tokenizer(VOCAB), Tokenizer(VOCAB), {"max_length": 12})
    export(trained, tmp_path / "deploy", formats=("tflite",), verbose=False)
    assert keras.mixed_precision.global_policy().name == "float32" and mixed.compute_dtype == "bfloat16"

    tokens = np.array([[4, 5, 6, 0, 0], [15, 14, 13, 12, 11], [7, 8, 9, 10, 0], [5, 0, 0, 0, 0]], "int32")
    expected = to_numpy(decode(float32, tokens, max_length=20))  # the output limit of 5 tokens: max(12, 2 x 5 + 10)
    runner = Interpreter(model_path=str(tmp_path / "deploy" / "tflite" / "translate_ids.tflite")).get_signature_runner()
    np.testing.assert_array_equal(runner(encoder_tokens=tokens)["output_tokens"], expected)


BEAM_SENTENCES = ["a b c", "l k j i h", "d e f g", "b", "c c c a", "h g", "e f", "k l a b"]


def untrained_translator_and_its_beams():
    """A random model over VOCAB and its Keras beam-4 translations of BEAM_SENTENCES, which greedy's differ from.

    An untrained model has near-ties, so beam 4 and greedy part ways: an export that quietly
    decoded greedily fails the tests that use it.
    """
    import keras

    from kformer import TrainedModel, build_transformer
    from kformer.data.text import Tokenizer

    keras.utils.set_random_seed(7)
    model = build_transformer(len(VOCAB), len(VOCAB), d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0)
    trained = TrainedModel(model, Tokenizer(VOCAB), Tokenizer(VOCAB), {"max_length": 12})
    beam = Translator(trained, beam_size=4).translate(BEAM_SENTENCES)
    assert beam != Translator(trained).translate(BEAM_SENTENCES)
    return trained, beam


@pytest.mark.slow  # 17 s: a second export
def test_a_beam_export_writes_a_saved_model_that_decodes_with_beams(tmp_path):
    """The quick check of `export(beam_size=4)` (the slow test below tries every runtime, through the command)."""
    trained, beam = untrained_translator_and_its_beams()
    export(trained, tmp_path / "deploy", formats=("saved_model",), beam_size=4, verbose=False)
    saved = tf.saved_model.load(str(tmp_path / "deploy" / "saved_model" / "kformer" / "1"))
    translations = saved.signatures["serving_default"](texts=tf.constant(BEAM_SENTENCES))["translations"].numpy()
    assert [text.decode() for text in translations] == beam
    # search_ids: every hypothesis, best first, with the Translator's own log-probabilities and GNMT scores.
    translator = Translator(trained, beam_size=4)
    encoder = trained.source_tokenizer.tokenize(BEAM_SENTENCES).to_tensor()
    served = saved.signatures["search_ids"](encoder_tokens=encoder)
    tokens, log_probs = (to_numpy(x) for x in translator.search_ids(encoder))
    np.testing.assert_array_equal(served["output_tokens"].numpy(), tokens)
    np.testing.assert_allclose(served["log_probs"].numpy(), log_probs, rtol=1e-5)
    lengths = (tokens != PAD_ID).sum(2)
    scores = served["scores"].numpy()
    np.testing.assert_allclose(scores, log_probs / ((5 + lengths) / 6) ** 0.6, rtol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first


@pytest.mark.slow
def test_a_beam_export_decodes_with_beams_in_every_runtime_that_bakes_it_in(tmp_path):
    """`kformer export --beam 4`: the SavedModel, TFLite and ONNX artifacts give Keras' beam-4 translations.

    Through the command, with the formats, the TF Serving name and the version given as flags.
    (CTranslate2 takes the beam size at run time and scores length its own way: its client
    documents that its beams can differ.)
    """
    trained, beam = untrained_translator_and_its_beams()
    trained.save(tmp_path / "model")
    out = tmp_path / "deploy"
    command = ["--quiet", "export", "--model", str(tmp_path / "model"), "--out", str(out), "--beam", "4"]
    assert main([*command, "--formats", "saved_model, tflite,onnx", "--name", "translator", "--version", "3"]) == 0
    assert not (out / "ctranslate2").exists()
    for client, extra, refused in [
        ("tflite_client.py", [], NOT_NEEDED),
        ("tflite_client.py", ["--strings"], ("kformer",)),
        ("onnx_client.py", [], NOT_NEEDED),
    ]:
        result = run_client(client, str(out), *extra, *BEAM_SENTENCES, refused=refused)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.splitlines() == beam, (client, extra)
    printed = run_fresh_python(
        f"""
        import json, tensorflow as tf, tensorflow_text
        serve = tf.saved_model.load("{out}/saved_model/translator/3").signatures["serving_default"]
        print(json.dumps([t.decode() for t in serve(texts=tf.constant({BEAM_SENTENCES!r}))["translations"].numpy()]))
        """,
        cwd=tmp_path,
    )
    assert json.loads(printed.strip().splitlines()[-1]) == beam
