"""Deployment artifacts of a trained model: SavedModel (TF Serving), TFLite and ONNX.

    EXPORT_DIR/
      saved_model/<name>/<version>/   TF Serving layout; signatures serving_default
                                      (texts -> translations) and translate_ids
      serving/models.config           TF Serving model config
      serving/request.json            a REST predict request ({"instances": [...]})
      serving/response.json           the response the model gives to it
      tflite/translate_ids.tflite     ids in, ids out, decoding loop included, builtin ops only
      tflite/translate_ids_float16.tflite, translate_ids_int8.tflite   quantized variants
      tflite/translate.tflite         strings in, strings out, with tensorflow-text's TFLite ops
      onnx/translate_ids.onnx         ids in, ids out (ONNX Loop), opset 17
      onnx/forward.onnx, tflite/forward.tflite   teacher-forced logits, for parity checks
      source_vocab.txt, target_vocab.txt, manifest.json

Everything is written into a temporary directory beside EXPORT_DIR and renamed
into place at the end, so an export that fails leaves nothing that looks complete.
The TFLite and ONNX converters run in subprocesses (the TFLite converter leaks
memory on every call).
"""

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

from kformer.model_dir import TrainedModel, load
from kformer.translator import Translator, padded_tokens

FORMATS = ("saved_model", "tflite", "onnx")
QUANTIZATIONS = ("float16", "int8")
EXAMPLE_SENTENCES = ["the black cat sleeps", "the cats that the girl sees sleep"]


class ExportError(ValueError):
    """A bad export request; the message names the argument or path and what to do."""


def _check_request(formats, quantize, out):
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ExportError(f"unknown format {unknown[0]!r}; choose from {', '.join(FORMATS)}.")
    unknown = [q for q in quantize if q not in QUANTIZATIONS]
    if unknown:
        raise ExportError(f"unknown quantization {unknown[0]!r}; choose from {', '.join(QUANTIZATIONS)}.")
    if quantize and "tflite" not in formats:
        raise ExportError("--quantize applies to TFLite; add tflite to --formats.")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise ExportError(f"{parent}: the directory to export into does not exist.")
    if not os.access(parent, os.W_OK):
        raise ExportError(f"{parent}: cannot write there; choose another --out.")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out}: already exists and is not empty; remove it or choose another --out.")


class _Endpoints(tf.Module):
    """The functions every artifact is made of, with fixed input signatures."""

    def __init__(self, translator):
        super().__init__()
        self.translator = translator
        self.model = translator.model

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def serve_texts(self, texts):
        return {"translations": self.translator(texts)}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="encoder_tokens")])
    def serve_ids(self, encoder_tokens):
        return {"output_tokens": self.translator.translate_ids(encoder_tokens)}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32, name="encoder_tokens"),
            tf.TensorSpec([None, None], tf.int32, name="decoder_tokens"),
        ]
    )
    def forward(self, encoder_tokens, decoder_tokens):
        return {"logits": self.model([encoder_tokens, decoder_tokens], training=False)}


def _tflite_text_endpoint(translator):
    """Strings in, strings out with only ops that TFLite builtins or tensorflow-text's TFLite kernels run.

    Unlike `Translator.__call__` it does no NFC normalisation and no spacing
    rules (TFLite has no regex): pieces come back joined by spaces, and the
    client applies the spacing rules (see export/tflite_client.py).
    """
    source, target = translator.source_tokenizer, translator.target_tokenizer

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def translate(texts):
        output = translator.translate_ids(padded_tokens(source._wordpiece.tokenize(texts)))  # (B, T)
        keep = tf.logical_or(output > 3, tf.equal(output, 1))  # drop [PAD], [START], [END]; show [UNK]
        pieces = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(output, keep), tf.reduce_sum(tf.cast(keep, tf.int64), axis=1), validate=False
        )
        return {"translations": target._wordpiece.detokenize(pieces)}

    return translate


def _keras_archive(trained, path, endpoints, include_text):
    """A SavedModel written by keras.export.ExportArchive: the route TFLite converts reliably."""
    archive = keras.export.ExportArchive()
    archive.track(trained.model)
    archive.add_endpoint("translate_ids", endpoints.serve_ids)
    archive.add_endpoint("forward", endpoints.forward)
    if include_text:
        archive.track(trained.source_tokenizer)
        archive.track(trained.target_tokenizer)
        archive.add_endpoint("translate", _tflite_text_endpoint(endpoints.translator))
    archive.write_out(str(path), verbose=False)


