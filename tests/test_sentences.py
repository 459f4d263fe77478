"""Lines of several sentences: the splitter's rules on hard cases in several languages, the same in the graph and in
the plain-Python clients, and a translator that translates each sentence of a line as it would translate it alone."""

import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, VOCAB, copy_task_model

from kformer import TrainedModel, Translator
from kformer.cli import main
from kformer.data.sentences import BOUNDARY, SENTENCE_RULES, in_pieces, split_sentences
from kformer.data.text import END_ID, PAD_ID
from kformer.inference.translator import OutputLimitWarning, SentenceTooLong

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


def test_pieces_keep_every_token_in_order_cut_only_where_words_start_and_python_alike(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "export"))
    import wordpiece

    vocabulary = ["[PAD]", "[UNK]", "[START]", "[END]", "a", "b", "##c", "##d", "e"]
    starts = tf.constant([not token.startswith("##") for token in vocabulary])
    rng = np.random.default_rng(0)
    rows = [[], [4], [6, 6, 4]] + [list(rng.integers(4, 9, rng.integers(1, 40))) for _ in range(60)]
    for most in (1, 3, 5, 12):
        pieces = in_pieces(tf.ragged.constant(rows, tf.int32, ragged_rank=1), most, starts).to_list()
        for row, got in zip(rows, pieces, strict=True):
            assert [token for piece in got for token in piece] == row  # nothing lost, nothing moved
            assert len(got) == max(1, -(-len(row) // most))  # the fewest pieces of `most` tokens
            firsts = [piece[0] for piece in got[1:] if piece]
            assert not any(vocabulary[token].startswith("##") for token in firsts)  # a word is never cut
            assert got == wordpiece.pieces(row, most, vocabulary)  # the clients cut the same
    del sys.modules["wordpiece"]


def test_a_sentence_over_the_limit_comes_back_whole_in_pieces():
    translator = Translator(copy_task_model(), max_length=6)  # the model copies up to 7 letters
    rng = np.random.default_rng(1)
    sentence = " ".join(rng.choice(list("abcdefghijkl"), 30))
    assert translator.translate([sentence]) == [sentence]  # 5 pieces of 6, each copied, joined
    assert translator(tf.constant([sentence])).numpy()[0].decode() == sentence


def never_ending_translator(**settings):
    """A translator whose model never writes [END]: every output runs to the output limit."""
    trained = copy_task_model()
    trained.model.get_layer("decoder").output_projection.bias.assign(-100 * np.eye(len(VOCAB))[END_ID])
    return Translator(trained, **settings)


@pytest.mark.parametrize("ratio, xla", [(2.0, True), (0.5, False), (1.3, False)])
def test_outputs_are_limited_by_their_sources_length_and_a_stop_there_is_reported(ratio, xla):
    translator = never_ending_translator(max_output_ratio=ratio, xla=xla)  # the model's max_length: 12
    for width in (3, 7, 20):  # under XLA: the model's buffer, the longest output's, then a source over 12
        tokens = translator.translate_ids(tf.fill([2, width], 4)).numpy()
        expected = max(12, int(np.ceil(np.float32(ratio) * min(width, 12))) + 10)  # the documented rule
        assert ((tokens != PAD_ID).sum(axis=1) == expected).all(), (width, ratio)
    with pytest.warns(OutputLimitWarning, match=r"2 translation\(s\) stopped at the output limit") as said:
        translator.translate(["a b", "", "c"])
    assert said[0].message.lines == [0, 2]  # the empty line ends at once
    # The warning points at the caller's line, not kformer's (under mutmut, the caller is mutmut's trampoline).
    assert said[0].filename == __file__ or "mutmut" in Path(said[0].filename).parts, said[0].filename
    with pytest.warns(OutputLimitWarning) as said:
        translator.translate(["a b", "", "c"], batch_size=1)  # a batch each: every batch's lines named
    assert said[0].message.lines == [0, 2]
    if not xla:  # the scores' path counts its own stops (under XLA it compiles another loop: 5 s more)
        with pytest.warns(OutputLimitWarning) as said:
            translator.translate(["a b", "", "c"], batch_size=1, with_scores=True)
        assert said[0].message.lines == [0, 2]


def test_a_row_is_stopped_by_its_own_end_not_by_another_rows_in_its_batch():
    """The rule behind the warning, on a batch no trained model gives easily: one row ends, one is cut at the limit
    (every output of the never-ending model above is cut; the copy task's all end)."""
    output = tf.constant([[5, END_ID, PAD_ID], [5, 6, 7], [PAD_ID] * 3, [6, 6, END_ID]])
    stopped = Translator._stopped(output, source_lengths=tf.constant([2, 3, 0, 2]))
    assert stopped.numpy().tolist() == [False, True, False, False]  # the empty source's row has no [END]: not cut


def test_texts_are_batched_with_those_of_about_their_length():
    """Fewer [PAD] columns a batch: the outputs are the same in any batching (test_decoding), the time is not."""
    texts = ["a b c d", "a", "a b c d e f", "a b", "a b c"]
    assert Translator._batches(texts, 2) == [[1, 3], [4, 0], [2]]


def test_the_output_limit_warning_names_the_first_ten_lines_and_the_settings_to_raise():
    translator = SimpleNamespace(max_output_ratio=1.5, max_length=12)
    said = str(OutputLimitWarning(list(range(3, 14)), translator))
    assert said == (
        "11 translation(s) stopped at the output limit before their end and may be cut short (input 3, 4, 5, 6, 7, "
        "8, 9, 10, 11, 12 ...): raise max_output_ratio (now 1.5) or max_length (now 12)."
    )
    assert "(input 0, 1, 2, 3, 4, 5, 6, 7, 8, 9): " in str(OutputLimitWarning(list(range(10)), translator))


def test_the_cli_names_each_line_whose_translation_stopped_at_the_limit(tmp_path, capsys, monkeypatch):
    translator = never_ending_translator()
    TrainedModel(translator.model, translator.source_tokenizer, translator.target_tokenizer, {"max_length": 12}).save(
        tmp_path / "model"
    )
    assert main(["translate", "--model", str(tmp_path / "model"), "--max-output-ratio", "1", "a b", "", "c"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3
    assert [line.split(":")[2].strip() for line in err.splitlines()] == ["argument 1", "argument 3"]
    assert "raise --max-output-ratio (now 1)" in err


def test_a_sentence_of_max_length_tokens_is_read_whole_with_scores_and_one_more_refused_by_its_number():
    translator = Translator(copy_task_model(), max_length=6)
    exactly = " ".join("abcdef")
    assert [text for text, _ in translator.translate(["a b", exactly], with_scores=True)] == ["a b", exactly]
    with pytest.raises(SentenceTooLong, match=r"^sentence 2 has 7 tokens, more than max_length \(6\)"):
        translator.translate(["a b", exactly + " g"], with_scores=True)


@pytest.mark.slow  # 29 s: three refusals, a CLI run
def test_a_sentence_over_the_limit_is_refused_where_it_would_be_read_whole(tmp_path, capsys):
    """n-best lists, scores and prefixes read each sentence whole: one over max_length is refused in one sentence
    that names it (in the CLI: its argument and the flags), not cut, and not run out of memory."""
    trained = copy_task_model()
    translator = Translator(trained, max_length=6, beam_size=2)
    long = " ".join("abcdefghijkl")  # 12 tokens
    for options in (dict(n_best=2), dict(with_scores=True), dict(prefix=["a", "a"])):
        with pytest.raises(SentenceTooLong, match=r"^sentence 2 has 12 tokens, more than max_length \(6\)"):
            translator.translate(["a b", long], **options)
    assert translator.translate(["a b", long]) == ["a b", long]  # without them: read in pieces
    TrainedModel(trained.model, trained.source_tokenizer, trained.target_tokenizer, {"max_length": 6}).save(
        tmp_path / "model"
    )
    assert main(["translate", "--model", str(tmp_path / "model"), "--scores", "a b", long]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kformer translate: error: argument 2 has 12 tokens, more than max_length (6); --n-best, ")


@pytest.mark.slow  # 24 s: two never-ending translators compiled, two CLI runs
def test_the_max_output_ratio_flag_reaches_the_decoder_and_other_warnings_still_show(tmp_path, capsys, monkeypatch):
    """`--max-output-ratio` prints what `Translator(max_output_ratio=...)` gives (a model that never ends runs
    to its limit: longer under a larger ratio); a warning other than the output limit's is shown, not swallowed."""
    translator = never_ending_translator()
    model = tmp_path / "model"
    TrainedModel(translator.model, translator.source_tokenizer, translator.target_tokenizer, {"max_length": 12}).save(
        model
    )
    source = " ".join("abcdefgh")
    expected = {ratio: never_ending_translator(max_output_ratio=ratio).translate([source])[0] for ratio in (1, 3)}
    assert len(expected[3].split()) > len(expected[1].split())
    translate = Translator.translate

    def warning_too(self, *args, **kwargs):
        warnings.warn("a warning of Keras' own", UserWarning, stacklevel=1)
        return translate(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", warning_too)
    for ratio in (1, 3):
        with pytest.warns(UserWarning, match="a warning of Keras' own"):
            assert main(["translate", "--model", str(model), "--max-output-ratio", str(ratio), source]) == 0
        assert capsys.readouterr().out.splitlines() == [expected[ratio]]
