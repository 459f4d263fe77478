"""Deployment artifacts of a trained model: SavedModel (TF Serving), TFLite, ONNX and CTranslate2.

    EXPORT_DIR/
      saved_model/<name>/<version>/   TF Serving layout; signatures serving_default
                                      (texts -> translations), translate_ids (ids ->
                                      output_tokens, log_probs) and search_ids (ids ->
                                      every hypothesis: output_tokens, log_probs, scores)
      serving/models.config           TF Serving model config
      serving/request.json            a REST predict request ({"instances": [...]})
      serving/response.json           the response the model gives to it
      tflite/translate_ids.tflite     ids in, ids and log_probs out, decoding loop included, builtin ops only
      tflite/translate_ids_float16.tflite, translate_ids_int8.tflite   quantized variants
      tflite/translate.tflite         strings in, strings out, with tensorflow-text's TFLite ops
      onnx/translate_ids.onnx         ids in, ids and log_probs out (ONNX Loop), opset 17
      onnx/forward.onnx, tflite/forward.tflite   teacher-forced logits, for parity checks
      ctranslate2/                    a CTranslate2 model (model.bin, vocabularies): pieces in, pieces out
      ctranslate2_int8/, ctranslate2_float16/   its quantized variants
      source_vocab.txt, target_vocab.txt, manifest.json

A language model (`kformer train --task lm`) exports the same way with
`generate_ids` in place of `translate_ids` (prompt ids in, greedy continuation
ids out), `serving_default` taking prompts and returning continuations, no
source vocabulary and no string TFLite model.

Everything is written into a temporary directory beside EXPORT_DIR and renamed
into place at the end, so an export that fails leaves nothing that looks complete.
The TFLite and ONNX converters run in subprocesses (the TFLite converter leaks
memory on every call), one a format. Each format is one writer function in `WRITERS`.
"""

import dataclasses
import errno
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import keras
import tensorflow as tf

from kformer.data.sentences import BOUNDARY as SENTENCE_BOUNDARY
from kformer.data.sentences import SENTENCE_RULES
from kformer.data.text import RESERVED_TOKENS, SPACING_RULES
from kformer.deploy import FORMATS, QUANTIZATIONS
from kformer.files import require_space, umask
from kformer.model_dir import TrainedModel, load
from kformer.training.tasks import task_of

EXAMPLE_SENTENCES = ["the black cat sleeps", "the cats that the girl sees sleep"]


class ExportError(ValueError):
    """A bad export request; the message names the argument or path and what to do."""


def _check_request(formats, quantize, out):
    for kind, given, known in (("format", formats, FORMATS), ("quantization", quantize, QUANTIZATIONS)):
        unknown = [value for value in given if value not in known]
        if unknown:
            raise ExportError(f"unknown {kind} {unknown[0]!r}; choose from {', '.join(known)}.")
    for format_name in formats:
        missing = [package for package in NEEDS.get(format_name, ()) if importlib.util.find_spec(package) is None]
        if missing:
            raise ExportError(
                f"the {format_name} format needs {', '.join(missing)}, which is not installed; "
                "install it with: pip install 'kformer[export]'."
            )
    if quantize and "tflite" not in formats and "ctranslate2" not in formats:
        raise ExportError("--quantize applies to TFLite and CTranslate2; add tflite or ctranslate2 to --formats.")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise ExportError(f"{parent}: the directory to export into does not exist.")
    if not os.access(parent, os.W_OK):
        raise ExportError(f"{parent}: cannot write there; choose another --out.")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out}: already exists and is not empty; remove it or choose another --out.")


def _in_float32(trained):
    """`trained`, or when it computes in 16 bits (`--mixed-precision`), its float32 twin with the same weights.

    Mixed precision keeps the weights in float32 and computes in float16 or
    bfloat16; TFLite cannot convert bfloat16 ops, and an export is float32
    unless quantized (`quantize`). The twin is the model's own config with
    every dtype policy made float32, built under the float32 policy.
    """
    if trained.model.compute_dtype == "float32":
        return trained
    config = _float32_policies(keras.saving.serialize_keras_object(trained.model))
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        twin = keras.saving.deserialize_keras_object(config)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    twin.set_weights(trained.model.get_weights())
    return dataclasses.replace(trained, model=twin)


