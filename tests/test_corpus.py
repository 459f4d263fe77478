"""The built-in English -> Spanish corpus."""

import hashlib
import json
import re

import pytest

from kformer.data.corpus import (
    ADJECTIVES,
    ANIMATE,
    DETERMINERS,
    INTRANSITIVE,
    PLACES,
    THINGS,
    TRANSITIVE,
    agreement_pairs,
    builtin_splits,
    held_out_pairs,
    role_swap_pairs,
)

PRESENT = {form for verb in INTRANSITIVE + TRANSITIVE for form in (verb.english, verb.english_plural)}
PAST = {verb.english_past for verb in INTRANSITIVE + TRANSITIVE}  # no English form is in both


@pytest.fixture(scope="module")
def splits():
    return builtin_splits()


@pytest.fixture(scope="module")
def harder():
    return builtin_splits(harder=True)


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


def test_determiners_and_adjectives_agree_with_their_noun_and_adjectives_follow_it(splits):
    """Read off the word tables: each Spanish noun's determiner and adjective carry its gender and number."""
    nouns, english_nouns = {}, {}  # Spanish form -> (feminine, plural); English form -> (noun, plural)
    for noun in ANIMATE + THINGS + PLACES:
        for plural in (False, True):
            nouns[noun.spanish_plural if plural else noun.spanish] = (noun.feminine, plural)
            english_nouns[noun.english_plural if plural else noun.english] = (noun, plural)
    allowed = {"al": {(False, False)}, "del": {(False, False)}}  # a + el, de + el
    for _, forms in DETERMINERS:  # el la los las: (m, sg) (f, sg) (m, pl) (f, pl)
        for i, form in enumerate(forms):
            allowed.setdefault(form, set()).add((i % 2 == 1, i >= 2))
    adjectives = {}  # English -> {(feminine, plural): Spanish form}
    adjective_forms = {}  # Spanish form -> the (feminine, plural) it agrees with
    for a in ADJECTIVES:
        forms = [a.masculine, a.feminine, a.masculine_plural, a.feminine_plural]
        adjectives[a.english] = {(i % 2 == 1, i >= 2): form for i, form in enumerate(forms)}
        for key, form in adjectives[a.english].items():
            adjective_forms.setdefault(form, set()).add(key)
    seen = set()
    for english, spanish in (pair for pairs in splits.values() for pair in pairs):
        words = spanish.split()
        for before, word, after in zip(["^", *words[:-1]], words, [*words[1:], "$"], strict=True):
            if word in nouns:
                assert nouns[word] in allowed[before], (spanish, before, word)
                assert after not in adjective_forms or nouns[word] in adjective_forms[after], (spanish, word, after)
                seen.add(nouns[word])
        english_words = english.split()
        for first, second in zip(english_words, english_words[1:], strict=False):
            if first in adjectives and second in english_nouns:  # English puts the adjective first, Spanish after
                noun, plural = english_nouns[second]
                spanish_noun = noun.spanish_plural if plural else noun.spanish
                agreed = adjectives[first][(noun.feminine, plural)]
                assert f" {spanish_noun} {agreed} " in f" {spanish} ", (english, spanish)
    assert seen == {(False, False), (False, True), (True, False), (True, True)}


def test_animate_objects_take_the_personal_a_and_things_do_not(splits):
    """ "the dog sees a cat" -> "el perro ve a un gato", "the dog sees a ball" -> "el perro ve una pelota"."""
    transitive = {form for verb in TRANSITIVE for form in (verb.spanish, verb.spanish_plural)}
    intransitive = {form for verb in INTRANSITIVE for form in (verb.spanish, verb.spanish_plural)}
    animate = {form for noun in ANIMATE for form in (noun.spanish, noun.spanish_plural)}
    things = {form for noun in THINGS for form in (noun.spanish, noun.spanish_plural)}
    no_object = intransitive | {"$"}  # "que la niña ve duermen": the object is the relative pronoun
    checked = {True: 0, False: 0}
    for _, spanish in (pair for pairs in splits.values() for pair in pairs):
        words = [*spanish.split(), "$"]
        for i, word in enumerate(words):
            if word not in transitive or words[i + 1] in no_object:
                continue
            obj = next(later for later in words[i + 1 :] if later in animate or later in things)
            personal = words[i + 1] in ("a", "al")
            assert personal == (obj in animate), spanish
            checked[personal] += 1
    assert min(checked.values()) > 500, checked


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


