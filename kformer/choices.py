"""The named choices the package accepts, in a module light enough for `kformer --help`.

The modules that act on them (training, export) and the CLI's argument
parser all read them from here, so a new strategy or format is one edit.
"""

STRATEGIES = ("default", "mirrored", "multiworker", "tpu")
FORMATS = ("saved_model", "tflite", "onnx", "ctranslate2")
QUANTIZATIONS = ("float16", "int8")
TASKS = ("translate", "lm")
SCHEDULES = ("budget", "noam")
