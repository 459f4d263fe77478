"""WordPiece tokenization and readable detokenization."""

import numpy as np
import pytest
import tensorflow as tf

from kformer.data.text import (
    END_ID,
    PAD_ID,
    RESERVED_TOKENS,
    START_ID,
    UNK_ID,
    Tokenizer,
    build_vocabularies,
    build_vocabulary,
)

SENTENCES = [
    "¿Quién se cayó?",
    "Estoy en casa.",
    "No sé, ¿y tú?",
    "¡Qué día tan bonito!",
    "Tom's dog doesn't bark.",
    'She said "hello" and left.',
    "It costs $5, not 5 €.",
    "We met at 2:30 in the well-known café.",
    "el gato negro duerme",
]


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(build_vocabulary(SENTENCES * 3, vocab_size=300))


def test_vocabulary_starts_with_the_reserved_tokens(tokenizer):
    assert tokenizer.vocabulary[:4] == RESERVED_TOKENS == ["[PAD]", "[UNK]", "[START]", "[END]"]
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_detokenize_inverts_tokenize_with_readable_punctuation(tokenizer, sentence):
    ids = tokenizer.tokenize(tf.constant([sentence]))
    assert ids.dtype == tf.int32
    assert tokenizer.detokenize(ids).numpy()[0].decode() == sentence


def test_pieces_rejoin_without_markers():
    tokenizer = Tokenizer(RESERVED_TOKENS + ["gat", "##o", "##os", "negro", "."])
    ids = tokenizer.tokenize(tf.constant(["gatos negro."]))
    assert [tokenizer.vocabulary[i] for i in ids[0].numpy()] == ["gat", "##os", "negro", "."]
    assert tokenizer.detokenize(ids).numpy()[0].decode() == "gatos negro."


def test_detokenize_drops_padding_start_and_end_but_shows_unknown(tokenizer):
    gato = [int(i) for i in tokenizer.tokenize(tf.constant(["gato"]))[0].numpy()]
    ids = tf.constant([[START_ID, *gato, UNK_ID, END_ID, PAD_ID, PAD_ID]])
    assert tokenizer.detokenize(ids).numpy()[0].decode() == "gato [UNK]"


def test_unseen_characters_become_unknown(tokenizer):
    ids = tokenizer.tokenize(tf.constant(["gato 猫 🐈"])).numpy()[0]
    assert UNK_ID not in ids[:-2] and list(ids[-2:]) == [UNK_ID, UNK_ID]


def test_input_is_nfc_normalised(tokenizer):
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    a, b = (tokenizer.tokenize(tf.constant([text])) for text in (composed, decomposed))
    np.testing.assert_array_equal(a.to_tensor().numpy(), b.to_tensor().numpy())


def test_save_and_load_round_trip(tokenizer, tmp_path):
    tokenizer.save(tmp_path / "vocab.txt")
    assert Tokenizer.load(tmp_path / "vocab.txt").vocabulary == tokenizer.vocabulary


def test_vocabulary_without_reserved_tokens_is_rejected():
    with pytest.raises(ValueError, match=r"must start with \['\[PAD\]'"):
        Tokenizer(["el", "gato"])


@pytest.mark.parametrize(
    "sentences, error, message",
    [
        ([], ValueError, "no sentences to learn a vocabulary from"),
        (["", "  ", "\t"], ValueError, "no words to learn a vocabulary from: 3 sentences, all empty or blank"),
        ("el gato", TypeError, "give a list of strings, not one string"),
        (["el gato", 7], TypeError, "item 1 is a int"),
    ],
)
def test_a_vocabulary_needs_words_and_says_so(sentences, error, message):
    with pytest.raises(error, match=message):
        build_vocabulary(sentences, 100)


def test_vocabularies_learned_side_by_side_are_those_learned_one_at_a_time(monkeypatch):
    import subprocess

    english = [f"the {word} sees the {other}" for word in ("cat", "dog", "man") for other in ("bird", "fish")] * 5
    spanish = [f"el {word} ve al {other}" for word in ("gato", "perro", "hombre") for other in ("ave", "pez")] * 5
    one_at_a_time = [build_vocabulary(english, 60), build_vocabulary(spanish, 40)]
    started, popen = [], subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *args, **kwargs: started.append(args) or popen(*args, **kwargs))
    assert build_vocabularies([(english, 60), (spanish, 40)], side_by_side_from=8) == one_at_a_time
    assert len(started) == 1  # the Spanish one (8 distinct words), in a process of its own
    assert build_vocabularies([(english, 60), (spanish, 40)], side_by_side_from=9) == one_at_a_time
    assert len(started) == 1  # too few words to be worth a process
    with pytest.raises(ValueError, match="no words to learn a vocabulary from: 2 sentences"):
        build_vocabularies([(english, 60), (["", " "], 40)])
