"""Decoding: the KV cache against the plain path, beam against greedy, batching, bad input."""

import inspect
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import (
    VOCAB,
    copy_task_model,
    count_decode_steps,
    hesitant_model,
    run_fresh_python,
    shifted_right,
    teacher_forced_log_probs,
    to_numpy,
)

from kformer import Translator, build_transformer
from kformer.data.text import END_ID, PAD_ID, START_ID
from kformer.inference.decoding import GROW, _step_function, _top_logits, beam_search, decode
from kformer.layers import make_padding_mask


@pytest.fixture(scope="module")
def random_model():
    keras.utils.set_random_seed(5)
    return build_transformer(len(VOCAB), len(VOCAB), d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0)


@pytest.fixture(scope="module")
def trained():
    return copy_task_model()


@pytest.fixture(scope="module")
def greedy(trained):
    """A greedy Translator (XLA, the default) that the string tests share: its traces and compilations made once."""
    return Translator(trained)


def random_tokens(batch, length, seed=0):
    tokens = np.random.default_rng(seed).integers(4, len(VOCAB), size=(batch, length)).astype("int32")
    tokens[1:, length - 2 :] = 0  # some padding
    return tokens


@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_and_uncached_decoding_give_identical_tokens(random_model, trained, beam_size):
    for model in (random_model, trained.model):
        tokens = random_tokens(4, 6)
        cached = decode(model, tokens, max_length=10, beam_size=beam_size, use_cache=True)
        uncached = decode(model, tokens, max_length=10, beam_size=beam_size, use_cache=False)
        np.testing.assert_array_equal(to_numpy(cached), to_numpy(uncached))


def assert_steps_equal_the_full_decoder(model, buffer_length, seed=1):
    """The cache's logits at every position match one teacher-forced decoder pass."""
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    source = random_tokens(2, 5)
    # A generated prefix has no padding in it.
    generated = np.random.default_rng(seed).integers(4, len(VOCAB), size=(2, 6))
    target = np.concatenate([np.full((2, 1), START_ID), generated], 1).astype("int32")
    mask = make_padding_mask(source)
    context = encoder(source)
    full = to_numpy(decoder(target, context=context, context_padding_mask=mask))
    step, cache = _step_function(decoder, context, mask, 1, use_cache=True, rows=2, length=buffer_length)
    assert [key.shape[2] for key, _ in cache] == [buffer_length] * len(decoder.blocks)
    for t in range(7):
        logits, cache = step(tf.constant(target), tf.constant(t), cache)
        np.testing.assert_allclose(to_numpy(logits), full[:, t], atol=1e-4)


def test_cached_step_logits_equal_the_full_decoder(random_model):
    """A cache of exactly the 7 positions decoded; and of a pre-LN model, whose steps end with its last LayerNorm."""
    assert_steps_equal_the_full_decoder(random_model, buffer_length=7)
    keras.utils.set_random_seed(3)
    pre_ln = build_transformer(len(VOCAB), len(VOCAB), d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0,
                               norm_first=True)  # fmt: skip
    assert_steps_equal_the_full_decoder(pre_ln, buffer_length=7)


def test_buffers_of_a_length_known_at_run_time_grow_as_written(random_model):
    """The graph loop's buffers: GROW positions at first, a chunk more when full, not the whole limit at once."""
    encoder, decoder = random_model.get_layer("encoder"), random_model.get_layer("decoder")
    source, steps = random_tokens(2, 5), GROW + 4
    generated = np.random.default_rng(3).integers(4, len(VOCAB), size=(2, steps))
    target = tf.constant(np.concatenate([np.full((2, 1), START_ID), generated], 1).astype("int32"))
    mask = make_padding_mask(source)
    context = encoder(source)
    full = to_numpy(decoder(target, context=context, context_padding_mask=mask))

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def run(length):  # the limit is a tensor, as in the graph loop
        step, cache = _step_function(decoder, context, mask, 1, use_cache=True, rows=2, length=length)
        assert cache[0][0].shape[2] is None
        logits, lengths = [], []
        for t in range(steps):
            out, cache = step(target, tf.constant(t), cache)
            logits.append(out)
            lengths.append(tf.shape(cache[0][0])[2])
        return tf.stack(logits, 1), tf.stack(lengths)

    logits, lengths = run(tf.constant(100))
    np.testing.assert_array_equal(to_numpy(lengths), [GROW] * GROW + [2 * GROW] * 4)
    np.testing.assert_allclose(to_numpy(logits), full[:, :steps], atol=1e-4)


