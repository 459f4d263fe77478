"""kformer.teaching.mvp: seed 003's eight stages as models, and the failures each one fixes."""

import keras
import numpy as np
import pytest
from conftest import to_numpy
from keras import ops

import kformer
from kformer.data.corpus import builtin_splits, held_out_pairs, role_swap_pairs
from kformer.data.text import Tokenizer, build_vocabulary
from kformer.inference.decoding import decode
from kformer.teaching import mvp

SOURCE_VOCAB, TARGET_VOCAB = 30, 40


@pytest.fixture(scope="module")
def tiny_corpus():
    splits = builtin_splits(train_size=256, valid_size=8, test_size=8)
    source = Tokenizer(build_vocabulary([s for s, _ in splits["train"]], 200))
    target = Tokenizer(build_vocabulary([t for _, t in splits["train"]], 200))
    return splits["train"], source, target


def random_tokens(rows, length, vocab, rng):
    return rng.integers(1, vocab, size=(rows, length)).astype("int32")


def call(model, encoder_tokens, decoder_tokens):
    if mvp.reads_whole_target(model):
        return to_numpy(model([encoder_tokens, decoder_tokens], training=False))
    return to_numpy(model(encoder_tokens, training=False))


@pytest.mark.parametrize("stage", range(1, 9))
def test_every_stage_trains_saves_and_loads(stage, tiny_corpus, tmp_path):
    pairs, source, target = tiny_corpus
    model = mvp.compile_mvp(mvp.build_mvp(stage, source.vocab_size, target.vocab_size, d_model=16, num_layers=2))
    data = mvp.stage_dataset(model, pairs, source, target, batch_size=32, max_length=16)
    history = model.fit(data, epochs=3, verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]

    path = tmp_path / f"stage_{stage}.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    (inputs, _) = next(iter(data))
    encoder_tokens = inputs if not mvp.reads_whole_target(model) else inputs[0]
    decoder_tokens = None if not mvp.reads_whole_target(model) else inputs[1]
    np.testing.assert_array_equal(
        call(model, encoder_tokens, decoder_tokens), call(restored, encoder_tokens, decoder_tokens)
    )


def test_stage_shapes():
    rng = np.random.default_rng(0)
    source, target = random_tokens(2, 5, SOURCE_VOCAB, rng), random_tokens(2, 3, TARGET_VOCAB, rng)
    for stage in range(1, 9):
        model = mvp.build_mvp(stage, SOURCE_VOCAB, TARGET_VOCAB, d_model=16)
        expected = (2, 3, TARGET_VOCAB) if stage >= 4 else (2, TARGET_VOCAB)
        assert call(model, source, target).shape == expected, stage


def test_stage_8_is_the_full_transformer_and_stage_7_has_one_layer():
    stage_7 = mvp.build_mvp(7, SOURCE_VOCAB, TARGET_VOCAB, d_model=16, num_layers=3)
    stage_8 = mvp.build_mvp(8, SOURCE_VOCAB, TARGET_VOCAB, d_model=16, num_layers=3)
    reference = kformer.build_transformer(SOURCE_VOCAB, TARGET_VOCAB, d_model=16, num_heads=4, num_layers=3, d_ff=64)
    assert stage_8.count_params() == reference.count_params()
    assert len(stage_7.get_layer("encoder").blocks) == 1
    assert len(stage_8.get_layer("encoder").blocks) == 3


@pytest.mark.parametrize("stage", [1, 2, 3, 4, 5, 6])
def test_only_stage_5_on_sees_word_order(stage):
    """Stages 1-4 give the same output for any order of the source words; from stage 5 the order matters."""
    rng = np.random.default_rng(stage)
    model = mvp.build_mvp(stage, SOURCE_VOCAB, TARGET_VOCAB, d_model=16)
    source = random_tokens(3, 6, SOURCE_VOCAB, rng)
    shuffled = source[:, rng.permutation(6)]
    target = random_tokens(3, 4, TARGET_VOCAB, rng)
    original, permuted = call(model, source, target), call(model, shuffled, target)
    if stage <= 4:
        np.testing.assert_allclose(original, permuted, rtol=0, atol=1e-6)
    else:
        assert np.abs(original - permuted).max() > 1e-4  # a hundred times the float error allowed above


