"""The built-in English -> Spanish corpus."""

import re

import pytest

from kformer.data.corpus import (
    ANIMATE,
    INTRANSITIVE,
    PLACES,
    THINGS,
    TRANSITIVE,
    agreement_pairs,
    builtin_splits,
    held_out_pairs,
)


@pytest.fixture(scope="module")
def splits():
    return builtin_splits()


def test_is_deterministic_and_sized(splits):
    assert builtin_splits() == splits
    assert {name: len(pairs) for name, pairs in splits.items()} == {"train": 20_000, "valid": 500, "test": 1_000}
    assert builtin_splits(seed=1)["train"] != splits["train"]


def test_sentences_are_distinct_across_splits(splits):
    sources = [source for pairs in splits.values() for source, _ in pairs]
    assert len(sources) == len(set(sources))


def held_out_phrases():
    """English "adjective noun" phrases (singular and plural) that only the test split may hold."""
    nouns = {noun.english: noun for noun in ANIMATE + THINGS + PLACES}
    return {
        f"{adjective} {form}"
        for adjective, noun in held_out_pairs()
        for form in (nouns[noun].english, nouns[noun].english_plural)
    }


def test_test_split_is_compositional(splits):
    phrases = held_out_phrases()

    def has_held_out_phrase(english):
        words = english.split()
        return any(" ".join(pair) in phrases for pair in zip(words, words[1:], strict=False))

    assert all(has_held_out_phrase(english) for english, _ in splits["test"])
    assert not any(has_held_out_phrase(english) for name in ("train", "valid") for english, _ in splits[name])
    train_words = {word for english, spanish in splits["train"] for word in f"{english} {spanish}".split()}
    test_words = {word for english, spanish in splits["test"] for word in f"{english} {spanish}".split()}
    assert test_words <= train_words


def test_spanish_contracts_and_agrees(splits):
    spanish = [target for pairs in splits.values() for _, target in pairs]
    assert not any(re.search(r"\b(a|de) el\b", sentence) for sentence in spanish)  # al, del
    assert any(" al " in sentence for sentence in spanish) and any(" del " in sentence for sentence in spanish)
    assert not any(re.search(r"\b(el|los|un|unos) \w+ (negra|negras|blanca|blancas)\b", s) for s in spanish)


def test_relative_clauses_agree_with_the_distant_subject(splits):
    """ "the cats that the girl sees sleep" -> "... duermen": the main verb agrees with "cats", not "girl"."""
    plural_verbs = {verb.english_plural: verb.spanish_plural for verb in INTRANSITIVE}
    singular_verbs = {verb.english: verb.spanish for verb in INTRANSITIVE}
    transitive = "|".join(verb.english for verb in TRANSITIVE)  # the inner subject is singular
    pattern = re.compile(rf"\w+ (?:\w+ )?\w+ that \w+ (?:\w+ )?\w+ (?:{transitive}) (\w+)")
    checked = 0
    for english, spanish in (pair for pairs in splits.values() for pair in pairs):
        match = pattern.fullmatch(english)
        if match:
            verb = match.group(1)
            expected = plural_verbs.get(verb) or singular_verbs[verb]
            assert spanish.split()[-1] == expected, (english, spanish)
            checked += verb in plural_verbs
    assert checked > 100


def test_agreement_pairs_put_a_noun_of_the_other_number_between_subject_and_verb():
    train = [english for english, _ in builtin_splits()["train"]]
    sentences = agreement_pairs(100, exclude=train)
    assert len(sentences) == 100 and not set(train) & {english for english, *_ in sentences}
    verbs = {(verb.spanish, verb.spanish_plural) for verb in INTRANSITIVE}
    for english, spanish, right, wrong in sentences:
        assert (right, wrong) in verbs or (wrong, right) in verbs
        assert spanish.split()[-1] == right and " que " in spanish and " that " in english
        subject_plural = right in {plural for _, plural in verbs}
        subject_determiner = spanish.split()[0]
        inner_determiner = spanish.split(" que ")[1].split()[0]
        plural_determiners = {"los", "las", "unos", "unas", "estos", "estas", "mis"}
        assert (subject_determiner in plural_determiners) == subject_plural, spanish
        assert (inner_determiner in plural_determiners) != subject_plural, spanish  # the attractor