def test_decode_takes_one_cached_step_a_token_by_default(trained, monkeypatch):
    """The copy model on sources 2, 4 and 3 long (int64 ids): each copy, [END], [PAD]; 4 + 1 steps, the longest
    row's, each a cached step; the uncached path takes none and gives the same tokens."""
    decoder = trained.model.get_layer("decoder")
    steps = count_decode_steps(decoder, monkeypatch)
    tokens = np.array([[5, 6, 0, 0], [7, 8, 9, 10], [11, 4, 5, 0]], "int64")
    output = to_numpy(decode(trained.model, tokens, max_length=8))
    expected = [[5, 6, END_ID, 0, 0, 0, 0, 0], [7, 8, 9, 10, END_ID, 0, 0, 0], [11, 4, 5, END_ID, 0, 0, 0, 0]]
    np.testing.assert_array_equal(output, expected)
    assert len(steps) == 5
    np.testing.assert_array_equal(to_numpy(decode(trained.model, tokens, max_length=8, use_cache=False)), expected)
    assert len(steps) == 5


@pytest.mark.parametrize("beam_size", [1, 2])
def test_decoding_drops_nothing_in_a_model_built_with_dropout(beam_size):
    """Dropout 0.5 everywhere: decode gives the tokens of the same weights in a model without dropout."""
    keras.utils.set_random_seed(6)
    sizes = dict(d_model=32, num_heads=4, num_layers=2, d_ff=64)
    with_dropout = build_transformer(len(VOCAB), len(VOCAB), dropout=0.5, **sizes)
    without = build_transformer(len(VOCAB), len(VOCAB), dropout=0.0, **sizes)
    without.set_weights(with_dropout.get_weights())
    tokens = random_tokens(4, 6, seed=4)
    decoder_tokens = tokens[:, ::-1].copy()  # some target: while training, dropout changes its argmax somewhere
    dropped = to_numpy(with_dropout([tokens, decoder_tokens], training=True)).argmax(-1)
    assert (dropped != to_numpy(without([tokens, decoder_tokens])).argmax(-1)).any()
    for use_cache in (True, False):
        expected = to_numpy(decode(without, tokens, 8, beam_size=beam_size, use_cache=use_cache))
        np.testing.assert_array_equal(
            to_numpy(decode(with_dropout, tokens, 8, beam_size, use_cache=use_cache)), expected
        )


@pytest.mark.slow  # 14 s: compiles greedy and beam loops
def test_trained_model_copies_with_greedy_and_beam(trained):
    for beam_size in (1, 4):
        translator = Translator(trained, beam_size=beam_size)
        assert translator.translate(["a b c", "l k j i h", "d e"]) == ["a b c", "l k j i h", "d e"]


def test_beam_search_finds_a_sequence_at_least_as_likely_as_greedy(random_model):
    tokens = random_tokens(4, 6)
    greedy = to_numpy(decode(random_model, tokens, max_length=8))
    beam = to_numpy(decode(random_model, tokens, max_length=8, beam_size=5, length_penalty=0.0))
    likely = teacher_forced_log_probs(random_model, tokens, beam)
    assert (likely >= teacher_forced_log_probs(random_model, tokens, greedy) - 1e-4).all()