@pytest.mark.parametrize("past", [False, True])
def test_agreement_pairs_put_a_noun_of_the_other_number_between_subject_and_verb(past):
    train = [english for english, _ in builtin_splits(harder=past)["train"]]
    sentences = agreement_pairs(100, exclude=train, past=past)
    assert len(sentences) == 100 and not set(train) & {english for english, *_ in sentences}
    if past:
        verbs = {(verb.spanish_past, verb.spanish_past_plural) for verb in INTRANSITIVE}
        english_verbs = {verb.english_past for verb in INTRANSITIVE}  # one form for both numbers
    else:
        verbs = {(verb.spanish, verb.spanish_plural) for verb in INTRANSITIVE}
        english_verbs = {form for verb in INTRANSITIVE for form in (verb.english, verb.english_plural)}
    assert {english.split()[-1] for english, *_ in sentences} <= english_verbs
    assert {word for english, *_ in sentences for word in english.split()} & (PRESENT | PAST) <= (
        PAST if past else PRESENT
    )
    for english, spanish, right, wrong in sentences:
        assert (right, wrong) in verbs or (wrong, right) in verbs
        assert spanish.split()[-1] == right and " que " in spanish and " that " in english
        subject_plural = right in {plural for _, plural in verbs}
        subject_determiner = spanish.split()[0]
        inner_determiner = spanish.split(" que ")[1].split()[0]
        plural_determiners = {"los", "las", "unos", "unas", "estos", "estas", "mis"}
        assert (subject_determiner in plural_determiners) == subject_plural, spanish
        assert (inner_determiner in plural_determiners) != subject_plural, spanish  # the attractor


def test_the_harder_corpus_hides_the_verbs_number_in_english_and_shows_it_in_spanish():
    """ "the cats that the girl saw slept" -> "los gatos que la niña vio durmieron": only "cats" carries the number."""
    harder = builtin_splits(harder=True)
    pairs = [pair for split in harder.values() for pair in split]
    past = {verb.english_past: verb for verb in INTRANSITIVE + TRANSITIVE}
    english_nouns = {
        form: plural for noun in ANIMATE for plural, form in enumerate((noun.english, noun.english_plural))
    }
    in_past = [(english, spanish) for english, spanish in pairs if set(english.split()) & set(past)]
    assert 0.4 < len(in_past) / len(pairs) < 0.6
    checked = {(plural, attracted): 0 for plural in (0, 1) for attracted in (False, True)}
    for english, spanish in in_past:
        words = english.split()
        if words[-1] not in past or past[words[-1]] not in INTRANSITIVE:
            continue  # only sentences that end in their main verb (no object, no place) are checked
        nouns = [english_nouns[word] for word in words if word in english_nouns]
        plural, attracted = nouns[0], len(nouns) > 1 and nouns[1] != nouns[0]
        verb = past[words[-1]]
        assert spanish.split()[-1] == (verb.spanish_past_plural if plural else verb.spanish_past), english
        checked[plural, attracted] += 1
    assert min(checked.values()) > 100, checked
    test_words = {word for english, spanish in harder["test"] for word in f"{english} {spanish}".split()}
    assert test_words <= {word for english, spanish in harder["train"] for word in f"{english} {spanish}".split()}
    # The same, spelled out, where no relative clause stands between: "the cats slept" -> "... durmieron".
    ends = {"cats slept": "durmieron", "cat slept": "durmió", "women danced": "bailaron", "woman danced": "bailó"}
    found = dict.fromkeys(ends, 0)
    for english, spanish in pairs:
        for english_end, spanish_verb in ends.items():
            if english.endswith(f" {english_end}") and " that " not in english:
                found[english_end] += 1
                assert spanish.split()[-1] == spanish_verb, (english, spanish)
    assert min(found.values()) > 0, found


def test_agreement_pairs_are_distinct_and_leave_out_what_they_are_told():
    """5,000 draws make a few sentences twice: each is kept once, and an excluded one not at all."""
    english = [sentence for sentence, *_ in agreement_pairs(5_000)]
    assert len(set(english)) == 5_000
    again = [sentence for sentence, *_ in agreement_pairs(50, exclude=english[:25])]
    assert len(set(again)) == 50 and not set(english[:25]) & set(again)
    assert len(agreement_pairs()) == 200  # the count the course's figures and bench/stages.py use


