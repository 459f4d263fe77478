"""Config round trips, .keras files loaded in a fresh process, TFLite builtins."""

import inspect

import keras
import numpy as np
import pytest
from conftest import TINY_BATCH, run_fresh_python, tiny_seq2seq, to_numpy

from kformer import (
    CausalMask,
    CrossAttention,
    Decoder,
    Encoder,
    FeedForward,
    MultiHeadSelfAttention,
    PositionalEmbedding,
    Transformer,
    TransformerBlock,
)
from kformer.layers import Dropout
from kformer.teaching.mvp import DotProductSelfAttention

SETTINGS = [  # every argument away from its default, so a config that drops or blanks one shows
    (PositionalEmbedding, dict(vocab_size=30, d_model=8, scale=False, mask_zero=False)),
    (MultiHeadSelfAttention, dict(num_heads=2, d_model=8, head_dim=3, dropout=0.1, causal=True, use_bias=False)),
    (CrossAttention, dict(num_heads=4, d_model=8, head_dim=5, dropout=0.2, use_bias=False)),
    (FeedForward, dict(d_model=8, d_ff=24, dropout=0.3, activation="gelu")),
    (CausalMask, {}),
    (
        TransformerBlock,
        dict(
            d_model=8,
            num_heads=2,
            d_ff=16,
            dropout=0.2,
            causal=True,
            cross_attention=True,
            norm_first=True,
            layer_norm_epsilon=1e-5,
        ),
    ),
    (Dropout, dict(rate=0.3, seed=5)),
    (DotProductSelfAttention, {}),
    (Encoder, dict(vocab_size=30, d_model=8, num_heads=2, num_layers=3, d_ff=16, dropout=0.2, norm_first=True)),
    (
        Decoder,
        dict(
            vocab_size=30,
            d_model=8,
            num_heads=2,
            num_layers=3,
            d_ff=16,
            dropout=0.2,
            norm_first=True,
            cross_attention=False,
            tie_embeddings=True,
        ),
    ),
    (
        Transformer,
        dict(
            src_vocab_size=30,
            tgt_vocab_size=30,
            d_model=8,
            num_heads=2,
            num_layers=3,
            d_ff=16,
            dropout=0.2,
            norm_first=True,
            tie_embeddings=True,
            share_embeddings=True,
        ),
    ),
]
LAYERS = [cls(**arguments) for cls, arguments in SETTINGS]


@pytest.mark.parametrize(("cls", "arguments"), SETTINGS, ids=[cls.__name__ for cls, _ in SETTINGS])
def test_config_keeps_the_value_of_every_argument_given(cls, arguments):
    config = cls(**arguments).get_config()
    assert {name: config[name] for name in arguments} == arguments


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: type(layer).__name__)
def test_config_round_trip(layer):
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is type(layer) and restored.get_config() == config


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: type(layer).__name__)
def test_config_holds_every_argument_the_layer_takes(layer):
    # A Decoder's `embedding` is another stack's layer, held by reference: a shared table
    # (the Transformer's share_embeddings rebuilds the sharing).
    taken = set(inspect.signature(type(layer).__init__).parameters) - {"self", "kwargs", "embedding"}
    assert taken <= set(layer.get_config()), taken - set(layer.get_config())


def test_keras_file_loads_in_a_fresh_process_with_identical_outputs(tmp_path):
    model = tiny_seq2seq()
    expected = to_numpy(model(TINY_BATCH))
    model.save(tmp_path / "tiny.keras")
    np.save(tmp_path / "expected.npy", expected)
    np.save(tmp_path / "encoder_tokens.npy", TINY_BATCH[0])
    np.save(tmp_path / "decoder_tokens.npy", TINY_BATCH[1])
    run_fresh_python(
        """
        import keras, numpy as np
        import kformer  # registers the layers
        model = keras.saving.load_model("tiny.keras")
        actual = keras.ops.convert_to_numpy(model([np.load("encoder_tokens.npy"), np.load("decoder_tokens.npy")]))
        np.testing.assert_array_equal(actual, np.load("expected.npy"))
        """,
        cwd=tmp_path,
    )


def test_converts_to_tflite_with_builtin_ops_only_and_matches(tmp_path):
    model = tiny_seq2seq()
    np.save(tmp_path / "expected.npy", to_numpy(model(TINY_BATCH)))
    np.save(tmp_path / "encoder_tokens.npy", TINY_BATCH[0])
    np.save(tmp_path / "decoder_tokens.npy", TINY_BATCH[1])
    model.export(str(tmp_path / "saved_model"), format="tf_saved_model", verbose=False)
    # The converter leaks memory on every call, and the interpreter must not
    # lean on anything the conversion process loaded: both run apart.
    run_fresh_python(
        """
        import tensorflow as tf
        converter = tf.lite.TFLiteConverter.from_saved_model("saved_model")
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        open("model.tflite", "wb").write(converter.convert())
        """,
        cwd=tmp_path,
    )
    run_fresh_python(
        """
        import numpy as np
        from ai_edge_litert.interpreter import Interpreter
        interpreter = Interpreter(model_path="model.tflite")
        op_names = {op["op_name"] for op in interpreter._get_ops_details()}
        assert not any(name.startswith("Flex") or name == "CUSTOM" for name in op_names), op_names
        runner = interpreter.get_signature_runner()
        (output,) = runner(
            encoder_tokens=np.load("encoder_tokens.npy"), decoder_tokens=np.load("decoder_tokens.npy")
        ).values()
        np.testing.assert_allclose(output, np.load("expected.npy"), atol=1e-4)
        print(sorted(op_names))
        """,
        cwd=tmp_path,
    )
