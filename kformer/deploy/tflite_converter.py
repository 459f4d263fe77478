"""Converts signatures of SavedModels to TFLite, builtin ops only; run as a program.

    python -m kformer.deploy.tflite_converter '[{"saved_model": ..., "signature": ..., "output": ...,
                                                 "quantize": null, "custom_ops": false}, ...]'

`kformer.deploy.export` runs it once an export, in a subprocess: the TF 2.21
converter leaks memory on every `convert()` call, and the process that ends
returns it (one process a file cost an export a TensorFlow import each).
"""

import json
import sys

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops a string model holds)


def convert(saved_model, signature, quantize=None, custom_ops=False):
    """The .tflite bytes of `signature`.

    Args:
        quantize: None (float32), "float16" (float16 weights) or "int8"
            (dynamic range: int8 weights, float activations).
        custom_ops: let ops that are not builtins through (tensorflow-text's
            tokenizer kernels, registered at run time); otherwise such an op
            fails the conversion rather than the device.
    """
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model, signature_keys=[signature])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = custom_ops
    if quantize:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def main(argv=None):
    (conversions,) = sys.argv[1:] if argv is None else argv
    for conversion in json.loads(conversions):
        output = conversion.pop("output")
        tflite = convert(**conversion)
        with open(output, "wb") as file:
            file.write(tflite)


if __name__ == "__main__":
    main()
