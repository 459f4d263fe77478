"""Lines of several sentences: the splitter's rules on hard cases in several languages, the same in the graph and in
the plain-Python clients, and a translator that translates each sentence of a line as it would translate it alone."""

import re
import sys

import pytest
import tensorflow as tf
from conftest import REPO, copy_task_model

from kformer import Translator
from kformer.data.sentences import BOUNDARY, SENTENCE_RULES, split_sentences

# Each line, and the sentences a careful reader splits it into (each keeps the spaces after it).
HARD_CASES = {
    "English": ("I try. Hug Tom. I did OK. I'm home.", ["I try. ", "Hug Tom. ", "I did OK. ", "I'm home."]),
    "an abbreviation, a decimal, a.m.": ("Mr. Smith paid 3.5 dollars at 9 a.m. today.", None),
    "Spanish marks and Sr.": (
        "¿Dónde está? ¡Aquí! Sr. García, venga.",
        ["¿Dónde está? ", "¡Aquí! ", "Sr. García, venga."],
    ),
    "a closing quote": ('He said "Stop." Then he left.', ['He said "Stop." ', "Then he left."]),
    "initials": ("J. R. R. Tolkien wrote it. It is long.", ["J. R. R. Tolkien wrote it. ", "It is long."]),
    "an ellipsis before lowercase": ("I think... maybe not. Yes!", ["I think... maybe not. ", "Yes!"]),
    "e.g.": ("Es decir, e.g. París. Y Roma.", ["Es decir, e.g. París. ", "Y Roma."]),
    "German z.B.": ("Wirklich? Ja. Das ist z.B. gut.", ["Wirklich? ", "Ja. ", "Das ist z.B. gut."]),
    "Russian": ("Он пришёл. Она ушла.", ["Он пришёл. ", "Она ушла."]),
    "French capitals with accents": ("Il pleut. À demain. Éric part.", ["Il pleut. ", "À demain. ", "Éric part."]),
    "brackets and repeated marks": ("Wait... What?! (Really.) Fine.", ["Wait... ", "What?! ", "(Really.) ", "Fine."]),
    "a question then lowercase": ("¿estás bien? sí, gracias.", ["¿estás bien? ", "sí, gracias."]),
    "tabs and double spaces": ("One.\tTwo.  Three.", ["One.\t", "Two.  ", "Three."]),
    "one sentence": ("the black cat sleeps", None),
    "empty": ("", None),
    "a URL and an email": ("See example.com or a.b@c.de now.", None),
}


def python_split(line):
    """The rules as Python's re reads them: what export/wordpiece.py does."""
    for pattern, replacement in SENTENCE_RULES:
        line = re.sub(pattern, replacement, line)
    return line.split(BOUNDARY)


@pytest.mark.parametrize("case", HARD_CASES)
def test_the_graph_splits_each_hard_case_as_a_reader_would_and_python_alike(case):
    line, expected = HARD_CASES[case]
    expected = expected or [line]
    (graph,) = [[s.decode() for s in row] for row in split_sentences(tf.constant([line])).to_list()]
    assert graph == expected
    assert python_split(line) == expected
    assert "".join(graph) == line  # nothing lost: the line comes back exactly


def test_a_line_is_translated_sentence_by_sentence_and_joined_with_its_own_spaces():
    translator = Translator(copy_task_model())
    sentences = ["a b c d e. ", "F g h i j? ", "k l a b c!\t", "d e f g h."]
    whole = translator.translate(["".join(sentences)])
    alone = translator.translate(sentences)
    assert whole == ["".join(t + s[len(s.rstrip()) :] for t, s in zip(alone, sentences, strict=True)).rstrip()]
    # Read whole, the line's 24 tokens would be cut at the model's 12: most of it would be lost.
    unsplit = translator.target_tokenizer.detokenize(
        translator.translate_ids(translator.source_tokenizer.tokenize(["".join(sentences)]).to_tensor())
    )
    assert len(unsplit.numpy()[0].decode()) < len(whole[0]) / 2


def test_the_clients_split_by_the_manifests_rules_and_join_like_the_graph(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "export"))
    import wordpiece

    manifest = {"sentence_rules": [list(rule) for rule in SENTENCE_RULES], "sentence_boundary": BOUNDARY}
    lines = [line for line, _ in HARD_CASES.values()]
    calls = []

    def shout(sentences):
        calls.append(len(sentences))
        return [sentence.strip().upper() for sentence in sentences]

    graph = [[s.decode() for s in row] for row in split_sentences(tf.constant(lines)).to_list()]
    expected = ["".join(s.strip().upper() + s[len(s.rstrip(" \t")) :] for s in row).rstrip() for row in graph]
    assert wordpiece.by_sentence(shout, lines, manifest) == expected
    assert calls == [sum(map(len, graph))]  # every sentence of every line in one call
    # An export written before the rules existed translates each line whole, as it did then.
    assert wordpiece.by_sentence(shout, lines, {}) == [line.strip().upper() for line in lines]
    del sys.modules["wordpiece"]