_CONVERT_TFLITE = """
import sys, tensorflow as tf, tensorflow_text  # registers the tokenizer ops the string model holds
saved, signature, output, quantization, custom = sys.argv[1:6]
converter = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=[signature])
converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
converter.allow_custom_ops = custom == "custom"
if quantization == "float16":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_types = [tf.float16]
elif quantization == "int8":
    converter.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic range: int8 weights, float activations
open(output, "wb").write(converter.convert())
"""


def _run(args, what):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(args, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        raise ExportError(f"{what} failed:\n{result.stderr[-3000:]}")


def _tflite(saved, signature, output, quantization="none", custom=False):
    args = [sys.executable, "-c", _CONVERT_TFLITE, str(saved), signature, str(output), quantization]
    _run(args + ["custom" if custom else "builtins"], f"TFLite conversion of {signature}")


def _onnx(saved, signature, output):
    args = [sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(saved), "--signature_def", signature]
    _run(args + ["--opset", "17", "--output", str(output)], f"ONNX conversion of {signature}")


def _serving_files(directory, name, endpoints):
    request = {"instances": EXAMPLE_SENTENCES}
    translations = endpoints.serve_texts(tf.constant(EXAMPLE_SENTENCES))["translations"].numpy()
    response = {"predictions": [t.decode("utf-8") for t in translations]}
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


def export(model, out, formats=FORMATS, quantize=(), name="kformer", version=1, beam_size=1, verbose=True):
    """Writes the deployment artifacts of a trained model (see the module docstring for the layout).

    Args:
        model: a model directory or a loaded `TrainedModel`.
        out: the export directory to create (must not exist, or be empty).
        formats: any of "saved_model", "tflite", "onnx".
        quantize: TFLite variants to add: "float16", "int8" (dynamic range).
        name, version: the TF Serving model name and version directory.
        beam_size: the decoding the artifacts run (1 = greedy).

    Returns:
        The manifest: what was written, with file sizes in bytes.
    """
    out = Path(out)
    formats, quantize = tuple(formats), tuple(quantize)
    _check_request(formats, quantize, out)
    trained = model if isinstance(model, TrainedModel) else load(model)
    endpoints = _Endpoints(Translator(trained, beam_size=beam_size))
    staging = Path(tempfile.mkdtemp(dir=out.resolve().parent, prefix=f".{out.name}.partial-"))

    def say(message):
        if verbose:
            print(message, flush=True)

    try:
        trained.source_tokenizer.save(staging / "source_vocab.txt")
        trained.target_tokenizer.save(staging / "target_vocab.txt")
        if "saved_model" in formats:
            say("Writing the SavedModel for TF Serving ...")
            serving = staging / "saved_model" / name / str(version)
            tf.saved_model.save(
                endpoints,
                str(serving),
                signatures={"serving_default": endpoints.serve_texts, "translate_ids": endpoints.serve_ids},
            )
            _serving_files(staging / "serving", name, endpoints)
        if "tflite" in formats or "onnx" in formats:
            archive = staging / ".archive"
            _keras_archive(trained, archive, endpoints, include_text=False)
        if "tflite" in formats:
            (staging / "tflite").mkdir()
            for quantization in ("none", *quantize):
                suffix = "" if quantization == "none" else f"_{quantization}"
                say(f"Converting to TFLite{' (' + quantization + ')' if suffix else ''} ...")
                _tflite(archive, "translate_ids", staging / "tflite" / f"translate_ids{suffix}.tflite", quantization)
            _tflite(archive, "forward", staging / "tflite" / "forward.tflite")
            say("Converting the string-to-string TFLite variant ...")
            text_archive = staging / ".text-archive"
            _keras_archive(trained, text_archive, endpoints, include_text=True)
            _tflite(text_archive, "translate", staging / "tflite" / "translate.tflite", custom=True)
            shutil.rmtree(text_archive)
        if "onnx" in formats:
            say("Converting to ONNX ...")
            (staging / "onnx").mkdir()
            _onnx(archive, "translate_ids", staging / "onnx" / "translate_ids.onnx")
            _onnx(archive, "forward", staging / "onnx" / "forward.onnx")
        if "tflite" in formats or "onnx" in formats:
            shutil.rmtree(archive)
        manifest = {
            "formats": list(formats),
            "quantize": list(quantize),
            "name": name,
            "version": version,
            "beam_size": beam_size,
            "max_length": endpoints.translator.max_length,
            "files": {
                str(path.relative_to(staging)): path.stat().st_size
                for path in sorted(staging.rglob("*"))
                if path.is_file() and path.relative_to(staging).parts[0] != "saved_model"
            },
        }
        if "saved_model" in formats:
            saved = staging / "saved_model"
            manifest["files"]["saved_model/"] = sum(p.stat().st_size for p in saved.rglob("*") if p.is_file())
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    say(f"Exported {', '.join(formats)} to {out}/.")
    return manifest
