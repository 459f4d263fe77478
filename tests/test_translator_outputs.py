"""What a translator gives back besides one string: n-best lists, scores, scores of given pairs.

Scores are checked against NumPy's log-softmax of the model's own teacher-forced logits, and the search's
scores against the teacher-forced ones of the tokens it chose.
"""

import json
import re

import numpy as np
import pytest
from conftest import VOCAB, copy_task_model, hesitant_model, model_logits, numpy_log_softmax, to_numpy

from kformer import Translator
from kformer.cli import main
from kformer.data.text import END_ID, PAD_ID, START_ID
from kformer.inference.translator import SentenceTooLong
from kformer.model_dir import TrainedModel

SOURCES = ["a b c", "d e f g h", "i j k l a b", "c c d", "l k j i h g f", "e"]


@pytest.fixture(scope="module")
def copier():
    return copy_task_model()


@pytest.fixture(scope="module")
def hesitant(copier):
    """`hesitant_model` with the letter tokenizers: its beams end at different lengths."""
    return TrainedModel(hesitant_model(), copier.source_tokenizer, copier.target_tokenizer, copier.config)


def numpy_log_probs(trained, source, target_ids):
    """log p(target_ids + [END] | source), token by token, from NumPy's log-softmax of the model's logits."""
    encoder = trained.source_tokenizer.tokenize([source]).to_tensor().numpy()
    decoder = np.array([[START_ID, *target_ids]], "int32")
    log_softmax = numpy_log_softmax(model_logits(trained.model, encoder, decoder)[0])  # (T + 1, V)
    return log_softmax[np.arange(len(target_ids) + 1), [*target_ids, END_ID]]


def gnmt(log_prob, tokens, alpha):
    return log_prob / ((5 + tokens) / 6) ** alpha


def test_score_is_the_teacher_forced_log_probability_of_each_token_and_end(hesitant):
    targets = ["a b c", "x", "", "l l l l l l l l l l l l l l"]  # "x" is unknown: [UNK]
    sources = ["a b c", "d e", "f", "g h i"]
    translator = Translator(hesitant)
    scores = translator.score(sources, targets, batch_size=3)
    for source, target, score in zip(sources, targets, scores, strict=True):
        ids = [int(i) for i in hesitant.target_tokenizer.tokenize([target])[0].numpy()]
        expected = numpy_log_probs(hesitant, source, ids)
        assert score.tokens == len(ids) + 1 == len(score.token_log_probs)
        np.testing.assert_allclose(score.token_log_probs, expected, rtol=1e-4, atol=1e-5)
        assert score.log_prob == pytest.approx(expected.sum(), rel=1e-4)
    # The ids function behind it: one value a target token and one for [END], then 0 where the batch pads.
    encoder, target = (tokenizer.tokenize(texts).to_tensor() for tokenizer, texts in zip(
        (hesitant.source_tokenizer, hesitant.target_tokenizer), (sources, targets), strict=True))  # fmt: skip
    token_log_probs = to_numpy(translator.score_ids(encoder, target))
    assert token_log_probs.shape == (4, target.shape[1] + 1)
    for row, score in zip(token_log_probs, scores, strict=True):
        np.testing.assert_allclose(row[: score.tokens], score.token_log_probs, rtol=1e-5)
        assert (row[score.tokens :] == 0).all() and (row[: score.tokens] < 0).all()


@pytest.mark.parametrize(
    "model, beam_size, xla",
    [("hesitant", 1, True), ("hesitant", 3, True), ("hesitant", 3, False), ("copier", 1, False)],
)
def test_the_searchs_log_probabilities_are_the_teacher_forced_ones_of_its_tokens(request, model, beam_size, xla):
    """On the hesitant model most hypotheses run to the output limit; the copier's end at their own lengths,
    the rows of a batch at different steps."""
    hesitant = request.getfixturevalue(model)
    translator = Translator(hesitant, beam_size=beam_size, xla=xla)
    encoder = hesitant.source_tokenizer.tokenize(SOURCES).to_tensor()
    tokens, log_probs = (to_numpy(x) for x in translator.search_ids(encoder))
    assert tokens.shape[:2] == log_probs.shape == (len(SOURCES), beam_size)
    ended = 0
    for row, source in enumerate(SOURCES):
        for hypothesis, log_prob in zip(tokens[row], log_probs[row], strict=True):
            ids = [int(i) for i in hypothesis if i != PAD_ID]
            if ids[-1:] == [END_ID]:
                expected, ended = numpy_log_probs(hesitant, source, ids[:-1]).sum(), ended + 1
            else:  # cut at the output limit: its tokens without [END]
                expected = numpy_log_probs(hesitant, source, ids)[:-1].sum()
            assert log_prob == pytest.approx(expected, rel=1e-4, abs=1e-4)
    assert ended >= (len(SOURCES) if beam_size > 1 or model == "copier" else 0)  # both kinds are checked
    best, best_log_probs = (to_numpy(x) for x in translator.best_ids(encoder))  # what the exports serve: the first
    assert [list(row[row != PAD_ID]) for row in best] == [list(row[row != PAD_ID]) for row in tokens[:, 0]]
    np.testing.assert_allclose(best_log_probs, log_probs[:, 0], rtol=1e-5)