def test_decode_by_default_takes_the_likeliest_token_at_every_step(random_model):
    """Greedy, as the whole model scores the output (teacher-forced): each token is its row's argmax."""
    tokens = random_tokens(4, 6)
    output = to_numpy(decode(random_model, tokens, max_length=8))
    likeliest = to_numpy(tf.argmax(random_model([tokens, shifted_right(output)]), axis=-1))
    np.testing.assert_array_equal(np.where(output > 0, likeliest, 0), output)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_no_search_writes_pad_or_start_even_where_the_model_likes_them_best(beam_size):
    """[PAD] and [START] are no output tokens: a model whose output bias makes them its likeliest ids still
    gets real tokens, [END] then only [PAD] (a [PAD] written mid-sentence would read as an early end)."""
    keras.utils.set_random_seed(5)
    model = build_transformer(len(VOCAB), len(VOCAB), d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0)
    model.get_layer("decoder").output_projection.bias.assign(
        np.isin(np.arange(len(VOCAB)), [PAD_ID, START_ID]).astype("float32") * 20.0
    )
    output = to_numpy(decode(model, random_tokens(4, 6), max_length=8, beam_size=beam_size))
    assert not np.isin(output, [START_ID]).any()
    for row in output:
        written = row[: list(row).index(END_ID) + 1] if END_ID in row else row
        assert len(written) and (written != PAD_ID).all()


def test_decodes_length_penalty_is_the_translators_gnmt_0_6():
    penalty = inspect.signature(decode).parameters["length_penalty"].default
    assert penalty == inspect.signature(Translator).parameters["length_penalty"].default == 0.6


@pytest.mark.parametrize("vocab, k", [(8000, 4), (6961, 5), (17, 2), (10, 4), (3, 3)])
@pytest.mark.parametrize("shift", [0.0, -100.0])  # logits all negative: the last block's padding must not win
def test_top_logits_equal_top_k(vocab, k, shift):
    logits = tf.random.stateless_normal((7, vocab), seed=[vocab, k]) + shift
    values, ids, row_max = _top_logits(logits, k)
    expected_values, expected_ids = tf.math.top_k(logits, k)
    np.testing.assert_array_equal(to_numpy(values), to_numpy(expected_values))
    np.testing.assert_array_equal(to_numpy(ids), to_numpy(expected_ids))
    np.testing.assert_array_equal(to_numpy(row_max), to_numpy(tf.reduce_max(logits, axis=1)))


def test_top_logits_never_ranks_or_copies_the_whole_vocabulary():
    """Its point: V = 8000, k = 4: top-k runs over 89 block maxima and 4 blocks of 90, and no tensor is wider
    than V + one block a row (the last block's padding)."""
    graph = tf.function(lambda logits: _top_logits(logits, 4)).get_concrete_function(tf.TensorSpec([7, 8000])).graph
    outputs = [x for op in graph.get_operations() for x in op.outputs]
    assert all(x.shape.is_fully_defined() for x in outputs)
    assert max(x.shape.num_elements() for x in outputs) <= 7 * (8000 + 90)
    ranked = [op.inputs[0].shape[-1] for op in graph.get_operations() if op.type == "TopKV2"]
    assert sorted(ranked) == [89, 4 * 90]


