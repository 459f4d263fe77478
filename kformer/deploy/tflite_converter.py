"""Converts one signature of a SavedModel to TFLite, builtin ops only; run as a program.

    python -m kformer.deploy.tflite_converter SAVED_MODEL SIGNATURE OUTPUT [--quantize float16|int8] [--custom-ops]

`kformer.deploy.export` runs it in a subprocess for each file, because the TF 2.21
converter leaks memory on every `convert()` call.
"""

import argparse

import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops a string model holds)

from kformer.deploy import QUANTIZATIONS


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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("saved_model")
    parser.add_argument("signature")
    parser.add_argument("output")
    parser.add_argument("--quantize", choices=QUANTIZATIONS)
    parser.add_argument("--custom-ops", action="store_true")
    args = parser.parse_args(argv)
    tflite = convert(args.saved_model, args.signature, args.quantize, args.custom_ops)
    with open(args.output, "wb") as file:
        file.write(tflite)


if __name__ == "__main__":
    main()
