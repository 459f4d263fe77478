"""kformer.teaching.mvp: seed 003's eight stages as models, and the failures each one fixes."""

import keras
import numpy as np
import pytest
from conftest import run_fresh_python, to_numpy
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


@pytest.mark.parametrize("stage", range(9))
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
    for stage in range(9):
        model = mvp.build_mvp(stage, SOURCE_VOCAB, TARGET_VOCAB, d_model=16)
        expected = (2, TARGET_VOCAB) if 1 <= stage <= 3 else (2, 3, TARGET_VOCAB)
        assert call(model, source, target).shape == expected, stage


def test_stage_8_is_the_full_transformer_and_stage_7_has_one_layer():
    stage_7 = mvp.build_mvp(7, SOURCE_VOCAB, TARGET_VOCAB, d_model=16, num_layers=3)
    stage_8 = mvp.build_mvp(8, SOURCE_VOCAB, TARGET_VOCAB, d_model=16, num_layers=3)
    reference = kformer.build_transformer(SOURCE_VOCAB, TARGET_VOCAB, d_model=16, num_heads=4, num_layers=3, d_ff=64)
    assert stage_8.count_params() == reference.count_params()
    assert len(stage_7.get_layer("encoder").blocks) == 1
    assert len(stage_8.get_layer("encoder").blocks) == 3


@pytest.mark.parametrize("stage", [0, 1, 2, 3, 4, 5, 6])
def test_only_stage_5_on_sees_word_order(stage):
    """Stages 1-4 give the same output for any order of the source words; from stage 5 (and the GRU) it matters."""
    rng = np.random.default_rng(stage)
    model = mvp.build_mvp(stage, SOURCE_VOCAB, TARGET_VOCAB, d_model=16)
    source = random_tokens(3, 6, SOURCE_VOCAB, rng)
    shuffled = source[:, rng.permutation(6)]
    target = random_tokens(3, 4, TARGET_VOCAB, rng)
    original, permuted = call(model, source, target), call(model, shuffled, target)
    if 1 <= stage <= 4:
        np.testing.assert_allclose(original, permuted, rtol=0, atol=1e-6)
    else:
        assert np.abs(original - permuted).max() > 1e-4  # a hundred times the float error allowed above


@pytest.mark.parametrize("stage", [0, 1, 2, 3, 4, 5, 6])
def test_source_padding_changes_nothing(stage):
    rng = np.random.default_rng(10 + stage)
    model = mvp.build_mvp(stage, SOURCE_VOCAB, TARGET_VOCAB, d_model=16)
    source = random_tokens(2, 5, SOURCE_VOCAB, rng)
    padded = np.concatenate([source, np.zeros((2, 3), "int32")], axis=1)
    target = random_tokens(2, 4, TARGET_VOCAB, rng)
    np.testing.assert_allclose(call(model, source, target), call(model, padded, target), atol=1e-5)


@pytest.mark.parametrize("stage", [0, 4, 5, 6])
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


def test_stage_0_decoder_reads_the_source_only_through_the_encoders_last_state():
    """The logits are the decoder GRU started from the encoder's last state, with nothing else taken from the source."""
    rng = np.random.default_rng(4)
    model = mvp.build_mvp(0, SOURCE_VOCAB, TARGET_VOCAB, d_model=16, units=8)
    source, target = random_tokens(2, 5, SOURCE_VOCAB, rng), random_tokens(2, 4, TARGET_VOCAB, rng)
    embedded = model.get_layer("source_embedding")(source)
    _, summary = model.get_layer("encoder_gru")(embedded)
    decoder = keras.Model(model.inputs[1], model.get_layer("target_embedding").output)
    x = model.get_layer("decoder_gru")(decoder(target), initial_state=summary)
    np.testing.assert_allclose(call(model, source, target), to_numpy(model.get_layer("logits")(x)), atol=1e-5)
    assert model.get_layer("encoder_gru").units == 8 and not [
        layer for layer in model.layers if "attention" in layer.name
    ]