def reference_beam_search(tables, max_length, beam_size, length_penalty, every_hypothesis=True):
    """Beam search with its finished hypotheses kept apart, as its definition reads, in NumPy.

    Each step ranks all beam_size * V continuations of the live beams by log-probability and takes the best
    2 * beam_size: those ending in [END] join the finished hypotheses (the best beam_size by GNMT's score
    kept), the best beam_size others stay live. A sentence is done when its best (or beam_size-th) finished
    hypothesis scores at least a live one's log p over the penalty of max_length tokens. The live ones then
    rank among the finished as long as they are. The "model" is a bigram table for each sentence: the
    logits after token a in sentence s are tables[s, a]. Returns every sentence's hypotheses, best first
    (B, beam, max_length), and their log-probabilities (B, beam).
    """
    batch, vocab = tables.shape[0], tables.shape[2]
    log_tables = tables - np.log(np.exp(tables).sum(2, keepdims=True))  # log-softmax per row
    log_tables[:, :, [PAD_ID, START_ID]] = -np.inf  # no output tokens: never a continuation
    settled = beam_size - 1 if every_hypothesis else 0  # the finished hypothesis that must beat every live one

    def penalty(length):
        return ((5.0 + length) / 6.0) ** length_penalty

    results, result_scores = [], []
    for s in range(batch):
        live = [((START_ID,), 0.0)]  # (tokens, log p), best first
        finished = []  # (GNMT score, tokens, log p), best first
        steps = 0
        while steps < max_length and not (
            len(finished) > settled and finished[settled][0] >= live[0][1] / penalty(max_length)
        ):
            candidates = [(seq + (a,), p + log_tables[s, seq[-1], a]) for seq, p in live for a in range(vocab)]
            order = sorted(range(len(candidates)), key=lambda i: -candidates[i][1])[: 2 * beam_size]  # stable
            ended = [(p / penalty(steps + 1), seq, p) for seq, p in (candidates[i] for i in order) if seq[-1] == END_ID]
            finished = sorted(finished + ended, key=lambda f: -f[0])[:beam_size]
            live = [candidates[i] for i in order if candidates[i][0][-1] != END_ID][:beam_size]
            steps += 1
        cut = [(p / penalty(steps), seq, p) for seq, p in live]  # not finished: as long as they are
        hypotheses = sorted(finished + cut, key=lambda f: -f[0])[:beam_size]
        results.append([list(seq[1:]) + [PAD_ID] * (max_length + 1 - len(seq)) for _, seq, _ in hypotheses])
        result_scores.append([p for _, _, p in hypotheses])
    return np.array(results), np.array(result_scores)


def bigram_search(tables, max_length, beam_size, length_penalty, every_hypothesis=True, empty=()):
    """`beam_search` over the bigram model of `reference_beam_search`; the sentences in `empty` have empty sources."""
    logits_tables = tf.constant(tables, tf.float32)
    sentence = tf.range(len(tables) * beam_size) // beam_size

    def step(tokens, t, state):
        return tf.gather_nd(logits_tables, tf.stack([sentence, tf.gather(tokens, t, axis=1)], axis=1)), state

    done = tf.constant(np.repeat(np.isin(np.arange(len(tables)), empty), beam_size))
    found = beam_search(step, (), done, max_length, beam_size, length_penalty, every_hypothesis=every_hypothesis)
    return tuple(to_numpy(x) for x in found)


def bigram_tables(batch, vocab, seed):
    """Random bigram logits, peaked enough that long hypotheses can win, where sentences end at different
    steps (the later, the lower [END]'s logits) or never, none ends at once, and ids 0-2 are never likely."""
    rng = np.random.default_rng(seed)
    tables = rng.normal(0, 4, size=(batch, vocab, vocab))
    tables[:, :, END_ID] += rng.normal(0, 2, size=(batch, vocab)) + np.linspace(-8, -1, batch)[:, None]
    tables[:, :, :END_ID] = -30.0
    tables[:, START_ID, END_ID] = -40.0
    return tables


@pytest.mark.parametrize(
    "beam_size, length_penalty, every_hypothesis", [(1, 0.6, True), (2, 0.0, True), (4, 0.6, False), (5, 1.0, True)]
)
def test_beam_search_equals_the_reference_search(beam_size, length_penalty, every_hypothesis):
    """Six sentences, each its own search: they end at different steps, some never."""
    tables = bigram_tables(batch=6, vocab=12, seed=4)
    ours, log_probs = bigram_search(tables, 9, beam_size, length_penalty, every_hypothesis)
    expected, expected_log_probs = reference_beam_search(tables, 9, beam_size, length_penalty, every_hypothesis)
    assert len({tuple(row) for row in expected[:, 0]}) == 6  # six searches, not one six times
    assert {bool(ended) for ended in (expected[:, 0] == END_ID).any(axis=1)} == {True, False}
    shown = beam_size if every_hypothesis else 1  # without every_hypothesis only the best is settled
    np.testing.assert_array_equal(ours[:, :shown], expected[:, :shown])
    np.testing.assert_allclose(log_probs[:, :shown], expected_log_probs[:, :shown], rtol=1e-5)
    assert all(len({tuple(beam) for beam in beams}) == beam_size for beams in expected)  # distinct hypotheses


