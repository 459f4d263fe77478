"""build_transformer and build_decoder_only: wiring, masks, tying, precision."""

import keras
import numpy as np
import pytest
from conftest import to_numpy

from kformer import build_decoder_only, build_transformer

SMALL = dict(d_model=16, num_heads=2, num_layers=2, d_ff=32)
rng = np.random.default_rng(3)


def tokens(batch, length, vocab=20):
    return rng.integers(4, vocab, size=(batch, length)).astype("int32")


@pytest.fixture(scope="module")
def transformer():
    return build_transformer(20, 30, **SMALL)


def test_inputs_and_outputs(transformer):
    assert [i.name for i in transformer.inputs] == ["encoder_tokens", "decoder_tokens"]
    assert all(keras.backend.standardize_dtype(i.dtype) == "int32" for i in transformer.inputs)
    logits = transformer([tokens(3, 7), tokens(3, 5)])
    assert logits.shape == (3, 5, 30)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert {"encoder", "decoder"} <= {layer.name for layer in transformer.layers}


def test_source_padding_reaches_every_cross_attention(transformer):
    source, target = tokens(2, 6), tokens(2, 4)
    source[1, 3:] = 0
    unpadded = to_numpy(transformer([source[1:, :3], target[1:]]))[0]
    np.testing.assert_allclose(to_numpy(transformer([source, target]))[1], unpadded, atol=1e-5)
    # A real source token does matter: cross-attention is live.
    changed = source.copy()
    changed[1, 0] = 19 if source[1, 0] != 19 else 18
    assert not np.allclose(to_numpy(transformer([changed, target]))[1], unpadded, atol=1e-4)


def test_decoder_never_sees_future_target_tokens(transformer):
    source, target = tokens(1, 6), tokens(1, 6)
    before = to_numpy(transformer([source, target]))
    for t in range(5):
        changed = target.copy()
        changed[0, t + 1 :] = tokens(1, 5 - t)
        np.testing.assert_allclose(to_numpy(transformer([source, changed]))[:, : t + 1], before[:, : t + 1], atol=1e-5)


def test_target_padding_does_not_change_real_positions(transformer):
    source, target = tokens(1, 5), tokens(1, 4)
    padded = np.concatenate([target, np.zeros((1, 3), "int32")], axis=1)
    np.testing.assert_allclose(
        to_numpy(transformer([source, padded]))[:, :4], to_numpy(transformer([source, target])), atol=1e-5
    )


def test_tied_embeddings_project_with_the_embedding_table():
    tied = build_transformer(20, 30, tie_embeddings=True, **SMALL)
    untied = build_transformer(20, 30, **SMALL)
    assert untied.count_params() - tied.count_params() == 16 * 30 + 30  # the Dense kernel and bias
    decoder = tied.get_layer("decoder")
    states = rng.standard_normal((1, 3, 16)).astype("float32")
    table = to_numpy(decoder.embedding.token_embedding.embeddings)
    np.testing.assert_allclose(to_numpy(decoder.logits(states)), states @ table.T, atol=1e-5)