def test_stage_0_with_attention_reads_every_encoder_state_as_luongs_global_attention():
    """NumPy reference: c_t = softmax_s(q_t . k_s / sqrt(u)) v_s through one head's projections, padding never read,
    then logits = W (tanh(W_c [c_t; h_t] + b_c)) + b."""
    rng = np.random.default_rng(5)
    model = mvp.build_mvp(0, SOURCE_VOCAB, TARGET_VOCAB, d_model=16, units=8, attention=True)
    source, target = random_tokens(2, 5, SOURCE_VOCAB, rng), random_tokens(2, 4, TARGET_VOCAB, rng)
    source[0, 3:] = 0  # the first sentence has 3 tokens
    states, summary = (to_numpy(t) for t in model.get_layer("encoder_gru")(model.get_layer("source_embedding")(source)))
    decoder = keras.Model(model.inputs[1], model.get_layer("target_embedding").output)
    h = to_numpy(model.get_layer("decoder_gru")(decoder(target), initial_state=summary))  # (B, T, u)
    attention = model.get_layer("attention")
    q, k, v = (
        np.einsum("btu,uhk->bhtk", x, to_numpy(w))
        for x, w in [(h, attention.query_kernel), (states, attention.key_kernel), (states, attention.value_kernel)]
    )
    scores = np.where(source[:, None, None, :] > 0, q @ k.transpose(0, 1, 3, 2) / np.sqrt(8), -np.inf)  # (B, 1, T, S)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    c = np.einsum("bhtk,hku->btu", weights @ v, to_numpy(attention.output_kernel))  # (B, T, u)
    kernel, bias = (to_numpy(w) for w in model.get_layer("attentional").weights)
    out_kernel, out_bias = (to_numpy(w) for w in model.get_layer("logits").weights)
    expected = np.tanh(np.concatenate([c, h], -1) @ kernel + bias) @ out_kernel + out_bias
    np.testing.assert_allclose(call(model, source, target), expected, atol=1e-5)
    with pytest.raises(ValueError, match="attention is for stage 0"):
        mvp.build_mvp(5, SOURCE_VOCAB, TARGET_VOCAB, attention=True)


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="stage must be one of 0-8"):
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


def _part_model(parts, d_model=16):
    return mvp.build_mvp(7, SOURCE_VOCAB, TARGET_VOCAB, d_model=d_model, num_heads=4, parts=parts)


def _layer_outputs(model, names, source, target):
    outputs = keras.Model(model.inputs, [model.get_layer(name).output for name in names])([source, target])
    return [to_numpy(output) for output in outputs]


def _layer_norm(x, epsilon=1e-6):  # gamma = 1, beta = 0, as a fresh LayerNormalization holds them
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + epsilon)


def test_stage_7_parts_add_to_stage_6_exactly_the_parameters_of_each_part():
    d, d_ff = 16, 64
    stage_6 = mvp.build_mvp(6, SOURCE_VOCAB, TARGET_VOCAB, d_model=d, num_heads=4).count_params()
    assert _part_model(()).count_params() == stage_6
    assert _part_model(("residual",)).count_params() == stage_6
    assert _part_model(("norm",)).count_params() == stage_6 + 3 * 2 * d  # gamma and beta after each attention
    assert _part_model(("feed_forward",)).count_params() == stage_6 + 2 * (d * d_ff + d_ff + d_ff * d + d)


@pytest.mark.parametrize("residual", [False, True])
def test_stage_7_residual_part_carries_the_token_past_a_silenced_attention(residual):
    """With every attention weight zero, only a residual connection lets the decoder's token reach the logits."""
    rng = np.random.default_rng(30)
    model = _part_model(("residual",) if residual else ())
    for name in ("encoder_attention", "decoder_attention", "cross_attention"):
        layer = model.get_layer(name)
        layer.set_weights([np.zeros_like(w) for w in layer.get_weights()])
    source, target = random_tokens(2, 5, SOURCE_VOCAB, rng), random_tokens(2, 4, TARGET_VOCAB, rng)
    embedded, logits = _layer_outputs(model, ["target_embedding", "logits"], source, target)
    kernel, bias = model.get_layer("logits").get_weights()
    expected = embedded @ kernel + bias if residual else np.broadcast_to(bias, logits.shape)
    np.testing.assert_allclose(logits, expected, atol=1e-5)


def test_stage_7_all_parts_are_the_papers_post_norm_sublayers():
    """Each sub-layer output is LayerNorm(x + sublayer(x)), the FFN's included (the paper's section 3.1)."""
    rng = np.random.default_rng(31)
    model = _part_model(mvp.STAGE_7_PARTS)
    source, target = random_tokens(2, 5, SOURCE_VOCAB, rng), random_tokens(2, 4, TARGET_VOCAB, rng)
    x, y, out = _layer_outputs(
        model, ["cross_attention_norm", "decoder_feed_forward", "decoder_feed_forward_norm"], source, target
    )
    np.testing.assert_allclose(out, _layer_norm(x + y), atol=1e-4)
    embedded, attended, normed = _layer_outputs(
        model, ["target_embedding", "decoder_attention", "decoder_attention_norm"], source, target
    )
    np.testing.assert_allclose(normed, _layer_norm(embedded + attended), atol=1e-4)


