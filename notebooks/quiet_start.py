"""Each chapter's first import: TensorFlow, started without its C++ start-up notes.

On a machine without a GPU, TensorFlow's C++ core prints, while it loads and first
looks for devices, lines such as "failed call to cuInit: INTERNAL: CUDA error" and
notes on oneDNN and CPU instructions. They are not errors (the chapters run on the
CPU), but they read like failures. This module hides what is written to the
process's standard error during that start and nothing after it; it also turns off
TensorFlow's info and warning logs from C++ (XLA's compile notes) and its info logs
from Python ("Assets written to ..."). Python's own errors and warnings still show.
`kformer`'s command line does the same. To see every line, set TF_CPP_MIN_LOG_LEVEL=0
before starting Jupyter.

`native_notes_hidden()` does the same around one call whose C++ library announces
itself on standard error, such as LiteRT's first call ("Created TensorFlow Lite
XNNPACK delegate for CPU", its fast CPU kernels).
"""

import contextlib
import os
import sys


@contextlib.contextmanager
def native_notes_hidden():
    """Standard error, as the C++ libraries write it, to /dev/null while the block runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


if os.environ.get("TF_CPP_MIN_LOG_LEVEL") != "0" and "tensorflow" not in sys.modules:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    with native_notes_hidden():
        import tensorflow as tf

        tf.config.list_physical_devices()  # the device search, where the CUDA probing is printed
    tf.get_logger().setLevel("WARNING")
