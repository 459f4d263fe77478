"""Early argument checks whose messages name the argument and its value."""

from keras import backend


def check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {name}={value!r}.")


def check_rank(name, shape, rank):
    if shape is None or len(shape) != rank:
        raise ValueError(f"{name} must have rank {rank}, got shape {shape}.")


def check_float(name, tensor):
    dtype = backend.standardize_dtype(tensor.dtype)
    if "float" not in dtype:
        raise ValueError(f"{name} must be a float tensor (embeddings, not token ids), got dtype {dtype}.")


def check_int(name, tensor):
    dtype = backend.standardize_dtype(tensor.dtype)
    if "int" not in dtype:
        raise ValueError(f"{name} must hold integer token ids, got dtype {dtype}.")