def test_n_best_lists_are_distinct_best_first_and_begin_with_the_plain_translation(hesitant):
    translator = Translator(hesitant, beam_size=4, length_penalty=1.0)
    plain = translator.translate(SOURCES)
    lists = translator.translate(SOURCES, n_best=4, with_scores=True)
    encoder = hesitant.source_tokenizer.tokenize(SOURCES).to_tensor()
    tokens = to_numpy(translator.search_ids(encoder)[0])
    for row, (source, hypotheses) in enumerate(zip(SOURCES, lists, strict=True)):
        assert len(hypotheses) == 4 and hypotheses[0][0] == plain[row]
        scores = [score for _, score in hypotheses]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(hypothesis) for hypothesis in tokens[row]}) == 4  # distinct token sequences
        for hypothesis, (_, score) in zip(tokens[row], hypotheses, strict=True):
            ids = [int(i) for i in hypothesis if i != PAD_ID]
            ended = ids[-1:] == [END_ID]
            if ended:  # GNMT's score of NumPy's log-probability, the length counting [END]
                expected = gnmt(numpy_log_probs(hesitant, source, ids[:-1]).sum(), len(ids), 1.0)
                assert score == pytest.approx(expected, rel=1e-4, abs=1e-4)
    texts = translator.translate(SOURCES, n_best=4)
    assert texts == [[text for text, _ in found] for found in lists] and texts[0] != [plain[0]] * 4
    assert translator.translate(SOURCES, n_best=2) == [found[:2] for found in texts]  # a list of two, not one


@pytest.mark.slow
def test_a_translations_score_is_its_log_probability_over_the_length_penalty(copier):
    """The copier's translations read back as the same tokens, so `score` can check `with_scores`."""
    for beam_size, alpha in ((1, 0.6), (3, 1.5)):
        translator = Translator(copier, beam_size=beam_size, length_penalty=alpha, xla=False)  # XLA's: above
        found = translator.translate(SOURCES[:5], with_scores=True)
        assert [text for text, _ in found] == translator.translate(SOURCES[:5]) == SOURCES[:5]  # it copies
        for (_, score), given in zip(found, translator.score(SOURCES[:5], SOURCES[:5]), strict=True):
            assert score == pytest.approx(gnmt(given.log_prob, given.tokens, alpha), rel=1e-4, abs=1e-5)


def test_an_empty_source_gives_one_empty_hypothesis(copier):
    translator = Translator(copier, beam_size=3, xla=False)
    assert translator.translate(["", "a b"], n_best=3, with_scores=True)[0] == [("", 0.0)]


@pytest.mark.parametrize(
    "settings, call, message",
    [
        (dict(beam_size=17), None, "beam_size must be at most the target vocabulary's 16 tokens, got beam_size=17"),
        (dict(length_penalty=-0.5), None, r"length_penalty must be 0 or more \(0: none\), got length_penalty=-0.5"),
        (dict(beam_size=2), dict(n_best=3), r"n_best must be at most beam_size \(2\), got n_best=3"),
        (dict(beam_size=2), dict(n_best=0), "n_best must be a positive integer, got n_best=0"),
    ],
)
def test_decoding_settings_out_of_range_are_one_clear_error(copier, settings, call, message):
    with pytest.raises(ValueError, match=message):
        Translator(copier, **settings).translate(["a b"], **(call or {}))