def test_three_way_tying_is_one_table_for_both_languages_and_the_output(tmp_path):
    shared = build_transformer(30, 30, tie_embeddings=True, share_embeddings=True, **SMALL)
    tied = build_transformer(30, 30, tie_embeddings=True, **SMALL)
    assert tied.count_params() - shared.count_params() == 30 * 16  # the decoder's own table is gone
    table = shared.get_layer("encoder").embedding.token_embedding.embeddings
    source, target = tokens(2, 5, vocab=30), tokens(2, 4, vocab=30)
    before = to_numpy(shared([source, target]))
    # A change to one row moves the encoder's input, the decoder's input and the output projection alike.
    row = int(target[0, 0])
    values = to_numpy(table)
    values[row] += 1.0
    table.assign(values)
    first_position = [0.0, 1.0] * 8  # sin 0, cos 0, interleaved
    for stack in ("encoder", "decoder"):
        embedded = to_numpy(shared.get_layer(stack).embedding(target[:1, :1]))[0, 0]
        np.testing.assert_allclose(embedded, values[row] * 4.0 + first_position, atol=1e-5)  # scaled by sqrt(16)
    states = rng.standard_normal((1, 3, 16)).astype("float32")
    np.testing.assert_allclose(to_numpy(shared.get_layer("decoder").logits(states)), states @ values.T, atol=1e-5)
    assert not np.allclose(to_numpy(shared([source, target])), before)
    # Saved and loaded, the table is still one.
    shared.save(tmp_path / "shared.keras")
    loaded = keras.saving.load_model(tmp_path / "shared.keras")
    assert loaded.get_layer("encoder").embedding is loaded.get_layer("decoder").embedding
    np.testing.assert_allclose(to_numpy(loaded([source, target])), to_numpy(shared([source, target])), atol=1e-6)
    with pytest.raises(ValueError, match="sizes differ: 20 and 30"):
        build_transformer(20, 30, share_embeddings=True, **SMALL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_only_is_causal(norm_first):
    model = build_decoder_only(25, norm_first=norm_first, **SMALL)
    assert [i.name for i in model.inputs] == ["decoder_tokens"]
    sequence = tokens(2, 6, vocab=25)
    before = to_numpy(model(sequence))
    assert before.shape == (2, 6, 25)
    changed = sequence.copy()
    changed[:, 3:] = tokens(2, 3, vocab=25)
    np.testing.assert_allclose(to_numpy(model(changed))[:, :3], before[:, :3], atol=1e-5)


def test_a_decoder_only_model_has_the_translators_defaults_and_takes_its_settings():
    """Its defaults are the encoder-decoder's decoder's; pre-LN and tying reach its decoder."""
    defaults = build_decoder_only(100).get_layer("decoder").get_config()
    translators = build_transformer(100, 100).get_layer("decoder").get_config()
    for key in ("d_model", "num_heads", "num_layers", "d_ff", "dropout", "norm_first", "tie_embeddings"):
        assert defaults[key] == translators[key], key
    assert defaults["cross_attention"] is False and translators["cross_attention"] is True
    pre_ln = build_decoder_only(25, norm_first=True, **SMALL).get_layer("decoder")
    assert pre_ln.final_norm is not None and all(block.norm_first for block in pre_ln.blocks)
    tied, untied = build_decoder_only(25, tie_embeddings=True, **SMALL), build_decoder_only(25, **SMALL)
    assert untied.count_params() - tied.count_params() == 16 * 25 + 25  # no output kernel and bias of its own


def without(config, key):
    return {name: value for name, value in config.items() if name != key}


def test_release_0_1_0s_shared_table_config_builds_todays_transformer_with_one_table():
    """The config release 0.1.0 saved for a shared vocabulary, read from its model file."""
    import json
    import zipfile

    from conftest import REPO

    from kformer.model import SharedEmbeddingTransformer, Transformer

    with zipfile.ZipFile(REPO / "tests/data/release-0.1.0/translator/model.keras") as archive:
        saved = json.loads(archive.read("config.json"))
    assert saved["class_name"] == "SharedEmbeddingTransformer" and saved["config"]["vocab_size"] == 191
    model = SharedEmbeddingTransformer.from_config(dict(saved["config"]))
    assert type(model) is Transformer and model.get_layer("encoder").embedding is model.get_layer("decoder").embedding
    config = model.get_config()
    assert (config["src_vocab_size"], config["tgt_vocab_size"], config["share_embeddings"]) == (191, 191, True)
    assert {key: config[key] for key in saved["config"] if key != "vocab_size"} == without(
        saved["config"], "vocab_size"
    )


def test_a_transformers_config_rebuilds_it_with_its_name_and_settings():
    from kformer.model import Transformer

    settings = dict(d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.3, norm_first=True)
    model = build_transformer(20, 30, tie_embeddings=True, name="my_translator", **settings)
    again = Transformer.from_config(model.get_config())
    assert again.name == "my_translator" and again.get_config() == model.get_config()
    assert again.count_params() == model.count_params() and again.get_layer("decoder").final_norm is not None
    for stack in ("encoder", "decoder"):  # each setting reaches both stacks and their blocks
        config = again.get_layer(stack).get_config()
        assert {key: config[key] for key in settings} == settings, stack
        for block in again.get_layer(stack).blocks:
            assert (block.dropout, block.norm_first, block.layer_norm_epsilon) == (0.3, True, 1e-6), stack
        assert again.get_layer(stack).final_norm.epsilon == 1e-6  # the blocks' epsilon, not Keras's 1e-3
    assert build_transformer(20, 30, **SMALL).name == build_transformer(20, 30, **SMALL).name == "transformer"
    assert build_transformer(20, 30, trainable=False, **SMALL).trainable is False  # Keras's own arguments reach it


def test_a_stack_built_alone_has_the_models_defaults():
    """`Encoder` and `Decoder` are public layers: without dropout, pre-LN or tying given they are as in a model."""
    from kformer.model import Decoder, Encoder

    model = build_transformer(20, 20, **SMALL)
    sizes = (SMALL["d_model"], SMALL["num_heads"], SMALL["num_layers"], SMALL["d_ff"])
    for alone, stack in ((Encoder(20, *sizes), "encoder"), (Decoder(20, *sizes), "decoder")):
        assert without(alone.get_config(), "name") == without(model.get_layer(stack).get_config(), "name"), stack


def test_pre_ln_stack_ends_with_a_layer_norm():
    model = build_transformer(20, 30, norm_first=True, **SMALL)
    assert model.get_layer("encoder").final_norm is not None
    assert build_transformer(20, 30, **SMALL).get_layer("encoder").final_norm is None


@pytest.mark.parametrize("tie_embeddings", [False, True])
def test_mixed_precision_keeps_logits_float32(tie_embeddings):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_transformer(20, 20, tie_embeddings=tie_embeddings, **SMALL)  # tied: the table is float32
        logits = model([tokens(2, 5), tokens(2, 4)])
        assert keras.backend.standardize_dtype(logits.dtype) == "float32"
        assert np.isfinite(to_numpy(logits)).all()
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_the_embeddings_are_dropped_while_training():
    """Every block's dropout switched off, training still drops: the dropout on embedding + position."""
    model = build_transformer(20, 20, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.5)
    encoder = model.get_layer("encoder")
    for block in encoder.blocks:
        for layer in (block.residual_dropout, block.self_attention.attention_dropout):
            layer.rate = 0.0
    tokens = np.random.default_rng(0).integers(1, 20, size=(2, 6)).astype("int32")
    encoder.embedding_dropout.rate = 0.0
    np.testing.assert_allclose(to_numpy(encoder(tokens, training=True)), to_numpy(encoder(tokens)), atol=1e-6)
    encoder.embedding_dropout.rate = 0.5
    assert not np.allclose(to_numpy(encoder(tokens, training=True)), to_numpy(encoder(tokens)), atol=1e-3)


def test_saved_weights_load_into_a_model_built_later_whatever_keras_has_named_since(tmp_path):
    """Keras keeps a list's layers in a weights file under their names: the blocks are named block_0, block_1, ...
    in every model, not by Keras's running count, which other models built in between move on."""
    model = build_transformer(20, 30, **SMALL)
    model.save_weights(tmp_path / "model.weights.h5")
    build_transformer(20, 30, **SMALL)  # Keras's counts of its layers' names move on
    later = build_transformer(20, 30, **SMALL)
    later.load_weights(tmp_path / "model.weights.h5")
    sources, targets = tokens(2, 5, vocab=20), tokens(2, 4, vocab=30)
    np.testing.assert_array_equal(to_numpy(later([sources, targets])), to_numpy(model([sources, targets])))
    assert [block.name for block in later.get_layer("decoder").blocks] == ["block_0", "block_1"]


def test_a_stacks_attention_weights_are_each_blocks_own_causal_and_blind_to_source_padding():
    """What attention maps and alignments read (`run_with_attention`): the states of the stack's own call, and for
    each block its weights, each row a distribution: the decoder's causal, its cross-attention's zero on [PAD]."""
    from kformer.layers import make_padding_mask

    model = build_transformer(20, 30, **SMALL)
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    source, target = np.array([[5, 6, 7, 0, 0]], "int32"), np.array([[2, 8, 9, 10]], "int32")
    context, encoder_weights = encoder.run_with_attention(source)
    np.testing.assert_allclose(to_numpy(context), to_numpy(encoder(source)), atol=1e-6)
    mask = make_padding_mask(source)
    states, decoder_weights = decoder.run_with_attention(target, context, mask)
    called = decoder(target, context=context, context_padding_mask=mask)
    np.testing.assert_allclose(to_numpy(decoder.logits(states)), to_numpy(called), atol=1e-5)
    assert len(encoder_weights) == len(decoder_weights) == SMALL["num_layers"]
    for block in decoder_weights:
        own, cross = to_numpy(block["self_attention"])[0], to_numpy(block["cross_attention"])[0]  # (H, T, T), (H, T, S)
        np.testing.assert_allclose(own.sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
        assert np.all(np.triu(own, k=1) == 0) and np.all(cross[..., 3:] == 0)
    assert all(to_numpy(block["self_attention"])[0][..., 3:].max() == 0 for block in encoder_weights)  # [PAD] keys