@pytest.mark.parametrize("length_penalty", [0.0, 0.6, 1.0])
def test_a_beam_as_wide_as_the_tree_finds_the_best_hypothesis_of_all(length_penalty):
    """Against brute force: every output of up to 4 tokens over the 3 usable ids, scored by GNMT, those cut
    at 4 tokens without [END] counted 4 long.

    A beam of 27 keeps every live prefix, so only a wrong stop (the bound on what a live hypothesis can
    still reach) or a wrong final ranking can miss the best one.
    """
    max_length, beam_size = 4, 27
    tables = bigram_tables(batch=5, vocab=28, seed=7)
    tables[:, :, 6:] = tables[:, :, 3:4] = -30.0  # the usable ids: [END], 4 and 5
    log_tables = tables - np.log(np.exp(tables).sum(2, keepdims=True))
    ours, log_probs = bigram_search(tables, max_length, beam_size, length_penalty)
    ended = [(*words, END_ID) for n in range(max_length) for words in itertools.product([4, 5], repeat=n)]
    outputs = ended + list(itertools.product([4, 5], repeat=max_length))
    for s in range(len(tables)):
        scores = [
            sum(log_tables[s, a, b] for a, b in itertools.pairwise((START_ID, *output)))
            / ((5.0 + len(output)) / 6.0) ** length_penalty
            for output in outputs
        ]
        best = outputs[int(np.argmax(scores))]
        np.testing.assert_array_equal(ours[s, 0], [*best, *[PAD_ID] * (max_length - len(best))])
        np.testing.assert_allclose(
            log_probs[s, 0] / ((5.0 + len(best)) / 6.0) ** length_penalty, max(scores), rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("length_penalty", [0.0, 0.6])
def test_a_finished_hypothesis_is_never_pushed_out_by_likelier_live_ones(length_penalty):
    """Beam 2 on a hand-made bigram model (ids: [END] 3, A 4, B 5, C 6): after [START] comes C (0.95); after C,
    [END] (0.25) or A (0.7); after A, A or B (0.5 each); after B, [END] (0.1), A or B. "C [END]" (log p -1.44)
    is the best output; the two "C A x" (-1.10) are likelier while they last, so a search that ranks finished
    and live hypotheses in one pool of 2 drops "C [END]" at the third step and ends with a worse one."""
    probabilities = np.full((7, 7), 1e-6)
    probabilities[START_ID, 6] = 0.95
    probabilities[6, [END_ID, 4]] = 0.25, 0.7
    probabilities[4, [4, 5]] = 0.5
    probabilities[5, [END_ID, 4, 5]] = 0.1, 0.45, 0.45
    tables = np.log(probabilities)[None]
    tokens, log_probs = bigram_search(tables, 8, 2, length_penalty)
    np.testing.assert_array_equal(tokens[0, 0, :3], [6, END_ID, PAD_ID])
    assert log_probs[0, 0] == pytest.approx(
        np.log(0.95 / probabilities[START_ID].sum() * 0.25 / probabilities[6].sum())
    )


@pytest.mark.parametrize("length_penalty, sources", [(0.6, "mixed"), (0.0, "mixed"), (0.0, "empty"), (0.6, "empty")])
def test_an_empty_source_ends_at_once_with_one_hypothesis(length_penalty, sources):
    """An empty source (start_done) gives [PAD] only, log p 0, and its other hypotheses never lived (about -1e9),
    beside a sentence that is searched or in a batch of empty ones alone, where the loop stops at once."""
    tables = bigram_tables(batch=2, vocab=8, seed=3)
    tokens, log_probs = bigram_search(tables, 6, 3, length_penalty, empty=[0] if sources == "mixed" else [0, 1])
    assert (tokens[0] == PAD_ID).all() and log_probs[0, 0] == 0.0 and (log_probs[0, 1:] <= -1e8).all()
    if sources == "mixed":
        expected, _ = reference_beam_search(tables[1:], 6, 3, length_penalty)
        np.testing.assert_array_equal(tokens[1], expected[0])
    else:
        np.testing.assert_array_equal(log_probs, log_probs[:1].repeat(2, 0))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_batched_equals_one_by_one_and_padding_changes_nothing(trained, beam_size):
    translator = Translator(trained, beam_size=beam_size)
    tokens = random_tokens(4, 7, seed=3)
    batched = to_numpy(translator.translate_ids(tokens))
    for row in range(4):
        alone = to_numpy(translator.translate_ids(tokens[row : row + 1]))
        np.testing.assert_array_equal(alone[0, : batched.shape[1]], batched[row, : alone.shape[1]])
        more_padding = np.pad(tokens[row : row + 1], ((0, 0), (0, 5)))
        padded = to_numpy(translator.translate_ids(more_padding))
        assert list(padded[0][padded[0] > 0]) == list(alone[0][alone[0] > 0])


def test_strings_in_strings_out_with_awkward_input(greedy):
    translator = greedy
    texts = ["", "   ", "a b " * 2500, "a 猫 🐈 ñ b", "é", "a b c"]
    outputs = [t.decode() for t in translator(tf.constant(texts)).numpy()]
    assert outputs[0] == outputs[1] == ""
    assert outputs[5] == "a b c"
    assert all(isinstance(o, str) for o in outputs)
    assert [t.decode() for t in translator(tf.constant(["", ""])).numpy()] == ["", ""]


def test_no_retracing_across_lengths_and_batch_sizes(greedy):
    translator = greedy  # the strings test's calls count too, where it ran first: still one trace
    for texts in (["a"], ["a b c d e", "f"], ["a b"] * 7):
        translator(tf.constant(texts))
    assert translator.__call__.experimental_get_tracing_count() == 1


def test_translate_and_score_trace_each_of_their_functions_once_across_batch_sizes(trained):
    """The functions `translate` (plain, n-best, prefixed) and `score` make on first use keep their input signatures:
    a new batch size or length reuses the trace (a trace costs seconds)."""
    translator = Translator(trained, beam_size=2, xla=False)
    made = None
    for texts in (["a"], ["a b c d e", "f", "g h"]):
        translator.translate(texts)
        translator.translate(texts, n_best=2)
        translator.translate(texts, prefix=["a"] * len(texts))
        translator.score(texts, texts)
        made = made or dict(vars(translator._made))  # the functions the first batch made
    assert vars(translator._made) == made  # kept and used again, not made anew (each new one traces afresh)
    counts = [function.experimental_get_tracing_count() for function in made.values()]
    assert len(counts) >= 4 and set(counts) == {1}, counts


@pytest.mark.slow  # 18 s: writes and reloads a SavedModel
def test_translator_saves_as_a_savedmodel_signature(trained, tmp_path):
    translator = Translator(trained)
    expected = [t.decode() for t in translator(tf.constant(["a b c", "d e"])).numpy()]
    tf.saved_model.save(
        translator,
        str(tmp_path / "saved"),
        signatures={"serving_default": translator.__call__, "translate_ids": translator.translate_ids},
    )
    out = run_fresh_python(
        """
        import tensorflow as tf, tensorflow_text  # registers the tokenizer ops
        loaded = tf.saved_model.load("saved")
        result = loaded.signatures["serving_default"](texts=tf.constant(["a b c", "d e"]))
        print("|".join(t.decode() for t in list(result.values())[0].numpy()))
        """,
        cwd=tmp_path,
    )
    assert out.strip().splitlines()[-1] == "|".join(expected) == "a b c|d e"


def test_xla_compiles_the_loop_once_per_batch_rows_and_source_bucket(tmp_path):
    """XLA's own count, from its dump of each module it compiles (a fresh process, so that the flag is read):
    sources padded to a multiple of 8 tokens and a lone sentence to two rows, whatever the output length (the
    loop's length, min(width + extra tokens, 24), differs between widths 3 and 7)."""
    out = run_fresh_python(
        f"""
        import os
        os.environ["XLA_FLAGS"] = "--xla_dump_to=dump --xla_dump_hlo_module_re=.*decode_fixed.*"
        import numpy as np
        from kformer import TrainedModel, Translator, build_transformer
        from kformer.data.text import Tokenizer

        model = build_transformer({len(VOCAB)}, {len(VOCAB)}, d_model=16, num_heads=2, num_layers=1, d_ff=32)
        tokenizer = Tokenizer({VOCAB!r})
        translator = Translator(TrainedModel(model, tokenizer, tokenizer, {{"kind": "translator", "max_length": 24}}))
        compiled = []
        for rows, width in ((1, 3), (1, 7), (2, 5), (1, 12), (5, 6), (5, 3), (2, 16), (1, 9)):
            translator.translate_ids(np.full((rows, width), 5, "int32"))
            modules = {{name.split(".")[0] for name in os.listdir("dump") if name.endswith("before_optimizations.txt")}}
            compiled.append(len(modules))
        print(compiled)
        """,
        cwd=tmp_path,
    )
    # Rows 2 (a lone sentence padded to two) and width 8, then 16, then 5 rows of 8; nothing new after.
    assert out.strip().splitlines()[-1] == "[1, 1, 1, 2, 3, 3, 3, 3]"


@pytest.mark.parametrize(
    "beam_size",
    [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)],  # 23 s each
)
def test_xla_loop_over_fixed_buffers_gives_the_plain_loops_tokens(random_model, trained, beam_size):
    """Two implementations: caches growing in a graph loop, fixed ones compiled by XLA (batch-padded, bucketed)."""
    for model in (trained.model, random_model):
        wrapped = trained.__class__(model, trained.source_tokenizer, trained.target_tokenizer, trained.config)
        plain = Translator(wrapped, beam_size=beam_size, xla=False)
        fast = Translator(wrapped, beam_size=beam_size, xla=True)
        for batch, length in ((1, 3), (1, 7), (5, 6), (2, 12)):
            tokens = random_tokens(batch, length, seed=batch + length)
            expected = to_numpy(plain.translate_ids(tokens))
            np.testing.assert_array_equal(to_numpy(fast.translate_ids(tokens)), expected)
        assert fast._decode_compiled.experimental_get_tracing_count() == 1  # the XLA loop ran (one trace)
        assert not hasattr(plain, "_decode_compiled")


