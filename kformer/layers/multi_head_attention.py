"""The projections shared by self- and cross-attention.

Self- and cross-attention differ only in which tensors are passed: queries
always come from `x`; keys and values from `x` itself or from `context`.
"""

import keras
from keras import ops

from kformer.layers.attention import make_causal_mask, scaled_dot_product_attention
from kformer.layers.dropout import Dropout
from kformer.layers.validation import check_float, check_positive_int, check_rank


class MultiHeadAttentionBase(keras.layers.Layer):
    """Per-head W_Q, W_K, W_V projections, scaled dot-product attention, W_O.

    Subclasses decide where keys and values come from and which mask applies;
    use `MultiHeadSelfAttention` or `CrossAttention`.

    The weights have the shapes of `keras.layers.MultiHeadAttention`'s, in the
    same order, so weights move between the two with `set_weights`:
    W_Q, W_K, W_V `(D, H, K)` with biases `(H, K)`, W_O `(H, K, D)` with bias `(D,)`.

    Args: as `MultiHeadSelfAttention`'s, without `causal`.
    """

    def __init__(self, num_heads, d_model, head_dim=None, dropout=0.0, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        check_positive_int("d_model", d_model)
        if head_dim is None:
            if d_model % num_heads:
                raise ValueError(
                    f"d_model={d_model} is not divisible by num_heads={num_heads}; change one of them or pass head_dim."
                )
            head_dim = d_model // num_heads
        check_positive_int("head_dim", head_dim)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got dropout={dropout!r}.")
        self.num_heads = num_heads
        self.d_model = d_model
        self.head_dim = head_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.supports_masking = True
        self.attention_dropout = Dropout(dropout, dtype=self.dtype_policy)

    def _build_projections(self, x_shape, context_shape):
        check_rank("x", x_shape, 3)
        check_rank("context", context_shape, 3)
        if x_shape[-1] != self.d_model:
            raise ValueError(f"{self.name}: x has width {x_shape[-1]} but d_model={self.d_model}; they must match.")
        if context_shape[-1] is None:
            raise ValueError(f"{self.name}: context needs a known last dimension, got {context_shape}.")
        heads = (self.num_heads, self.head_dim)
        self.query_kernel, self.query_bias = self._projection("query", x_shape[-1], heads)
        self.key_kernel, self.key_bias = self._projection("key", context_shape[-1], heads)
        self.value_kernel, self.value_bias = self._projection("value", context_shape[-1], heads)
        self.output_kernel, self.output_bias = self._projection("output", heads, (self.d_model,))

    def _projection(self, name, in_shape, out_shape):
        in_shape = in_shape if isinstance(in_shape, tuple) else (in_shape,)
        kernel = self.add_weight(name=f"{name}_kernel", shape=in_shape + out_shape, initializer="glorot_uniform")
        bias = self.add_weight(name=f"{name}_bias", shape=out_shape, initializer="zeros") if self.use_bias else None
        return kernel, bias

    def project(self, x, *names, fused=False):
        """`x` `(B, T, D_in)` through the named projections ("query", "key", "value"): one `(B, H, T, K)` each.

        Each projection is a 2-D matmul, `(B*T, D_in) @ (D_in, H*K)`. A 2-D
        matmul, rather than an einsum over `(B, T)`, has a 2-D gradient too:
        TensorFlow differentiates the einsum into one kernel gradient per
        example and a sum over them, 11% of a training step under XLA
        (`bench/RESULTS.md`). With `fused=True` (training) the projections run
        as one matmul against their kernels side by side, which with its
        gradient is faster than three; the weights stay separate. Inference
        keeps them apart: side by side, the kernels are copied into one buffer
        on every call, 9% of a batch-1 translation's time.
        """
        check_float("x", x)
        batch, length = ops.shape(x)[0], ops.shape(x)[1]
        projected = []
        for group in [names] if fused else [(name,) for name in names]:
            # Cast, as Keras autocasts variables only inside the layer's own __call__ (mixed precision).
            kernel = ops.concatenate([getattr(self, f"{name}_kernel") for name in group], axis=1)  # (D_in, n*H, K)
            d_in, heads, head_dim = kernel.shape
            kernel = ops.reshape(ops.cast(kernel, x.dtype), (d_in, heads * head_dim))
            rows = ops.matmul(ops.reshape(x, (-1, d_in)), kernel)  # (B*T, n*H*K)
            if self.use_bias:
                bias = ops.concatenate([getattr(self, f"{name}_bias") for name in group], axis=0)  # (n*H, K)
                rows += ops.reshape(ops.cast(bias, x.dtype), (heads * head_dim,))
            together = ops.reshape(rows, (batch, length, heads, head_dim))
            projected += ops.split(ops.transpose(together, (0, 2, 1, 3)), len(group), axis=1)  # n x (B, H, T, K)
        return projected

    def _attend(self, x, context, attention_mask, training, cache=None, cache_index=None):
        """Project -> attend -> mix: queries from `x` `(B, T, D)`, keys and values from `context` or `cache`.

        Args:
            context: `(B, S, D_context)`; `x` itself for self-attention.
            attention_mask: None or bool, broadcastable to `(B, T, S)`.
            cache: None; or the `(key, value)` of a context, computed once by
                `project(context, "key", "value")` (cross-attention while
                decoding): `context` is then not read, and the cache may hold
                one row for every n rows of `x` (a sentence's beams,
                sentence-major), which attend together as n times T queries;
                or, with `cache_index`, buffers `(B, H, L, K)` that the keys
                and values of `x` are written into at positions `cache_index`
                onwards, read whole, each query masked to the positions up to
                its own.

        Returns:
            `(output (B, T, D), weights (B, H, T, keys), cache)`: keys are S, or L
            (the buffer's length after the write).
        """
        check_float("x", x)
        if cache is not None and cache_index is None:
            key, value = cache
            queries = ops.reshape(x, (ops.shape(key)[0], -1, self.d_model))  # (B_context, n*T, D)
            output, weights = self._mix(self.project(queries, "query")[0], key, value, attention_mask, training)
            return ops.reshape(output, ops.shape(x)), weights, cache
        batch, context_batch = x.shape[0], context.shape[0]
        if batch is not None and context_batch is not None and batch != context_batch:
            raise ValueError(
                f"{self.name}: x holds {batch} sequences but context {context_batch}; each sequence attends "
                "to its own context, so give them the same batch size."
            )
        fused = bool(training)  # see `project`
        if context is x:
            query, key, value = self.project(x, "query", "key", "value", fused=fused)
        else:
            (query,), (key, value) = self.project(x, "query"), self.project(context, "key", "value", fused=fused)
        if cache is not None:
            key, value = cache = (_write(cache[0], cache_index, key), _write(cache[1], cache_index, value))
            attention_mask = make_causal_mask(ops.shape(x)[1], ops.shape(key)[2], start=cache_index)  # (1, T, L)
        return (*self._mix(query, key, value, attention_mask, training), cache)

    def _mix(self, query, key, value, attention_mask, training):
        """softmax(Q K^T / sqrt(d_k)) V per head, then W_O: `(output (B, T, D), weights (B, H, T, S))`."""
        if attention_mask is not None:
            attention_mask = ops.expand_dims(attention_mask, 1)  # (B, 1, T, S): every head
        heads, weights = scaled_dot_product_attention(
            query, key, value, attention_mask, dropout=lambda w: self.attention_dropout(w, training=training)
        )  # (B, H, T, K), (B, H, T, S)
        batch, length = ops.shape(heads)[0], ops.shape(heads)[2]
        concatenated = ops.reshape(ops.transpose(heads, (0, 2, 1, 3)), (-1, self.num_heads * self.head_dim))
        kernel = ops.reshape(ops.cast(self.output_kernel, heads.dtype), (self.num_heads * self.head_dim, self.d_model))
        output = ops.reshape(ops.matmul(concatenated, kernel), (batch, length, self.d_model))  # (B, T, D), as project
        return output if self.output_bias is None else output + ops.cast(self.output_bias, output.dtype), weights

    def compute_mask(self, x, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            d_model=self.d_model,
            head_dim=self.head_dim,
            dropout=self.dropout,
            use_bias=self.use_bias,
        )
        return config


def _write(buffer, index, new):
    """buffer[:, :, index : index + T] = new for a cache `(B, H, L, K)` and `new` `(B, H, T, K)`.

    A scatter: written in place under XLA, and it converts to ONNX, where a
    dynamic slice update does not (tf2onnx has no XlaDynamicUpdateSlice).
    """
    shape = ops.shape(new)
    rows, heads, positions = ops.meshgrid(
        ops.arange(shape[0]), ops.arange(shape[1]), index + ops.arange(shape[2]), indexing="ij"
    )  # (B, H, T) each
    return ops.scatter_update(buffer, ops.stack([rows, heads, positions], axis=-1), ops.cast(new, buffer.dtype))
