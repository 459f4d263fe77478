"""A kformer translator as a CTranslate2 model: its weights mapped onto CTranslate2's Transformer spec.

CTranslate2 (the C++ inference engine OpenNMT exports to) runs the same
architecture as kformer; only the layout of the weights differs:

- linear weights are stored (out, in), as in PyTorch; Keras kernels are (in, out),
  and kformer's attention kernels are (D, H, K) / (H, K, D), flattened here;
- self-attention's query, key and value projections are one fused linear, and
  cross-attention's key and value another;
- CTranslate2's built-in sinusoids put all the sines before all the cosines,
  kformer interleaves them (sin, cos, sin, ...): the table is given explicitly;
- embeddings are scaled by sqrt(d_model) in both, post-LN or pre-LN as trained
  (pre-LN adds the final LayerNorm), LayerNorm epsilon 1e-6 in both.

Tokens are kformer's WordPiece pieces; CTranslate2 reads them as strings and
returns strings, so a client tokenizes and detokenizes (`export/ctranslate2_client.py`).
"""

import ctranslate2
import numpy as np
from ctranslate2.specs import common_spec, transformer_spec

from kformer.data.text import END, START, UNK
from kformer.layers.positional_embedding import sinusoidal_encoding

# Rows of the position table: sources are cut to the model's max_length and
# outputs are at most max_length tokens, so this is ample.
POSITIONS = 1024


def _array(variable):
    return np.asarray(variable.numpy(), np.float32)


def _out_in(variable, input_axes=1):
    """A Keras kernel `(in..., out...)` -> CTranslate2's `(out, in)` weight, the leading `input_axes` being "in".

    Dense kernels are (in, out); attention's query/key/value kernels (D, H, K)
    and its output kernel (H, K, D), with input_axes=2.
    """
    kernel = _array(variable)
    return np.ascontiguousarray(kernel.reshape(int(np.prod(kernel.shape[:input_axes])), -1).T)


def _linear(spec, kernel, bias, input_axes=1):
    spec.weight = _out_in(kernel, input_axes)
    spec.bias = _array(bias).reshape(-1)


def _fused(spec, attention, names):
    """One linear for several projections side by side (CTranslate2 fuses Q, K and V)."""
    spec.weight = np.concatenate([_out_in(getattr(attention, f"{name}_kernel")) for name in names], axis=0)
    spec.bias = np.concatenate([_array(getattr(attention, f"{name}_bias")).reshape(-1) for name in names])


def _attention(spec, attention, norm, self_attention):
    if self_attention:
        _fused(spec.linear[0], attention, ("query", "key", "value"))
    else:
        _fused(spec.linear[0], attention, ("query",))
        _fused(spec.linear[1], attention, ("key", "value"))
    _linear(spec.linear[-1], attention.output_kernel, attention.output_bias, input_axes=2)
    _layer_norm(spec.layer_norm, norm)


def _layer_norm(spec, layer):
    spec.gamma, spec.beta = _array(layer.gamma), _array(layer.beta)


def _feed_forward(spec, feed_forward, norm):
    _linear(spec.linear_0, feed_forward.hidden.kernel, feed_forward.hidden.bias)
    _linear(spec.linear_1, feed_forward.projection.kernel, feed_forward.projection.bias)
    _layer_norm(spec.layer_norm, norm)


def _inputs(spec, stack, d_model):
    embedding = stack.embedding
    if not embedding.scale:
        spec.scale_embeddings = False
    weight = _array(embedding.token_embedding.embeddings)
    (spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings).weight = weight
    spec.position_encodings.encodings = np.asarray(sinusoidal_encoding(POSITIONS, d_model), np.float32)
    if stack.final_norm is not None:
        _layer_norm(spec.layer_norm, stack.final_norm)


def transformer_spec_of(trained):
    """The `ctranslate2.specs.TransformerSpec` holding a kformer translator's weights and vocabularies."""
    encoder, decoder = trained.model.get_layer("encoder"), trained.model.get_layer("decoder")
    first = encoder.blocks[0]
    d_model, num_heads = first.d_model, first.num_heads
    spec = transformer_spec.TransformerSpec.from_config(
        (len(encoder.blocks), len(decoder.blocks)),
        num_heads,
        pre_norm=encoder.norm_first,
        no_final_norm=not encoder.norm_first,
        activation=common_spec.Activation.RELU,
    )
    _inputs(spec.encoder, encoder, d_model)
    _inputs(spec.decoder, decoder, d_model)
    for layer_spec, block in zip(spec.encoder.layer, encoder.blocks, strict=True):
        _attention(layer_spec.self_attention, block.self_attention, block.self_attention_norm, self_attention=True)
        _feed_forward(layer_spec.ffn, block.feed_forward, block.feed_forward_norm)
    for layer_spec, block in zip(spec.decoder.layer, decoder.blocks, strict=True):
        _attention(layer_spec.self_attention, block.self_attention, block.self_attention_norm, self_attention=True)
        _attention(layer_spec.attention, block.cross_attention_layer, block.cross_attention_norm, self_attention=False)
        _feed_forward(layer_spec.ffn, block.feed_forward, block.feed_forward_norm)
    if decoder.tie_embeddings:
        spec.decoder.projection.weight = _array(decoder.embedding.token_embedding.embeddings)
    else:
        projection = decoder.output_projection
        _linear(spec.decoder.projection, projection.kernel, projection.bias)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, START, END
    spec.config.decoder_start_token = START
    spec.config.layer_norm_epsilon = float(first.layer_norm_epsilon)
    spec.register_source_vocabulary(list(trained.source_tokenizer.vocabulary))
    spec.register_target_vocabulary(list(trained.target_tokenizer.vocabulary))
    return spec


class KformerConverter(ctranslate2.converters.Converter):
    """CTranslate2's converter interface over a loaded kformer `TrainedModel` (a translator)."""

    def __init__(self, trained):
        self.trained = trained

    def _load(self):
        return transformer_spec_of(self.trained)


def write_ctranslate2(trained, directory, quantization=None):
    """Writes the CTranslate2 model directory (model.bin, vocabularies, config.json).

    Args:
        quantization: None (float32), or one of CTranslate2's types: "int8", "float16", ...
    """
    return KformerConverter(trained).convert(str(directory), quantization=quantization, force=True)