def test_score_needs_a_target_for_each_source_and_a_count_for_a_batch_size(copier):
    translator = Translator(copier, xla=False)
    with pytest.raises(ValueError, match="score needs one target a source: got 2 sources, 1 targets"):
        translator.score(["a", "b"], ["a"])
    with pytest.raises(ValueError, match=r"^batch_size must be a positive integer, got batch_size=0\.$"):
        translator.score(["a"], ["a"], batch_size=0)


@pytest.fixture(scope="module")
def hesitant_dir(hesitant, tmp_path_factory):
    out = tmp_path_factory.mktemp("hesitant") / "model"
    hesitant.save(out)
    return out


@pytest.mark.slow
def test_kformer_translate_prints_n_best_lists_with_scores_and_as_json(hesitant, hesitant_dir, capsys):
    expected = Translator(hesitant, beam_size=3, length_penalty=1.0).translate(SOURCES, n_best=3, with_scores=True)
    flags = ["--model", str(hesitant_dir), "--beam", "3", "--length-penalty", "1.0"]
    assert main(["translate", *flags, "--n-best", "3", "--scores", *SOURCES]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    rows = [(str(index), f"{score:.4f}", text) for index, found in enumerate(expected) for text, score in found]
    assert [tuple(line) for line in lines] == rows
    assert main(["translate", *flags, "--json", *SOURCES[:2]]) == 0
    objects = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert objects == [
        {"index": i, "source": SOURCES[i], "hypotheses": [{"translation": expected[i][0][0], "score": pytest.approx(
            expected[i][0][1], abs=1e-4)}]}
        for i in range(2)
    ]  # fmt: skip
    assert main(["translate", *flags, "--scores", SOURCES[0]]) == 0
    assert capsys.readouterr().out == f"{expected[0][0][1]:.4f}\t{expected[0][0][0]}\n"


def test_kformer_score_prints_each_pairs_log_probability(hesitant, hesitant_dir, tmp_path, capsys):
    pairs = [("a b c", "c b a"), ("d", "x y"), ("e f", "e ñ")]
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    expected = Translator(hesitant).score([s for s, _ in pairs], [t for _, t in pairs])
    assert main(["score", "--model", str(hesitant_dir), "--data", str(data)]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert lines == [[f"{e.log_prob:.4f}", str(e.tokens), s, t] for e, (s, t) in zip(expected, pairs, strict=True)]
    assert main(["score", "--model", str(hesitant_dir), "--data", str(data), "--json", "--batch-size", "2"]) == 0
    out = capsys.readouterr().out
    assert '"e ñ"' in out  # UTF-8, not escaped
    lines = [json.loads(line) for line in out.splitlines()]
    assert all(round(value, 4) == value for line in lines for value in [line["log_prob"], *line["token_log_probs"]])
    assert lines == [
        dict(source=s, target=t, log_prob=pytest.approx(e.log_prob, abs=1e-4), tokens=e.tokens,
             token_log_probs=pytest.approx(e.token_log_probs, abs=1e-4))
        for e, (s, t) in zip(expected, pairs, strict=True)
    ]  # fmt: skip
    assert lines[0]["tokens"] == 4  # "c", "b", "a" and [END]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["translate", "--beam", "100000", "a"], "--beam 100000 is more than the 16 tokens of .*'s target vocabulary"),
        (["translate", "--beam", "2", "--n-best", "3", "a"], "--n-best 3 is more than --beam 2 keeps; give --beam 3"),
        (["score", "--data", "{empty_target}"], r"pairs.tsv, line 2: the target side is empty"),
        # The Translator's own refusals, its argument names given as the flags the user typed:
        (
            ["translate", "--beam", "2", "--temperature", "0.5", "a"],
            r": sampling \(--temperature 0.5\) draws one translation: use --beam 1\.$",
        ),
        (
            ["translate", "--top-k", "-1", "a"],
            r": --top-k must be a non-negative integer \(0: no limit\), got --top-k -1\.$",
        ),
        (["translate", "--top-p", "2", "a"], r": --top-p must be in \(0, 1\], got --top-p 2\.0\.$"),
    ],
)
def test_kformer_decoding_flags_out_of_range_are_one_line(hesitant_dir, tmp_path, capsys, argv, message):
    empty_target = tmp_path / "pairs.tsv"
    empty_target.write_text("a b\tb a\nc d\t\n", encoding="utf-8")
    argv = [arg.format(empty_target=empty_target) for arg in argv]
    assert main([argv[0], "--model", str(hesitant_dir), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"kformer {argv[0]}: error: ")
    assert re.search(message, err), err


def test_a_negative_length_penalty_is_refused_by_the_parser(hesitant_dir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", "--model", str(hesitant_dir), "--length-penalty", "-1", "a"])
    assert exit_info.value.code == 2
    assert "argument --length-penalty: expected a number of 0 or more, got '-1'" in capsys.readouterr().err


def numpy_greedy_after(trained, source, prefix_ids, max_length):
    """The prefix, then the argmax of the uncached model's logits over output tokens ([PAD] and [START] are
    none) at each step, until [END] or `max_length`."""
    encoder = trained.source_tokenizer.tokenize([source]).to_tensor().numpy()
    tokens = list(prefix_ids)
    while len(tokens) < max_length and (not tokens or tokens[-1] != END_ID):
        logits = model_logits(trained.model, encoder, [[START_ID, *tokens]])
        logits[0, -1, [PAD_ID, START_ID]] = -np.inf
        tokens.append(int(logits[0, -1].argmax()))
    return tokens


@pytest.mark.parametrize("xla", [True, False])
def test_a_forced_prefix_starts_each_translation_and_the_search_goes_on_from_it(hesitant, xla):
    prefixes = ["l k", "a", "c c c", "b", "e f g", "a b"]
    translator = Translator(hesitant, xla=xla)
    texts = translator.translate(SOURCES, prefix=prefixes, with_scores=True)
    ids = hesitant.target_tokenizer.tokenize(prefixes).to_list()
    widest = max(len(row) for row in ids + hesitant.source_tokenizer.tokenize(SOURCES).to_list())  # one batch
    limit = max(12, 2 * widest + 10)  # the output limit of Translator's docstring, the model's max_length 12
    for source, prefix, (text, score), prefix_ids in zip(SOURCES, prefixes, texts, ids, strict=True):
        expected = numpy_greedy_after(hesitant, source, prefix_ids, limit)
        got = [int(i) for i in hesitant.target_tokenizer.tokenize([text])[0].numpy()]
        shown = [t for t in expected if t not in (PAD_ID, START_ID, END_ID)]  # what detokenizing keeps
        assert got[: len(prefix_ids)] == prefix_ids and got == shown
        assert text.startswith(prefix)
        # The prefix's tokens count in the score: NumPy's log-probability of the whole output, prefix and all.
        encoder = hesitant.source_tokenizer.tokenize([source]).to_tensor().numpy()
        log_softmax = numpy_log_softmax(model_logits(hesitant.model, encoder, [[START_ID, *expected[:-1]]])[0])
        log_prob = log_softmax[np.arange(len(expected)), expected].sum()
        assert score == pytest.approx(gnmt(log_prob, len(expected), translator.length_penalty), rel=1e-4)


def test_every_beam_keeps_the_prefix_and_the_best_is_the_searchs_own(hesitant):
    prefixes = ["l k", "a", "c c c", "b", "e f g", "a b"]
    translator = Translator(hesitant, beam_size=3)
    n_best = translator.translate(SOURCES, n_best=3, prefix=prefixes)
    best = translator.translate(SOURCES, prefix=prefixes)
    for prefix, hypotheses, first in zip(prefixes, n_best, best, strict=True):
        assert all(h.startswith(prefix) for h in hypotheses) and len(set(hypotheses)) == 3
        assert hypotheses[0] == first


@pytest.mark.parametrize(
    "prefix, message",
    [
        ("a b", r"prefix must be a list of target texts, one a sentence, not one str"),
        (["a"], r"prefix needs one text a sentence: got 1 prefixes for 2 sentences"),
        (["a", "  "], r"prefix 1 \('  '\) has no tokens; give target text, or no prefix"),
        (["a", "a " * 34], r"prefix 1 has 34 tokens; the translations are at most 34 with \[END\]: give a shorter"),
    ],
)
def test_a_prefix_that_cannot_start_a_translation_is_refused_in_one_sentence(copier, prefix, message):
    with pytest.raises(ValueError, match=message):
        Translator(copier).translate(["a b", "c"], prefix=prefix)


def test_no_sentences_with_no_prefixes_translate_to_nothing(copier):
    assert Translator(copier, xla=False).translate([], prefix=[]) == []


@pytest.mark.slow  # 55 s: a dozen translators, each compiled
def test_sampling_draws_by_its_seed_and_at_the_limits_is_greedy(hesitant):
    greedy = Translator(hesitant).translate(SOURCES)
    assert Translator(hesitant, temperature=1e-4, seed=3).translate(SOURCES) == greedy
    assert Translator(hesitant, temperature=1.0, top_k=1, seed=3).translate(SOURCES) == greedy
    unlimited = Translator(hesitant, temperature=1.0, seed=3).translate(SOURCES)
    assert Translator(hesitant, temperature=1.0, top_k=10_000, seed=3).translate(SOURCES) == unlimited  # above V
    for xla in (True, False):  # each loop draws by its seed (XLA's random numbers are not the plain loop's)
        sampled = {seed: Translator(hesitant, temperature=1.5, seed=seed, xla=xla) for seed in (1, 2)}
        draw = {seed: translator.translate(SOURCES * 4) for seed, translator in sampled.items()}
        assert Translator(hesitant, temperature=1.5, seed=1, xla=xla).translate(SOURCES * 4) == draw[1]
        assert draw[1] != draw[2] and greedy * 4 not in draw.values()


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(temperature=0.5, beam_size=2), r"sampling \(temperature=0.5\) draws one translation: use beam_size=1"),
        (dict(temperature=-1), r"temperature must be 0 \(greedy\) or a finite number above it, got temperature=-1"),
        (dict(temperature=1, top_p=0), r"top_p must be in \(0, 1\], got top_p=0"),
        (dict(temperature=1, top_k=-2), r"top_k must be a non-negative integer \(0: no limit\), got top_k=-2"),
    ],
)
def test_sampling_settings_out_of_range_are_refused(copier, settings, message):
    with pytest.raises(ValueError, match=message):
        Translator(copier, **settings)