def test_the_harder_corpus_puts_the_verbs_of_a_sentence_in_one_tense(harder):
    """ "the cat that saw the dogs slept", never "the cat that sees the dogs slept"."""
    with_two_verbs = {"present": 0, "past": 0}  # relative clauses, of both kinds
    for english, _ in (pair for split in harder.values() for pair in split):
        tenses = {"past" if word in PAST else "present" for word in english.split() if word in PAST | PRESENT}
        assert len(tenses) == 1, english
        if " that " in english:
            with_two_verbs[tenses.pop()] += 1
    assert min(with_two_verbs.values()) > 2_000, with_two_verbs


def test_role_swap_pairs_trade_subject_and_object_in_the_same_words():
    """ "the dog sees a cat" / "a cat sees the dog" -> "el perro ve a un gato" / "un gato ve al perro"."""
    pairs = role_swap_pairs(100)
    english = [sentence for sentence, _ in pairs]
    assert len(set(english)) == 200
    again = [sentence for sentence, _ in role_swap_pairs(100, exclude=english[:50])]
    assert len(again) == 200 and not set(english[:50]) & set(again)
    assert len(role_swap_pairs()) == 400  # twice the count the course and bench/stages.py use
    verbs = {form: verb for verb in TRANSITIVE for form in (verb.english, verb.english_plural)}
    nouns = {noun.english: (noun, False) for noun in ANIMATE} | {noun.english_plural: (noun, True) for noun in ANIMATE}
    held_out = held_out_phrases()

    def personal_a(phrase):  # a + el -> al
        return f"al {phrase[3:]}" if phrase.startswith("el ") else f"a {phrase}"

    for (first, first_spanish), (second, second_spanish) in zip(pairs[::2], pairs[1::2], strict=True):
        words = first.split()
        at = next(i for i, word in enumerate(words) if word in verbs)  # present tense: no past form is a key
        subject, obj = words[:at], words[at + 1 :]
        assert second.split() == [*obj, words[at], *subject], (first, second)
        (subject_noun, plural), (object_noun, object_plural) = nouns[subject[-1]], nouns[obj[-1]]
        assert plural == object_plural and subject_noun != object_noun, first
        verb = verbs[words[at]]
        assert words[at] == (verb.english_plural if plural else verb.english), first
        subject_spanish, object_spanish = first_spanish.split(f" {verb.spanish_plural if plural else verb.spanish} ")
        twin_subject, twin_object = second_spanish.split(f" {verb.spanish_plural if plural else verb.spanish} ")
        assert (object_spanish, twin_object) == (personal_a(twin_subject), personal_a(subject_spanish)), first
        assert not any(" ".join(pair) in held_out for pair in zip(words, words[1:], strict=False)), first


def test_the_harder_mode_leaves_the_default_corpus_as_it_was():
    """Every result recorded on the default corpus stands: its bytes are those of release a1770db."""
    splits = builtin_splits()
    train = [english for english, _ in splits["train"]]
    digest = hashlib.sha256(json.dumps(splits).encode()).hexdigest()
    assert digest == "b39f0d2c2005dd13559db72186c5364d147bc42f6c1213fce40961f770bef5e1"
    digest = hashlib.sha256(json.dumps(agreement_pairs(200, exclude=train)).encode()).hexdigest()
    assert digest == "088baa74b6da2823069119500ab231425825ec00460f5ce78ef0a37dcf65a2ad"


def test_the_probe_sets_of_recorded_results_stand():
    """bench/stages.py's rows and chapters 4 and 4b were measured on these sets: their bytes as recorded."""
    train = [english for english, _ in builtin_splits()["train"]]
    harder_train = [english for english, _ in builtin_splits(harder=True)["train"]]
    digest = hashlib.sha256(json.dumps(role_swap_pairs(200, exclude=train)).encode()).hexdigest()
    assert digest == "b2149e94ec60dcb7fe9eaba7183910fe9a228ffe3486a596918828d1808c7f25"
    digest = hashlib.sha256(json.dumps(agreement_pairs(200, exclude=harder_train, past=True)).encode()).hexdigest()
    assert digest == "0ff0d98bccdd1b77f3fc3db8b6ccf4763ce97d4e20ff9f41c73a20af55eabbbc"