@pytest.mark.slow  # 18 s: compiles several loops
def test_the_length_penalty_reaches_the_compiled_loop(trained):
    """The Translator's default (XLA) path ranks beams with the length penalty it was given, as the plain loop
    does. On `hesitant_model` the penalty decides the winner: without it [END] at once; with alpha 2, a long
    output."""
    wrapped = trained.__class__(hesitant_model(), trained.source_tokenizer, trained.target_tokenizer, trained.config)
    tokens = random_tokens(6, 7, seed=3)
    outputs = {}
    for length_penalty in (0.0, 2.0):
        fast, plain = (Translator(wrapped, 4, length_penalty, xla=xla) for xla in (True, False))
        outputs[length_penalty] = to_numpy(fast.translate_ids(tokens))
        np.testing.assert_array_equal(outputs[length_penalty], to_numpy(plain.translate_ids(tokens)))
    lengths = {penalty: (output != PAD_ID).sum(axis=1) for penalty, output in outputs.items()}
    assert (lengths[0.0] == 1).all() and (lengths[2.0] > 5).all()


def test_beam_search_runs_the_compiled_loop_up_to_64_sentences_a_batch_and_the_graph_loop_beyond(trained):
    """The switch has no effect on the tokens (the test above), so a counter in the compiled branch shows it."""
    from kformer.inference.translator import XLA_BEAM_BATCH

    translator = Translator(trained, beam_size=2)
    runs = tf.Variable(0)

    def counted(compiled):
        @tf.function
        def counting(tokens, max_length):  # runs only when tf.cond takes a compiled branch
            runs.assign_add(1)
            return compiled(tokens, max_length)

        return counting

    for name in ("_decode_compiled", "_decode_compiled_long"):  # the model's buffer, the longest output's
        setattr(translator, name, counted(getattr(translator, name)))  # before translate_ids is first traced
    for batch, runs_after in ((XLA_BEAM_BATCH, 1), (XLA_BEAM_BATCH + 1, 1), (3, 2)):
        translator.translate_ids(random_tokens(batch, 3, seed=batch))
        assert int(runs.numpy()) == runs_after, batch
    assert XLA_BEAM_BATCH == 64  # as the README and Translator's docstring say


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_fixed_buffer_is_the_results_width_with_pad_after_max_length(trained, beam_size):
    """`decode(..., buffer_length=9)`, max_length 4: `(B, 9)`, the plain loop's 4 tokens then [PAD], as documented."""
    tokens = random_tokens(3, 6)
    plain = to_numpy(decode(trained.model, tokens, 4, beam_size=beam_size))
    fixed = to_numpy(decode(trained.model, tokens, 4, beam_size=beam_size, buffer_length=9))
    assert fixed.shape == (3, 9)
    np.testing.assert_array_equal(fixed[:, :4], plain)
    assert (fixed[:, 4:] == PAD_ID).all()