@pytest.mark.slow  # 20 s: four CLI runs
def test_kformer_translate_takes_a_prefix_and_sampling_flags(copier, tmp_path, capsys):
    model = tmp_path / "copier"
    copier.save(model)
    assert main(["translate", "--model", str(model), "--prefix", "l k", "a b c", "d e"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == Translator(copier).translate(["a b c", "d e"], prefix=["l k", "l k"])
    assert all(line.startswith("l k") for line in lines)
    argv = ["translate", "--model", str(model), "--temperature", "1.5", "--seed", "4", "a b c"]
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == Translator(copier, temperature=1.5, seed=4).translate(["a b c"])
    assert main(["translate", "--model", str(model), "--beam", "2", "--temperature", "1", "a"]) == 2
    assert "draws one translation: use --beam 1." in capsys.readouterr().err
    assert main(["translate", "--model", str(model), "--prefix", " ", "a"]) == 2
    assert "--prefix ' ': prefix 0 (' ') has no tokens" in capsys.readouterr().err


def numpy_greedy_without_repeats(trained, source, n, max_length):
    """Greedy over the uncached model's logits, each step skipping the tokens that would repeat an n-gram."""
    encoder = trained.source_tokenizer.tokenize([source]).to_tensor().numpy()
    tokens = []
    while len(tokens) < max_length and (not tokens or tokens[-1] != END_ID):
        logits = model_logits(trained.model, encoder, [[START_ID, *tokens]])[0, -1]
        tail = tuple(tokens[len(tokens) - n + 1 :]) if len(tokens) >= n - 1 else None
        starts = range(len(tokens) - n + 1) if tail is not None else []
        banned = {tokens[i + n - 1] for i in starts if tuple(tokens[i : i + n - 1]) == tail}
        logits[list(banned)] = -np.inf
        tokens.append(int(logits.argmax()))
    return tokens


def ngrams(tokens, n):
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


@pytest.mark.parametrize(
    "n, xla", [(2, True), pytest.param(3, False, marks=pytest.mark.slow), pytest.param(1, True, marks=pytest.mark.slow)]
)
def test_no_repeat_ngram_bans_exactly_the_repeats_greedy_and_beam(copier, n, xla):
    sources = ["a b a b a b", "c c c c", "a b c a b c", "d e f"]
    greedy = Translator(copier, no_repeat_ngram=n, xla=xla)
    limit = max(12, 2 * 6 + 10)  # the output limit of a batch whose longest source has 6 tokens
    for source, text in zip(sources, greedy.translate(sources), strict=True):
        expected = numpy_greedy_without_repeats(copier, source, n, limit)
        assert text == copier.target_tokenizer.detokenize(np.array([expected], "int32")).numpy()[0].decode(), (
            source,
            n,
        )
    assert Translator(copier, xla=xla).translate(["a b a b a b"]) == ["a b a b a b"]  # the copy, repeats and all
    beams = Translator(copier, beam_size=3, no_repeat_ngram=n, xla=xla)
    found = [
        (source, text, score)
        for source, hypotheses in zip(sources, beams.translate(sources, n_best=3, with_scores=True), strict=True)
        for text, score in hypotheses
    ]
    # The score is the model's own log-probability of those tokens, not one renormalised without the banned.
    given = beams.score([source for source, _, _ in found], [text for _, text, _ in found])
    for (_, text, score), pair in zip(found, given, strict=True):
        tokens = text.split()
        assert len(set(ngrams(tokens, n))) == len(ngrams(tokens, n)), (text, n)
        assert score == pytest.approx(gnmt(pair.log_prob, pair.tokens, beams.length_penalty), rel=1e-4, abs=1e-5)


def test_the_no_repeat_ngram_flag_reaches_the_decoder(copier, tmp_path, capsys):
    copier.save(tmp_path / "copier")
    assert main(["translate", "--model", str(tmp_path / "copier"), "--no-repeat-ngram", "2", "a b a b a b"]) == 0
    tokens = capsys.readouterr().out.split()
    assert tokens[:3] == ["a", "b", "a"] and len(set(ngrams(tokens, 2))) == len(ngrams(tokens, 2)), tokens
    with pytest.raises(SystemExit):
        main(["translate", "--model", str(tmp_path / "copier"), "--no-repeat-ngram", "-1", "a"])
    assert "argument --no-repeat-ngram: expected a whole number of 0 or more, got '-1'" in capsys.readouterr().err


def numpy_alignment(trained, source, target, layer=-1):
    """The alignment `align` documents, recomputed word by word in NumPy from the model's attention weights."""
    import tensorflow as tf

    tokenize = {side: getattr(trained, f"{side}_tokenizer").tokenize for side in ("source", "target")}
    words = {"source": source.split(), "target": target.split()}
    ids = {side: [list(tokenize[side](tf.constant([w])).flat_values.numpy()) for w in words[side]] for side in words}
    source_ids = tf.constant([[i for word in ids["source"] for i in word]], tf.int32)
    decoder_ids = tf.constant([[START_ID] + [i for word in ids["target"] for i in word]], tf.int32)
    context = trained.model.get_layer("encoder")(source_ids)
    _, scores = trained.model.get_layer("decoder").run_with_attention(decoder_ids, context, source_ids != PAD_ID)
    weights = to_numpy(scores[layer]["cross_attention"])[0].mean(axis=0)  # (T, S): token t's row, [START]'s first
    token_word = {side: [n for n, word in enumerate(ids[side]) for _ in word] for side in ids}
    links = []
    for j in range(len(words["target"])):
        rows = [t for t, word in enumerate(token_word["target"]) if word == j]
        totals = [
            sum(weights[t, s] for t in rows for s, w in enumerate(token_word["source"]) if w == i)
            for i in range(len(words["source"]))
        ]
        links.append(f"{int(np.argmax(totals))}-{j}")
    return " ".join(links)


def test_alignments_link_each_copied_letter_to_itself_and_sum_attention_over_each_words_tokens(copier):
    """The copier writes the n-th letter while attending to the n-th: its alignment is the diagonal. Words of
    several tokens (unknown ones, "x" a [UNK] each) and a layer chosen: the word sums of a NumPy recomputation."""
    translator = Translator(copier)
    assert translator.align(["a b c d", "l k j i h g"], ["a b c d", "l k j i h g"]) == [
        "0-0 1-1 2-2 3-3",
        "0-0 1-1 2-2 3-3 4-4 5-5",
    ]
    pairs = [("a b,c d", "d c b a"), ("xx a b", "b a xx"), ("a", ""), ("", "a b")]
    for layer in (0, -1):
        expected = [numpy_alignment(copier, s, t, layer) if s and t else "" for s, t in pairs]
        assert translator.align([s for s, _ in pairs], [t for _, t in pairs], layer=layer) == expected
    with pytest.raises(ValueError, match="align needs one translation a source: got 2 and 1"):
        translator.align(["a", "b"], ["a"])


def test_a_model_with_dropout_aligns_with_it_off_as_it_translates(copier):
    """Dropout on while aligning would move the links at random: they are the inference-mode model's, each time."""
    import keras

    import kformer

    keras.utils.set_random_seed(3)
    model = kformer.build_transformer(
        len(VOCAB), len(VOCAB), d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.5
    )
    trained = TrainedModel(model, copier.source_tokenizer, copier.target_tokenizer, copier.config)
    sources, targets = ["a b c d e f", "l k j i h g f e"], ["f e d c b a", "a b c d e f g h"]
    expected = [numpy_alignment(trained, source, target) for source, target in zip(sources, targets, strict=True)]
    translator = Translator(trained, xla=False)
    assert translator.align(sources, targets) == expected == translator.align(sources, targets)
    # Each alone, without the other's padding: the shorter source's pads are masked out of its cross-attention.
    alone = [translator.align([source], [target])[0] for source, target in zip(sources, targets, strict=True)]
    assert alone == expected
    assert translator.align(["", ""], ["", ""]) == ["", ""]  # a batch with no word at all
    # Scores too are the inference-mode model's: NumPy's log-softmax of its logits, token by token.
    scored = translator.score(sources, targets)
    for (source, target), found in zip(zip(sources, targets, strict=True), scored, strict=True):
        ids = trained.target_tokenizer.tokenize([target]).flat_values.numpy().tolist()
        np.testing.assert_allclose(found.token_log_probs, numpy_log_probs(trained, source, ids), rtol=1e-4, atol=1e-5)


def test_align_reads_a_sentence_of_max_length_tokens_whole_and_refuses_a_longer_one_by_its_number(copier):
    translator = Translator(copier, max_length=6, xla=False)  # not compiled: align runs the model teacher-forced
    six = "a b c d e f"
    assert translator.align([six], [six]) == ["0-0 1-1 2-2 3-3 4-4 5-5"]
    with pytest.raises(SentenceTooLong) as raised:
        translator.align(["a b", f"{six} g"], ["a b", "a"])
    assert (raised.value.index, str(raised.value)) == (
        1,
        "sentence 2 has 7 tokens, more than max_length (6); n_best, with_scores, prefix and with_alignments read "
        "each sentence whole: split it, or translate it without them (then it is read in pieces).",
    )
    with pytest.raises(ValueError, match=r"^batch_size must be a positive integer, got batch_size=0\.$"):
        translator.align([six], [six], batch_size=0)


@pytest.mark.slow  # 23 s: n-best lists aligned, two CLI runs
def test_translate_with_alignments_gives_each_hypothesis_its_alignment(copier, tmp_path, capsys):
    translator = Translator(copier, beam_size=2)
    sources = ["a b c", "d e"]
    plain = translator.translate(sources, with_alignments=True)
    assert plain == [
        (t, a)
        for t, a in zip(
            translator.translate(sources), translator.align(sources, translator.translate(sources)), strict=True
        )
    ]
    assert plain[0] == ("a b c", "0-0 1-1 2-2")
    lists = translator.translate(sources, n_best=2, with_scores=True, with_alignments=True)
    for source, found, scored in zip(
        sources, lists, translator.translate(sources, n_best=2, with_scores=True), strict=True
    ):
        assert [(t, s) for t, s, _ in found] == scored
        assert [a for _, _, a in found] == translator.align([source] * 2, [t for t, _ in scored])
    TrainedModel(copier.model, copier.source_tokenizer, copier.target_tokenizer, {"max_length": 12}).save(
        tmp_path / "m"
    )
    assert main(["translate", "--model", str(tmp_path / "m"), "--alignments", *sources]) == 0
    assert capsys.readouterr().out.splitlines() == ["a b c ||| 0-0 1-1 2-2", "d e ||| 0-0 1-1"]
    assert main(["translate", "--model", str(tmp_path / "m"), "--alignments", "--json", "a b"]) == 0
    (hypothesis,) = json.loads(capsys.readouterr().out)["hypotheses"]
    assert hypothesis["translation"] == "a b" and hypothesis["alignment"] == "0-0 1-1"