@pytest.mark.parametrize("stage", [1, 2, 3, 4, 5, 6])
def test_source_padding_changes_nothing(stage):
    rng = np.random.default_rng(10 + stage)
    model = mvp.build_mvp(stage, SOURCE_VOCAB, TARGET_VOCAB, d_model=16)
    source = random_tokens(2, 5, SOURCE_VOCAB, rng)
    padded = np.concatenate([source, np.zeros((2, 3), "int32")], axis=1)
    target = random_tokens(2, 4, TARGET_VOCAB, rng)
    np.testing.assert_allclose(call(model, source, target), call(model, padded, target), atol=1e-5)


@pytest.mark.parametrize("stage", [4, 5, 6])
def test_the_decoder_never_reads_future_target_tokens(stage):
    rng = np.random.default_rng(20 + stage)
    model = mvp.build_mvp(stage, SOURCE_VOCAB, TARGET_VOCAB, d_model=16)
    source, target = random_tokens(2, 5, SOURCE_VOCAB, rng), random_tokens(2, 6, TARGET_VOCAB, rng)
    changed = target.copy()
    changed[:, 3:] = random_tokens(2, 3, TARGET_VOCAB, rng)
    np.testing.assert_allclose(call(model, source, target)[:, :3], call(model, source, changed)[:, :3], atol=1e-5)


def test_dot_product_self_attention_is_the_seeds_part_2_formula():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(2, 4, 3)).astype("float32")
    z, weights = mvp.DotProductSelfAttention()(e, return_attention_scores=True)
    scores = np.einsum("bid,bjd->bij", e, e)  # e_i . e_j, no scaling
    expected = np.exp(scores - scores.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(to_numpy(weights), expected, atol=1e-6)
    np.testing.assert_allclose(to_numpy(z), expected @ e, atol=1e-5)


def test_stage_1_averages_only_the_real_tokens():
    model = mvp.build_mvp(1, SOURCE_VOCAB, TARGET_VOCAB, d_model=8)
    table = to_numpy(model.get_layer("embedding").embeddings)
    tokens = np.array([[3, 5, 7, 0, 0]], "int32")
    average = to_numpy(keras.Model(model.input, model.get_layer("average").output)(tokens))
    np.testing.assert_allclose(average[0], table[[3, 5, 7]].mean(0), atol=1e-6)


def test_greedy_decode_matches_the_cached_decoder_of_a_full_transformer():
    rng = np.random.default_rng(3)
    model = mvp.build_mvp(8, SOURCE_VOCAB, TARGET_VOCAB, d_model=16, num_layers=2)
    source = random_tokens(4, 6, SOURCE_VOCAB, rng)
    plain = mvp.greedy_decode(model, ops.convert_to_tensor(source), 10)
    cached = to_numpy(decode(model, ops.convert_to_tensor(source), 10))
    np.testing.assert_array_equal(plain, cached[:, : plain.shape[1]])


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="stage must be one of 1-8"):
        mvp.build_mvp(9, SOURCE_VOCAB, TARGET_VOCAB)


def test_role_swap_pairs_are_the_same_words_with_different_translations():
    train = [english for english, _ in builtin_splits()["train"]]
    pairs = role_swap_pairs(150, exclude=train)
    assert len(pairs) == 300
    assert not set(train) & {english for english, _ in pairs}
    held_out = held_out_pairs()
    for (english, spanish), (twin_english, twin_spanish) in zip(pairs[::2], pairs[1::2], strict=True):
        assert sorted(english.split()) == sorted(twin_english.split()) and english != twin_english
        assert spanish != twin_spanish
        words = english.split()
        assert not any((a, n) in held_out for a, n in zip(words, words[1:], strict=False))
        assert " a " in f" {spanish} " or " al " in f" {spanish} "  # the animate object's personal "a"
