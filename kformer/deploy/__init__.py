"""Deployment: the writer side of `kformer export` (the clients live in the top-level `export/` folder).

- `export`: one writer per format, the manifest, the finished folder put in place at once.
- `tflite_converter`: signatures to TFLite, builtin ops only, in a process of its own.
- `ctranslate2_spec`: the translator's weights as a CTranslate2 model spec.
"""

# The formats `export` writes and the quantized TFLite variants it can add (the CLI's choices).
FORMATS = ("saved_model", "tflite", "onnx", "ctranslate2")
QUANTIZATIONS = ("float16", "int8")
