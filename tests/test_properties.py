"""Property-based tests (hypothesis): tokenization round trips, one translation per input, masks on random shapes.

Each property runs on many generated examples (`max_examples` below); the
docs/reliability.md counts them.
"""

import string

import numpy as np
import pytest
import tensorflow as tf
from conftest import copy_task_model, to_numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kformer import make_causal_mask, make_padding_mask
from kformer.data.text import Tokenizer, build_vocabulary
from kformer.layers.attention import combine_masks, key_padding_mask, scaled_dot_product_attention

LETTERS = string.ascii_letters + "áéíóúüñÁÉÍÓÚÑ"
OPENING, CLOSING = "¿¡([{«", ".,!?;:%)]}»…"
EXAMPLES = {"round trip": 300, "idempotence": 300, "translator": 60, "masks": 200}


def examples(name):
    # The fixtures are read-only, shared by every example.
    return settings(
        max_examples=EXAMPLES[name], deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )


@pytest.fixture(scope="module")
def tokenizer():
    # Every letter, alone and as a word piece, is in the vocabulary: no [UNK] in what is generated below.
    corpus = [" ".join(LETTERS), "".join(LETTERS), OPENING + " " + CLOSING + " ' \" -", "el gato negro duerme"] * 5
    return Tokenizer(build_vocabulary(corpus, vocab_size=400))


def round_trip(tokenizer, text):
    return tokenizer.detokenize(tokenizer.tokenize(tf.constant([text]))).numpy()[0].decode()


words = st.builds(
    lambda opening, word, closing: opening + word + closing,
    st.text(st.sampled_from(OPENING), max_size=1),
    st.text(st.sampled_from(LETTERS), min_size=1, max_size=12),
    st.text(st.sampled_from(CLOSING), max_size=2),
)


@settings(
    max_examples=EXAMPLES["round trip"], deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(words, min_size=1, max_size=12))
def test_normally_spaced_text_round_trips_exactly(tokenizer, sentence):
    """Words with opening punctuation before and closing punctuation after, one space apart: back unchanged.

    The documented normalisation is only this spacing (and NFC); punctuation
    between digits ("2:30") is the one place where spacing is ambiguous.
    """
    text = " ".join(sentence)
    assert round_trip(tokenizer, text) == text


@settings(
    max_examples=EXAMPLES["idempotence"], deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(st.sampled_from(LETTERS + OPENING + CLOSING + "'\"- \t\n"), max_size=60))
def test_any_text_is_normalised_once_and_for_all(tokenizer, text):
    """Arbitrary spacing and punctuation: one round trip reaches the normal form, a second changes nothing."""
    once = round_trip(tokenizer, text)
    assert round_trip(tokenizer, once) == once
    assert once.split() == once.split(" ") or once == ""  # single spaces, no leading or trailing space
    assert [c for c in once if not c.isspace()] == [c for c in text if not c.isspace()]  # nothing lost or added


@pytest.fixture(scope="module")
def translator():
    from kformer import Translator

    return Translator(copy_task_model())


@pytest.mark.slow  # 23 s: many random batches through the translator
@settings(
    max_examples=EXAMPLES["translator"], deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(max_size=40), max_size=24))
def test_translator_gives_one_string_per_input_for_any_unicode(translator, texts):
    translations = translator.translate(texts)
    assert len(translations) == len(texts) and all(isinstance(t, str) for t in translations)


def reference_attention(query, key, value, mask):
    """NumPy: softmax over allowed keys only; a query with none gets zero weights."""
    scores = query @ np.swapaxes(key, -1, -2) / np.sqrt(query.shape[-1])
    scores = np.where(mask, scores, -np.inf)
    peak = np.max(scores, axis=-1, keepdims=True)
    exp = np.where(mask, np.exp(scores - np.where(np.isfinite(peak), peak, 0.0)), 0.0)
    total = exp.sum(-1, keepdims=True)
    weights = np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)
    return weights @ value, weights


@examples("masks")
@given(
    batch=st.integers(1, 3),
    target=st.integers(1, 7),
    source=st.integers(1, 7),
    causal=st.booleans(),
    self_attention=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_masks_on_random_shapes_match_numpy(batch, target, source, causal, self_attention, seed):
    """Padding (keys), causal (self-attention) and cross-attention masks, combined as the layers do."""
    rng = np.random.default_rng(seed)
    keys = target if self_attention else source
    lengths = rng.integers(0, keys + 1, size=batch)  # 0: a sequence of padding only, every row masked
    tokens = np.where(np.arange(keys)[None, :] < lengths[:, None], rng.integers(1, 9, (batch, keys)), 0)
    masks = [key_padding_mask(make_padding_mask(tokens))]  # (B, 1, S)
    if causal and self_attention:
        masks.append(make_causal_mask(target))  # (1, T, T)
    mask = to_numpy(combine_masks(*masks))
    # The reference mask, built without kformer: key j is visible to query i if it is a real token
    # and, causally, j <= i.
    full_mask = np.broadcast_to((tokens != 0)[:, None, :], (batch, target, keys))
    if causal and self_attention:
        full_mask = full_mask & np.tril(np.ones((target, keys), bool))
    np.testing.assert_array_equal(np.broadcast_to(mask, full_mask.shape), full_mask)
    query, key = rng.normal(size=(batch, target, 4)), rng.normal(size=(batch, keys, 4))
    value = rng.normal(size=(batch, keys, 3))
    output, weights = scaled_dot_product_attention(*(v.astype("float32") for v in (query, key, value)), mask)
    expected_output, expected_weights = reference_attention(query, key, value, full_mask)
    np.testing.assert_allclose(to_numpy(weights), expected_weights, atol=1e-5)
    np.testing.assert_allclose(to_numpy(output), expected_output, atol=1e-5)
    dead = ~full_mask.any(-1)
    assert np.all(to_numpy(output)[dead] == 0.0)