def test_stage_7_parts_are_refused_for_other_stages_and_unknown_parts():
    with pytest.raises(ValueError, match="parts is for stage 7"):
        mvp.build_mvp(6, SOURCE_VOCAB, TARGET_VOCAB, parts=("residual",))
    with pytest.raises(ValueError, match="parts is for stage 7"):
        mvp.build_mvp(7, SOURCE_VOCAB, TARGET_VOCAB, parts=("dropout",))


def test_stage_scores_count_twins_sentences_and_verbs_as_documented(monkeypatch):
    """Canned outputs in place of a model's, so each score can be counted by hand."""
    twins = [("a b", "el x"), ("b a", "la y"), ("c d", "un z"), ("d c", "un w")]
    test_pairs = [("e", "t1"), ("f", "t2")]
    agreement = [
        ("g", "p duermen", "duermen", "duerme"),
        ("h", "q come", "come", "comen"),
        ("i", "r baila", "baila", "bailan"),
        ("j", "s salta", "salta", "saltan"),
        ("k", "u durmieron", "durmieron", "durmió"),  # the past tense: plural subjects, durmió the attractor's
        ("l", "v camina", "camina", "caminan"),
        ("m", "w durmieron", "durmieron", "durmió"),
    ]
    canned = {
        "a b": "el x",
        "b a": "la y",
        "c d": "una z",  # the only first word wrong, in the pair whose first words agree
        "d c": "un w",  # sentences right: 3 of 4; both twins right: pair 1 only
        "e": "t1",
        "f": "no",  # test split: 1 of 2
        "g": "p duermen",
        "h": "q comen",
        "i": "r nada",
        "j": "s saltan salta",  # both forms: it agrees, and is not attracted
        "k": "u durmió",  # attracted, in the past: attracted 2 of 7 (h, k)
        "l": "v el gato",  # ends in no verb: 6 of 7 do
        "m": "w durmieron",  # agrees: 3 of 7 (g, j, m)
    }
    monkeypatch.setattr(mvp, "reads_whole_target", lambda model: True)
    monkeypatch.setattr(mvp, "translate", lambda model, sentences, *_: [canned[s] for s in sentences])
    monkeypatch.setattr(mvp, "first_tokens", lambda model, sentences, *_: [canned[s].split()[0] for s in sentences])
    scores, outputs = mvp.stage_scores(None, twins, test_pairs, None, None, agreement)
    assert outputs == ["el x", "la y", "una z", "un w"]
    assert scores == {
        "first word": 0.75,
        "first word, both twins": 1.0,  # only pair 1's first words differ (el / la), and both are right
        "sentence": 0.75,
        "sentence, both twins": 0.5,
        "test split": 0.5,
        "verb agrees": pytest.approx(3 / 7),
        "verb attracted": pytest.approx(2 / 7),
        "verb number": pytest.approx(4 / 6),  # duermen, nada, salta, durmieron as their subjects; not comen, durmió
        "ends in a verb": pytest.approx(6 / 7),
    }


def test_a_saved_stage_loads_in_a_fresh_process_once_kformer_teaching_is_imported(tmp_path):
    """The stage models register with `kformer.teaching` (as the notebooks import it), not with `import kformer`."""
    path = tmp_path / "stage_2.keras"
    mvp.build_mvp(2, 20, 20, d_model=16).save(path)  # stage 2: DotProductSelfAttention, the course's own layer
    code = f"""
    import sys, keras, kformer
    print("kformer.teaching" in sys.modules)
    import kformer.teaching
    print(type(keras.saving.load_model({str(path)!r}).get_layer("attention")).__name__)
    """
    assert run_fresh_python(code, tmp_path).split() == ["False", "DotProductSelfAttention"]


def test_train_stage_seeds_keras_with_stage_plus_ten_times_seed(tiny_corpus):
    """Seed 1 of stage 5 starts from the weights Keras' seed 15 draws; seed 0 of stage 5 from another draw."""
    pairs, source, target = tiny_corpus
    untrained, _ = mvp.train_stage(5, pairs, source, target, seed=1, epochs=0, d_model=16)
    keras.utils.set_random_seed(15)
    reference = mvp.build_mvp(5, source.vocab_size, target.vocab_size, d_model=16)
    for ours, theirs in zip(untrained.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    other, _ = mvp.train_stage(5, pairs, source, target, seed=0, epochs=0, d_model=16)
    assert not np.array_equal(other.get_weights()[0], reference.get_weights()[0])