def test_fixed_buffer_steps_equal_the_full_decoder(random_model):
    """The same with a cache longer than the positions decoded (XLA's buffers): 9 positions, 7 written."""
    assert_steps_equal_the_full_decoder(random_model, buffer_length=9, seed=2)


def test_evaluate_gives_sacrebleus_scores_of_the_greedy_translations(trained, monkeypatch):
    """`kformer evaluate`'s numbers, recomputed with sacreBLEU itself on the copy task's translations; and the
    same numbers from a Translator without XLA when asked (`kformer train --no-xla`'s end-of-run scores)."""
    import sacrebleu

    import kformer.training.evaluation
    from kformer import evaluate

    rng = np.random.default_rng(5)
    sources = [" ".join(rng.choice(list("abcdefghijkl"), size=rng.integers(3, 8))) for _ in range(24)]
    references = [source if i % 2 else " ".join(source.split()[::-1]) for i, source in enumerate(sources)]
    pairs = list(zip(sources, references, strict=True))
    made = []

    def spy(*args, **kwargs):
        made.append(Translator(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(kformer.training.evaluation, "Translator", spy)
    scores, plain = evaluate(trained, pairs), evaluate(trained, pairs, xla=False)
    assert [translator.xla for translator in made] == [True, False]
    for name in ("bleu", "chrf", "exact_match"):
        assert plain[name] == scores[name], name
    hypotheses = made[0].translate(sources)  # the default (XLA) Translator evaluate scored with, already compiled
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=0.006)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score, abs=0.006)
    exact = [hypothesis == reference for hypothesis, reference in zip(hypotheses, references, strict=True)]
    assert scores["exact_match"] == pytest.approx(100 * np.mean(exact), abs=0.006)
    assert 30 < scores["bleu"] < 90 and 40 <= scores["exact_match"] <= 60  # half the references copy, half reverse