def _float32_policies(node):
    """A serialized Keras object with each DTypePolicy's name made "float32"."""
    if isinstance(node, dict):
        if node.get("class_name") == "DTypePolicy":
            return {**node, "config": {**node["config"], "name": "float32"}}
        return {key: _float32_policies(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_float32_policies(item) for item in node]
    return node


class _Endpoints(tf.Module):
    """The functions the artifacts are made of, with fixed input signatures.

    `runner` is a `Translator` or a `Generator` (`task.runner`): both take texts
    (`__call__`) and token ids (the method named by their `ids_name`), and name
    what their texts come out as (`text_output`). `serve_ids` serves that method's
    outputs, `serve_more` the other id signatures of the task (`task.id_functions`).
    """

    def __init__(self, task, runner):
        super().__init__()
        self.runner, self.model, self.ids_name = runner, runner.model, runner.ids_name
        self.serve_texts = tf.function(
            lambda texts: {runner.text_output: runner(texts)},
            input_signature=[tf.TensorSpec([None], tf.string, name="texts")],
        )
        ids = getattr(runner, runner.ids_name).input_signature
        functions = {name: tf.function(f, input_signature=ids) for name, f in task.id_functions(runner).items()}
        self.serve_ids = functions.pop(runner.ids_name)
        self.serve_more = functions
        # (encoder_tokens,) decoder_tokens
        model_inputs = [tf.TensorSpec(x.shape, x.dtype, name=x.name) for x in self.model.inputs]
        self.forward = tf.function(
            lambda *tokens: {"logits": self.model(list(tokens) if len(tokens) > 1 else tokens[0], training=False)},
            input_signature=model_inputs,
        )


def _tflite_text_endpoint(translator):
    """Strings in, strings out with only ops that TFLite builtins or tensorflow-text's TFLite kernels run.

    Unlike `Translator.__call__` it does no NFC normalisation, no spacing
    rules and no sentence splitting (TFLite has no regex): word pieces come back
    joined by spaces, and the client splits sentences and applies the spacing
    rules (see export/tflite_client.py). A long sentence is translated in
    pieces, as `__call__` does (`Translator.translate_tokens`).
    """
    source, target = translator.source_tokenizer, translator.target_tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def translate(texts):
        output, _ = translator.translate_tokens(source.tokenize(texts, normalize_text=False))  # (B, None)
        return {"translations": target.detokenize(output, spacing=False)}

    return translate


def _keras_archive(trained, path, endpoints, include_text):
    """A SavedModel written by keras.export.ExportArchive: the route TFLite converts reliably."""
    archive = keras.export.ExportArchive()
    archive.track(trained.model)
    archive.add_endpoint(endpoints.ids_name, endpoints.serve_ids)
    archive.add_endpoint("forward", endpoints.forward)
    if include_text:
        archive.track(trained.source_tokenizer)
        archive.track(trained.target_tokenizer)
        archive.add_endpoint("translate", _tflite_text_endpoint(endpoints.runner))
    archive.write_out(str(path), verbose=False)


def _run(args, what):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(args, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise ExportError(f"{what} failed:\n{result.stderr[-3000:]}")


def _tflite(conversions):
    """Writes each of `conversions` (dicts of `tflite_converter.convert`'s arguments and an output path)."""
    args = [sys.executable, "-m", "kformer.deploy.tflite_converter", json.dumps(conversions, default=str)]
    _run(args, f"TFLite conversion of {', '.join(c['signature'] for c in conversions)}")


# tf2onnx's own command, once a signature, in one process: one TensorFlow import an export, not one a file.
_ONNX_PROGRAM = """
import sys
from tf2onnx import convert
saved, *jobs = sys.argv[1:]
for signature, output in zip(jobs[::2], jobs[1::2]):
    sys.argv = ["tf2onnx.convert", "--saved-model", saved, "--signature_def", signature, "--opset", "17"]
    sys.argv += ["--output", output]
    convert.main()
"""


def _onnx(saved, outputs):
    """Converts each signature of `saved` in `outputs` ({signature: output path}) to ONNX."""
    args = [sys.executable, "-c", _ONNX_PROGRAM, str(saved)]
    _run(args + [str(a) for item in outputs.items() for a in item], f"ONNX conversion of {', '.join(outputs)}")


class _Job:
    """What the format writers share: the model, the staging folder, the endpoints, the settings."""

    def __init__(self, trained, staging, endpoints, converted_endpoints, quantize, name, version, say):
        self.trained, self.staging, self.endpoints = trained, staging, endpoints
        self.converted_endpoints = converted_endpoints  # without XLA: what TFLite and ONNX convert
        self.quantize, self.name, self.version, self.say = quantize, name, version, say
        self._id_archive = None

    def id_archive(self):
        """The text-free ExportArchive of the id endpoints (TFLite and ONNX convert it), made once."""
        if self._id_archive is None:
            self._id_archive = self.staging / ".archive"
            _keras_archive(self.trained, self._id_archive, self.converted_endpoints, include_text=False)
        return self._id_archive

    def finish(self):
        if self._id_archive is not None:
            shutil.rmtree(self._id_archive)


def _shape_checked(endpoint):
    """`endpoint` checking its input's rank first: a SavedModel signature (and TF Serving) passes any shape.

    Without it a rank-1 `encoder_tokens` fails deep in the decoder ("Index out
    of range using input dim 1"); with it the error names the input and the shape it needs.
    """
    (spec,) = endpoint.input_signature

    @tf.function(input_signature=[spec])
    def checked(tensor):
        return endpoint(tf.ensure_shape(tensor, spec.shape))

    return checked


def _write_saved_model(job):
    job.say("Writing the SavedModel for TF Serving ...")
    endpoints = job.endpoints
    serving = job.staging / "saved_model" / job.name / str(job.version)
    signatures = {
        "serving_default": _shape_checked(endpoints.serve_texts),
        endpoints.ids_name: _shape_checked(endpoints.serve_ids),
    }
    signatures.update({name: _shape_checked(function) for name, function in endpoints.serve_more.items()})
    tf.saved_model.save(endpoints, str(serving), signatures=signatures)
    _serving_files(job.staging / "serving", job.name, endpoints)


def _write_tflite(job):
    tflite, ids_name = job.staging / "tflite", job.endpoints.ids_name
    tflite.mkdir()
    conversions = [
        dict(saved_model=job.id_archive(), signature=ids_name, output=tflite / f"{ids_name}{suffix}.tflite", quantize=q)
        for q, suffix in [(None, ""), *((q, f"_{q}") for q in job.quantize)]
    ]
    conversions.append(dict(saved_model=job.id_archive(), signature="forward", output=tflite / "forward.tflite"))
    text_archive = None
    if task_of(job.trained).tflite_text:  # strings in, strings out
        text_archive = job.staging / ".text-archive"
        _keras_archive(job.trained, text_archive, job.converted_endpoints, include_text=True)
        conversions.append(
            dict(saved_model=text_archive, signature="translate", output=tflite / "translate.tflite", custom_ops=True)
        )
    job.say(f"Converting to TFLite: {', '.join(c['output'].name for c in conversions)} ...")
    _tflite(conversions)
    if text_archive is not None:
        shutil.rmtree(text_archive)


def _write_onnx(job):
    job.say("Converting to ONNX ...")
    onnx, ids_name = job.staging / "onnx", job.endpoints.ids_name
    onnx.mkdir()
    _onnx(job.id_archive(), {ids_name: onnx / f"{ids_name}.onnx", "forward": onnx / "forward.onnx"})


def _write_ctranslate2(job):
    from kformer.deploy.ctranslate2_spec import write_ctranslate2

    for quantize in (None, *job.quantize):
        job.say(f"Converting to CTranslate2{f' ({quantize})' if quantize else ''} ...")
        suffix = f"_{quantize}" if quantize else ""
        write_ctranslate2(job.trained, job.staging / f"ctranslate2{suffix}", quantization=quantize)


# One writer per format: a new format is a function here and a name in kformer.deploy.FORMATS.
WRITERS = {
    "saved_model": _write_saved_model,
    "tflite": _write_tflite,
    "onnx": _write_onnx,
    "ctranslate2": _write_ctranslate2,
}
# Packages a format's writer needs beyond TensorFlow (the `export` extra installs them).
NEEDS = {"onnx": ("tf2onnx",), "ctranslate2": ("ctranslate2",)}


def _serving_files(directory, name, endpoints):
    request = {"instances": EXAMPLE_SENTENCES}
    (outputs,) = endpoints.serve_texts(tf.constant(EXAMPLE_SENTENCES)).values()
    response = {"predictions": [t.decode("utf-8") for t in outputs.numpy()]}
    directory.mkdir(parents=True)
    config = f"""\
        model_config_list {{
          config {{
            name: "{name}"
            base_path: "/models/{name}"
            model_platform: "tensorflow"
          }}
        }}
        """
    (directory / "models.config").write_text(textwrap.dedent(config))
    (directory / "request.json").write_text(json.dumps(request, ensure_ascii=False, indent=2) + "\n")
    (directory / "response.json").write_text(json.dumps(response, ensure_ascii=False, indent=2) + "\n")


def export(
    model,
    out,
    formats=FORMATS,
    quantize=(),
    name="kformer",
    version=1,
    beam_size=1,
    length_penalty=None,
    max_new_tokens=50,
    xla=False,
    verbose=True,
):
    """Writes the deployment artifacts of a trained model (see the module docstring for the layout).

    Args:
        model: a model directory or a loaded `TrainedModel`.
        out: the export directory to create (must not exist, or be empty).
        formats: any of `kformer.deploy.FORMATS`: "saved_model", "tflite", "onnx", "ctranslate2".
        quantize: TFLite and CTranslate2 variants to add: "float16", "int8" (int8 weights).
        name, version: the TF Serving model name and version directory.
        beam_size: the decoding a translator's artifacts run (1 = greedy).
        length_penalty: GNMT's alpha, by which a translator's beam search ranks its
            hypotheses and `search_ids` scores them (None: `Translator`'s, 0.6);
            recorded in the manifest, whence the CTranslate2 client takes its default.
        max_new_tokens: the most tokens a language model's artifacts write
            after a prompt (greedily).
        xla: the SavedModel's translator decodes under XLA (`Translator(xla=True)`):
            2.2x faster a request at batch 1 on CPU (bench/RESULTS.md); TensorFlow loads and runs it
            anywhere, but TF Serving runs XLA on CPU only when started with
            `--xla_cpu_compilation_enabled=true` (experimental; tensorflow/serving#1858),
            so it is not the default. TFLite and ONNX always convert the plain loop. A
            language model's export refuses it, as it refuses beam search.

    A model trained in mixed precision is exported in float32 (its weights
    are float32 already): the artifacts translate as the model would with
    float32 arithmetic.

    Returns:
        The manifest: what was written, with file sizes in bytes.
    """
    out, formats, quantize = Path(out), tuple(formats), tuple(quantize)
    _check_request(formats, quantize, out)
    trained = _in_float32(model if isinstance(model, TrainedModel) else load(model))
    task = task_of(trained)
    formats, skipped = _formats_for(task, formats, quantize)
    try:  # a setting the task's runner refuses is refused before any work
        settings = dict(beam_size=beam_size, length_penalty=length_penalty, max_new_tokens=max_new_tokens)
        endpoints = _Endpoints(task, task.runner(trained, **settings, xla=xla))
        converted = _Endpoints(task, task.runner(trained, **settings)) if xla else endpoints
    except ValueError as error:
        raise ExportError(str(error)) from None
    needed = _bytes_written(trained, formats, quantize)
    require_space(out, needed, "this export", ExportError)
    staging = _staging(out)

    def say(message):
        if verbose:
            print(message, flush=True)

    try:
        for tokenizer, side in ((trained.source_tokenizer, "source"), (trained.target_tokenizer, "target")):
            if tokenizer is not None:  # a language model has no source side
                tokenizer.save(staging / f"{side}_vocab.txt")
        job = _Job(trained, staging, endpoints, converted, quantize, name, version, say)
        for format_name, reason in skipped.items():
            say(f"Skipping {format_name}: {reason}.")
        for format_name in formats:
            WRITERS[format_name](job)
        job.finish()
        decoding = task.manifest(endpoints.runner)
        settings = {"beam_size": beam_size, "xla": endpoints is not converted, "decoding": decoding}
        manifest = _write_manifest(staging, trained, formats, skipped, quantize, name, version, settings)
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(staging, out)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if _disk_full(error):
            raise ExportError(
                f"{out}: the disk filled up while exporting, and nothing was left there; this export needs about "
                f"{needed / 2**20:,.0f} MiB: free some space or choose another --out."
            ) from None
        raise
    say(f"Exported {', '.join(formats)} to {out}/.")
    return manifest


def _formats_for(task, formats, quantize):
    """The formats a model of `task` exports, and {format: why not} for those it skips."""
    skipped = {f: f"not exported for a {task.noun}" for f in formats if f in task.unexported}
    formats = tuple(f for f in formats if f not in skipped)
    if skipped and not formats:
        others = ", ".join(f for f in FORMATS if f not in task.unexported)
        raise ExportError(f"{', '.join(skipped)}: not exported for a {task.noun}; export it as {others}.")
    if skipped and quantize and "tflite" not in formats:
        raise ExportError(
            f"--quantize applies to TFLite here (a {task.noun} has no {', '.join(skipped)} export); "
            "add tflite to --formats."
        )
    return formats, skipped


def _bytes_written(trained, formats, quantize):
    """The bytes an export writes, about: 4 a weight for each artifact.

    The artifacts: the SavedModel and the archive the converters read; TFLite's
    ids, forward and text models and each quantized variant; ONNX's two
    models; CTranslate2 and each variant (quantized ones count as whole, to spare).
    """
    copies = {"saved_model": 2, "tflite": 3 + len(quantize), "onnx": 2, "ctranslate2": 1 + len(quantize)}
    return 4 * trained.model.count_params() * sum(copies[f] for f in formats)


def _disk_full(error):
    """Whether `error` says the disk is full: Python's ENOSPC, or TensorFlow's (SaveV2 raises ResourceExhausted)."""
    if isinstance(error, OSError):
        return error.errno == errno.ENOSPC
    return isinstance(error, tf.errors.ResourceExhaustedError) or "No space left on device" in str(error)


def _staging(out):
    """A fresh folder beside `out` to write into (renamed to `out` at the end); a killed export's leftovers go."""
    for leftover in out.resolve().parent.glob(f".{glob.escape(out.name)}.partial-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        staging = Path(tempfile.mkdtemp(dir=out.resolve().parent, prefix=f".{out.name}.partial-"))
    except OSError as error:
        raise ExportError(f"{out}: cannot write there ({error.strerror}); choose another --out.") from None
    os.chmod(staging, 0o777 & ~umask())  # mkdtemp's 0700 would hide the export from a serving account
    return staging


def _write_manifest(staging, trained, formats, skipped, quantize, name, version, settings):
    """manifest.json: what was exported, how it decodes, the text rules, and every file's size in bytes."""
    files = {
        str(path.relative_to(staging)): path.stat().st_size
        for path in sorted(staging.rglob("*"))
        if path.is_file() and path.relative_to(staging).parts[0] != "saved_model"
    }
    if "saved_model" in formats:
        files["saved_model/"] = sum(p.stat().st_size for p in (staging / "saved_model").rglob("*") if p.is_file())
    manifest = {
        "kind": trained.kind,
        "formats": list(formats),
        **({"skipped": skipped} if skipped else {}),
        "quantize": list(quantize),
        "name": name,
        "version": version,
        "beam_size": settings["beam_size"],
        "xla": settings["xla"],
        "max_length": trained.max_length,
        **settings["decoding"],  # the task's (`task.manifest`)
        "reserved_tokens": list(RESERVED_TOKENS),
        "spacing_rules": [list(rule) for rule in SPACING_RULES],
        "sentence_rules": [list(rule) for rule in SENTENCE_RULES],
        "sentence_boundary": SENTENCE_BOUNDARY,
        "files": files,
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest
