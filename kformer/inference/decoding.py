"""Inference: one token at a time, inside the graph, fast.

In training the decoder sees the whole target at once (teacher forcing). At
inference there is no target: the decoder runs once per output token and
feeds back what it produced. Done naively (as the common tutorials do) every
step re-runs the decoder over the whole prefix. Here:

- the encoder runs once per source, and each decoder layer's cross-attention
  keys and values are computed from it once;
- each decoder layer keeps a cache of its self-attention keys and values,
  a buffer that every step writes its position into, so a step computes
  only the newest position (`use_cache=True`): of fixed size under XLA, and
  grown a few positions at a time in the plain graph loop;
- beam search keeps one copy of the source per sentence: a sentence's beams
  are extra queries of its cross-attention, not extra copies of its source;
  the caches' beam bookkeeping (repeating, reordering) is all in this module;
- the loop is a `tf.while_loop` over a fixed-shape token buffer
  `(B, max_length + 1)` written by one-hot selects: no Python loop per token,
  no retracing per length, every shape static when the lengths are (what XLA
  compiles), and it saves into a SavedModel and converts to TFLite and ONNX.

Greedy search, beam search and prompt continuation share one step function,
cached or not.
"""

import math
import numbers

import tensorflow as tf

from kformer.data.text import END_ID, PAD_ID, START_ID
from kformer.layers import make_padding_mask

_NEG_INF = -1e9
GROW = 8  # positions a cache of dynamic length grows by (see `_step_function`)


def _write_column(tokens, column, values):
    """tokens[:, column] = values, as a one-hot select (converts to every runtime)."""
    at_column = tf.equal(tf.range(tf.shape(tokens)[1]), column)  # (L,)
    return tf.where(tf.expand_dims(at_column, 0), tf.expand_dims(values, 1), tokens)


def _step_function(decoder, context, source_padding_mask, beam_size, use_cache, rows, length):
    """(step, initial_state): step(tokens, t, state) -> (logits of token t + 1 (rows, V), state).

    `context` and `source_padding_mask` have one row per sentence; the step
    takes `rows` rows of tokens, `beam_size` per sentence (sentence-major).
    A decoder-only model has no context: pass None for both. `length` is at
    least the steps to run: a length known when tracing (a Python int, XLA)
    gives caches of that many positions; one known only at run time (the
    graph loop) gives caches that start `GROW` positions long and grow by
    `GROW` when full, since TensorFlow's graph executor copies a cache at
    every write and beam search gathers it whole at every step: they cost
    about what was decoded, not what might be.
    """
    if use_cache:
        context_cache = None if context is None else decoder.context_cache(context)
        growing = tf.get_static_value(length) is None

        def cached_step(tokens, t, cache):
            if growing:
                full = tf.shape(cache[0][0])[2] <= t
                more = [[0, 0], [0, 0], [0, tf.where(full, GROW, 0)], [0, 0]]
                cache = tf.nest.map_structure(lambda x: tf.pad(x, more), cache)  # a padding of 0 copies nothing
            token = tf.gather(tokens, tf.reshape(t, [1]), axis=1)  # (rows, 1): the token at position t
            return decoder.decode_step(token, t, cache, context_cache, source_padding_mask)

        return cached_step, decoder.empty_cache(rows, tf.minimum(length, GROW) if growing else length)

    if beam_size > 1:
        context, source_padding_mask = (tf.repeat(x, beam_size, axis=0) for x in (context, source_padding_mask))

    def uncached_step(tokens, t, state):
        logits = decoder(tokens[:, : t + 1], context=context, context_padding_mask=source_padding_mask, training=False)
        return logits[:, -1], state  # re-ran every position of the prefix

    return uncached_step, ()


def _gather_rows(structure, rows):
    """Every tensor of `structure` with its rows picked by `rows` (beams taking their parents' state)."""
    return tf.nest.map_structure(lambda x: tf.gather(x, rows), structure)


def _token_buffer(rows, max_length, buffer_length):
    """int32 `(rows, 1 + width)`: [START], then [PAD] for the tokens to come (width: buffer_length if given)."""
    width = max_length if buffer_length is None else buffer_length
    return tf.concat([tf.fill([rows, 1], START_ID), tf.fill([rows, width], PAD_ID)], axis=1)


def _top_logits(logits, k):
    """`tf.math.top_k(logits, k)` in fewer passes over a large vocabulary, and each row's maximum.

    The k largest logits of a row lie in the k blocks (of about sqrt(V) ids)
    with the largest maxima, so one max-reduction and two small top-k's
    replace a top-k over every id. Ties may come out in another order.

    Returns:
        `(values (R, k), ids (R, k), row maxima (R,))`.
    """
    rows, vocab = tf.shape(logits)[0], logits.shape[-1]
    block = math.ceil(math.sqrt(vocab))
    blocks = math.ceil(vocab / block)
    if blocks < k:
        values, ids = tf.math.top_k(logits, k)
        return values, ids, tf.reduce_max(logits, axis=1)
    if blocks * block > vocab:  # pad the last block with logits that never win
        logits = tf.pad(logits, [[0, 0], [0, blocks * block - vocab]], constant_values=_NEG_INF)
    blocked = tf.reshape(logits, [rows, blocks, block])
    block_max = tf.reduce_max(blocked, axis=2)  # (R, blocks)
    _, best_blocks = tf.math.top_k(block_max, k)  # (R, k)
    candidates = tf.reshape(tf.gather(blocked, best_blocks, batch_dims=1), [rows, k * block])
    values, within = tf.math.top_k(candidates, k)  # (R, k): indices into the candidates
    ids = tf.gather(best_blocks, within // block, batch_dims=1) * block + within % block
    return values, ids, tf.reduce_max(block_max, axis=1)


def _never_chosen(logits):
    """`logits` (R, V) with [PAD] and [START] at -1e9: a search never writes them (they are no output tokens);
    the log-probabilities stay the model's, normalised over every id as a teacher-forced pass does."""
    reserved = tf.equal(tf.range(logits.shape[-1]), PAD_ID) | tf.equal(tf.range(logits.shape[-1]), START_ID)
    return tf.where(reserved, _NEG_INF, logits)


def _forced(prefix_tokens, t):
    """(whether row r's token t + 1 is its prefix's (R,), that token (R,)); prefix_tokens `(R, P)`, 0-padded."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(prefix_tokens, PAD_ID), tf.int32), axis=1)
    column = tf.minimum(t, tf.shape(prefix_tokens)[1] - 1)
    return t < lengths, tf.gather(prefix_tokens, tf.reshape(column, [1]), axis=1)[:, 0]


def without_repeats(logits, tokens, t, n):
    """`logits` (R, V) of token t + 1, less -1e9 at each token that would end an n-gram its row already holds.

    `tokens`: the `(R, 1 + L)` buffer, [START] at 0 and the row's tokens at 1..t. The n-grams
    looked at lie within 1..t; the one that would end at t + 1 starts with the row's last n - 1
    tokens (fairseq's and OpenNMT's `no_repeat_ngram_size`).
    """
    rows, vocab = tf.shape(logits)[0], logits.shape[-1]
    windows = tf.signal.frame(tokens, n, 1, axis=1)  # (R, W, n): window k holds positions k .. k + n - 1
    starts = tf.range(tf.shape(windows)[1])
    last = tf.gather(tokens, tf.maximum(t - n + 2 + tf.range(n - 1), 0), axis=1)  # (R, n - 1): positions t-n+2..t
    seen = (starts >= 1) & (starts + n - 1 <= t) & (t >= n - 1)  # (W,): windows already written, [START] left out
    match = tf.reduce_all(tf.equal(windows[:, :, :-1], last[:, None, :]), axis=2) & seen  # (R, W)
    banned = windows[:, :, -1] + vocab * tf.range(rows)[:, None]  # (R, W): its last token, as a row-major index
    counts = tf.math.unsorted_segment_sum(tf.cast(match, tf.float32), banned, rows * vocab)  # (R * V,)
    return tf.where(tf.reshape(counts, [rows, vocab]) > 0, _NEG_INF, logits)


def greedy_search(
    step,
    state,
    start_done,
    max_length,
    buffer_length=None,
    with_log_probs=True,
    choose=None,
    prefix_tokens=None,
    no_repeat_ngram=0,
):
    """Picks the most likely token at every step (or the one `choose` draws) until each row has produced [END].

    Args:
        buffer_length: None, or a Python int >= max_length: the width of the
            token buffer and of the result, so that every shape is static (XLA).
        with_log_probs: sum each row's log-probabilities; False leaves them 0
            and skips a softmax normaliser a step (6% of a batch-64 step on
            spa-eng's model size, bench/RESULTS.md), when only tokens are wanted.
        choose: from `sampler`, to draw each token instead (None: the most likely).
        prefix_tokens: None, or int32 `(B, P)`, 0-padded: each row's output starts
            with its prefix, read through the same cached step, then goes on.
        no_repeat_ngram: above 0, no n-gram of this many tokens appears twice in a
            row (`without_repeats`); the log-probabilities are the model's own.

    Returns:
        `(tokens, log_probs)`: int32 `(B, max_length)` (or `(B, buffer_length)`),
        the generated ids, [END] then [PAD] after each; float32 `(B,)`, the sum
        of each row's log-probabilities of its tokens, [END] included.
    """
    batch = tf.shape(start_done)[0]
    tokens = _token_buffer(batch, max_length, buffer_length)

    def body(t, tokens, done, log_probs, state):
        logits, state = step(tokens, t, state)
        logits = tf.cast(logits, tf.float32)  # (B, V)
        allowed = _never_chosen(logits)
        allowed = without_repeats(allowed, tokens, t, no_repeat_ngram) if no_repeat_ngram else allowed
        chosen_token = tf.argmax(allowed, axis=-1, output_type=tf.int32) if choose is None else choose(allowed, t)
        if prefix_tokens is not None:
            forced, forced_token = _forced(prefix_tokens, t)
            chosen_token = tf.where(forced, forced_token, chosen_token)
        next_token = tf.where(done, PAD_ID, chosen_token)  # (B,)
        if with_log_probs:
            chosen = tf.gather(logits, next_token, batch_dims=1) - tf.reduce_logsumexp(logits, axis=-1)  # (B,)
            log_probs += tf.where(done, 0.0, chosen)
        done |= tf.equal(next_token, END_ID)
        return t + 1, _write_column(tokens, t + 1, next_token), done, log_probs, state

    _, tokens, _, log_probs, _ = tf.while_loop(
        lambda t, tokens, done, log_probs, state: (t < max_length) & ~tf.reduce_all(done),
        body,
        (tf.constant(0), tokens, start_done, tf.zeros([batch]), state),
    )
    return tokens[:, 1:], log_probs


def sampler(temperature=0.0, top_k=0, top_p=1.0, seed=0):
    """choose(logits (B, V), t) -> the next token of each row (B,), int32.

    Temperature 0 picks the most likely token (greedy). Otherwise the logits
    are divided by the temperature, cut to the `top_k` most likely tokens (0:
    all) and to the smallest set whose probability reaches `top_p` (1.0: all),
    and a token is drawn. Draws are stateless, seeded by (seed, t): the same
    seed gives the same sample. A `top_k` above the vocabulary keeps it all.

    Raises:
        ValueError: a setting out of range, named with the value given.
    """
    if not (isinstance(temperature, numbers.Real) and 0 <= temperature < math.inf):  # NaN fails too
        raise ValueError(
            f"temperature must be 0 (greedy) or a finite number above it, got temperature={temperature!r}."
        )
    if not isinstance(top_k, numbers.Integral) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError(f"top_k must be a non-negative integer (0: no limit), got top_k={top_k!r}.")
    if not (isinstance(top_p, numbers.Real) and 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1], got top_p={top_p!r}.")
    if temperature <= 0:
        return lambda logits, t: tf.argmax(logits, axis=-1, output_type=tf.int32)

    def choose(logits, t):
        logits = tf.cast(logits, tf.float32) / temperature  # (B, V)
        if top_k:
            kth = tf.math.top_k(logits, min(top_k, logits.shape[-1])).values[:, -1:]  # (B, 1): the k-th largest
            logits = tf.where(logits < kth, _NEG_INF, logits)
        if top_p < 1.0:
            ordered = tf.sort(logits, axis=-1, direction="DESCENDING")  # (B, V)
            mass_before = tf.cumsum(tf.nn.softmax(ordered), axis=-1, exclusive=True)  # of the tokens ranked higher
            kept = tf.where(mass_before < top_p, ordered, tf.float32.max)  # the nucleus, by rank
            logits = tf.where(logits < tf.reduce_min(kept, axis=-1, keepdims=True), _NEG_INF, logits)
        draw_seed = tf.stack([tf.constant(seed, tf.int32), tf.cast(t, tf.int32)])
        return tf.cast(tf.random.stateless_categorical(logits, 1, seed=draw_seed)[:, 0], tf.int32)

    return choose


def continue_prompts(decoder, prompt_tokens, max_new_tokens, choose, stop_id=END_ID, use_cache=True):
    """Reads each row's prompt, then writes up to `max_new_tokens` tokens chosen by `choose`.

    The prompt is fed through the decoder-only model's step one position at
    a time (filling the cache), so rows with prompts of different lengths
    (right-padded with [PAD]) share one loop; each row starts generating
    right after its own prompt and stops after `stop_id`.

    Args:
        decoder: the "decoder" layer of a `build_decoder_only` model.
        prompt_tokens: int32 `(B, P)`, right-padded with 0.
        choose: from `sampler`.
        use_cache: as in `decode`.

    Returns:
        int32 `(B, max_new_tokens)`: each row's continuation, then [PAD].
    """
    batch, prompt_width = tf.shape(prompt_tokens)[0], tf.shape(prompt_tokens)[1]
    step, state = _step_function(decoder, None, None, 1, use_cache, batch, prompt_width + max_new_tokens)
    prompt_lengths = tf.reduce_sum(tf.cast(tf.not_equal(prompt_tokens, PAD_ID), tf.int32), axis=1)  # (B,)
    tokens = tf.concat(
        [tf.fill([batch, 1], START_ID), prompt_tokens, tf.fill([batch, max_new_tokens], PAD_ID)], axis=1
    )  # (B, 1 + P + N): [START], the prompt, room for the continuation

    def body(t, tokens, done, state):
        logits, state = step(tokens, t, state)  # the next position, t + 1
        in_prompt = t + 1 <= prompt_lengths  # (B,): position t + 1 holds a prompt token
        prompt_token = tf.gather(tokens, tf.reshape(t + 1, [1]), axis=1)[:, 0]
        next_token = tf.where(in_prompt, prompt_token, tf.where(done, PAD_ID, choose(_never_chosen(logits), t)))
        written = t + 1 - prompt_lengths  # tokens generated so far, with this one
        done |= ~in_prompt & (tf.equal(next_token, stop_id) | (written >= max_new_tokens))
        return t + 1, _write_column(tokens, t + 1, next_token), done, state

    _, tokens, _, _ = tf.while_loop(
        lambda t, tokens, done, state: (t < prompt_width + max_new_tokens) & ~tf.reduce_all(done),
        body,
        (tf.constant(0), tokens, tf.zeros([batch], tf.bool), state),
    )
    positions = tf.expand_dims(prompt_lengths + 1, 1) + tf.range(max_new_tokens)  # (B, N)
    return tf.gather(tokens, positions, batch_dims=1)


def beam_search(
    step,
    state,
    start_done,
    max_length,
    beam_size,
    length_penalty,
    buffer_length=None,
    prefix_tokens=None,
    no_repeat_ngram=0,
    every_hypothesis=True,
):
    """Keeps the `beam_size` most likely unfinished prefixes per sentence and its best finished ones apart.

    Rows of `state`, `start_done` and `prefix_tokens` (as in `greedy_search`)
    are already repeated `beam_size` times (sentence-major). Each step ranks
    the live beams' continuations by log-probability, as Flax's WMT decoder and
    fairseq do: those ending in [END] go to the sentence's finished hypotheses,
    which are ranked by `length_normalized(log p, length, length_penalty)`
    (GNMT's length penalty; 0 compares raw log-probabilities), and the best
    `beam_size` others stay live, so a finished hypothesis is never pushed out
    by a longer, live one. A sentence is done when its best finished
    hypothesis (with `every_hypothesis`, its `beam_size`-th) scores at least
    what any live one could reach: log p only falls as a beam grows, so a live
    beam scores at most its log p over the penalty of `max_length` tokens. A
    beam inside its prefix continues only with the prefix's next token; with
    `no_repeat_ngram`, a beam cannot continue into an n-gram it holds.

    Returns:
        `(tokens, log_probs)`: int32 `(B, beam_size, max_length)` (or `buffer_length`
        wide), each like a row of `greedy_search`'s, best first, where a hypothesis
        cut at `max_length` (no [END]) ranks as `max_length` tokens long, as in
        fairseq; float32 `(B, beam_size)`, the sum of each one's log-probabilities. Without
        `every_hypothesis`, only the first is sure to be the best; the search may
        stop sooner. A sentence's hypotheses are distinct, except for an empty
        source's: it ends at once, and its others are [PAD] only, scoring -1e9.
    """
    rows = tf.shape(start_done)[0]
    batch = rows // beam_size
    tokens = _token_buffer(rows, max_length, buffer_length)
    width = tokens.shape[1] or tf.shape(tokens)[1]  # static where it is known (XLA)
    fanout = 2 * beam_size  # at most beam_size candidates end ([END] once a beam), so beam_size others remain
    first_only = tf.concat([[0.0], tf.fill([beam_size - 1], _NEG_INF)], axis=0)  # (beam,)
    # Only the first beam of each sentence is alive at the start, so the first step does not pick
    # the same token beam_size times. An empty source is finished at once: [PAD] only, scoring 0.
    empty = tf.reshape(start_done, [batch, beam_size])[:, 0]  # (B,)
    scores = tf.where(tf.repeat(empty, beam_size), _NEG_INF, tf.tile(first_only, [batch]))  # (B * beam,)
    finished_slots = tf.expand_dims(empty, 1) & tf.equal(tf.range(beam_size), 0)  # (B, beam)
    finished = (
        tf.reshape(tokens, [batch, beam_size, -1]) * 0,  # tokens: [PAD] only (an empty source's first)
        tf.where(finished_slots, 0.0, _NEG_INF),  # ranking scores, best first; -1e9: no hypothesis yet
        tf.where(finished_slots, 0.0, _NEG_INF),  # log-probabilities (-1e9: none, as a dead beam)
        finished_slots,
    )
    worst_kept = beam_size - 1 if every_hypothesis else 0

    def searching(t, tokens, scores, finished, state):
        live_best = tf.reduce_max(tf.reshape(scores, [batch, beam_size]), axis=1)  # (B,)
        reachable = length_normalized(live_best, max_length, length_penalty)  # log p falls as a beam grows
        beaten = finished[3][:, worst_kept] & (finished[1][:, worst_kept] >= reachable)
        return (t < max_length) & ~tf.reduce_all(beaten | (live_best <= _NEG_INF / 2))  # or none alive

    def body(t, tokens, scores, finished, state):
        logits, state = step(tokens, t, state)
        logits = tf.cast(logits, tf.float32)  # (B * beam, V)
        per_beam = min(fanout, logits.shape[-1])
        # A sentence's best 2 * beam_size continuations are among the best 2 * beam_size tokens
        # of each of its beams: rank beam_size * 2 * beam_size candidates, not beam_size * V,
        # and normalise only those.
        allowed = _never_chosen(logits)
        if no_repeat_ngram:  # banned tokens rank last; the log-probabilities stay the model's, not renormalised
            top_logits, top_tokens, _ = _top_logits(without_repeats(allowed, tokens, t, no_repeat_ngram), per_beam)
            log_normaliser = tf.reduce_logsumexp(logits, axis=1)
        else:
            top_logits, top_tokens, row_max = _top_logits(allowed, per_beam)  # (B * beam, per_beam) x 2, (B * beam,)
            row_max = tf.maximum(row_max, tf.reduce_max(logits[:, : START_ID + 1], axis=1))  # of every id
            log_normaliser = row_max + tf.math.log(tf.reduce_sum(tf.exp(logits - row_max[:, None]), axis=1))
        log_probs = top_logits - tf.expand_dims(log_normaliser, 1)
        if prefix_tokens is not None:  # a beam inside its prefix has one continuation, the prefix's next token
            forced, forced_token = _forced(prefix_tokens, t)
            forced_log_prob = tf.gather(logits, forced_token, batch_dims=1) - log_normaliser  # (B * beam,)
            only = tf.concat([[0.0], tf.fill([per_beam - 1], _NEG_INF)], axis=0)
            forced_rows = tf.expand_dims(forced, 1)
            log_probs = tf.where(forced_rows, tf.expand_dims(forced_log_prob, 1) + only, log_probs)
            top_tokens = tf.where(forced_rows, tf.expand_dims(forced_token, 1), top_tokens)
        candidates = tf.reshape(tf.expand_dims(scores, 1) + log_probs, [batch, beam_size * per_beam])
        top_scores, top = tf.math.top_k(candidates, k=fanout)  # (B, 2 * beam): indices into the candidates
        parent = top // per_beam + tf.expand_dims(tf.range(batch) * beam_size, 1)  # (B, 2 * beam)
        next_token = tf.gather(tf.reshape(top_tokens, [batch, -1]), top, batch_dims=1)  # (B, 2 * beam)
        grown = _write_column(tf.gather(tokens, tf.reshape(parent, [-1])), t + 1, tf.reshape(next_token, [-1]))
        grown = tf.reshape(grown, [batch, fanout, width])
        ended = tf.equal(next_token, END_ID) & (top_scores > _NEG_INF / 2)  # a dead beam's [END] is not a hypothesis
        # The finished hypotheses: the best beam_size of those kept and those ending now (kept ones first at a tie).
        ranking = tf.where(ended, length_normalized(top_scores, t + 1, length_penalty), _NEG_INF)
        pooled = [tf.concat(pair, axis=1) for pair in zip(finished, (grown, ranking, top_scores, ended), strict=True)]
        _, best = tf.math.top_k(pooled[1], k=beam_size)  # (B, beam)
        finished = tuple(tf.gather(x, best, batch_dims=1) for x in pooled)
        # The live beams: the best beam_size that did not end.
        live_scores, live = tf.math.top_k(tf.where(ended, 2 * _NEG_INF, top_scores), k=beam_size)  # (B, beam)
        tokens = tf.reshape(tf.gather(grown, live, batch_dims=1), [rows, width])
        state = _gather_rows(state, tf.reshape(tf.gather(parent, live, batch_dims=1), [-1]))
        return t + 1, tokens, tf.reshape(live_scores, [-1]), finished, state

    t, tokens, scores, finished, _ = tf.while_loop(searching, body, (tf.constant(0), tokens, scores, finished, state))
    # The live ones compete too, as t tokens long: they did not finish within max_length (or cannot win).
    live_ranking = length_normalized(tf.reshape(scores, [batch, beam_size]), t, length_penalty)
    _, best = tf.math.top_k(tf.concat([finished[1], live_ranking], axis=1), k=beam_size)  # (B, beam)
    live = (tf.reshape(tokens, [batch, beam_size, -1]), tf.reshape(scores, [batch, beam_size]))
    hypotheses = tf.gather(tf.concat([finished[0], live[0]], axis=1), best, batch_dims=1)
    log_probs = tf.gather(tf.concat([finished[2], live[1]], axis=1), best, batch_dims=1)
    never_lived = log_probs <= _NEG_INF / 2  # an empty source's others
    hypotheses = tf.where(never_lived[:, :, None], PAD_ID, hypotheses)
    return hypotheses[:, :, 1:], tf.where(never_lived, _NEG_INF, log_probs)


def length_normalized(log_probs, lengths, length_penalty):
    """GNMT's ranking score: log p / ((5 + length) / 6)^length_penalty, the length counting [END]."""
    return log_probs / tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0, length_penalty)


def ranking_scores(tokens, log_probs, length_penalty):
    """`search`'s hypotheses `(..., T)` and their log-probabilities `(...)` -> what beam search ranks them by:
    `length_normalized`, each one's length its tokens that are not [PAD] ([END] included)."""
    return length_normalized(log_probs, tf.math.count_nonzero(tokens, axis=-1), length_penalty)  # [PAD] is id 0


def search(
    model,
    encoder_tokens,
    max_length,
    beam_size=1,
    length_penalty=0.6,
    use_cache=True,
    buffer_length=None,
    with_log_probs=True,
    choose=None,
    prefix_tokens=None,
    no_repeat_ngram=0,
):
    """Translates token ids: one encoder pass, then greedy or beam search; every hypothesis and its log-probability.

    Args:
        model: a model from `build_transformer` (layers "encoder", "decoder").
        encoder_tokens: int32 `(B, S)`, 0 = padding. A row of only padding
            (an empty sentence) gives an empty output.
        max_length: the most tokens to generate, [END] included.
        beam_size: 1 for greedy search.
        length_penalty: GNMT's alpha, for beam search.
        use_cache: keep self-attention keys/values instead of re-running the
            decoder over the whole prefix at every step.
        buffer_length: None, or a Python int >= max_length: token buffers
            and caches of that many positions, so that every shape is static
            and the whole loop compiles with XLA (see `Translator(xla=True)`);
            None sizes them to `max_length`, which may be a tensor.
        with_log_probs: False when only the best hypothesis's tokens are wanted:
            greedy search gives log-probabilities of 0, a little faster
            (`greedy_search`); beam search may stop as soon as its best is
            settled (`beam_search`'s `every_hypothesis`).
        choose: greedy search only: draw each token with this `sampler` instead.
        prefix_tokens: None, or int32 `(B, P)`, 0-padded, no [END]: each
            hypothesis starts with its sentence's prefix (its tokens count in
            its log-probability and length), then goes on.
        no_repeat_ngram: above 0, no hypothesis holds an n-gram of this many
            tokens twice (`without_repeats`).

    Returns:
        `(tokens, log_probs)`: int32 `(B, N, max_length)` (`buffer_length` wide
        with one), N = beam_size hypotheses a sentence, best first, each [END]
        then [PAD]; float32 `(B, N)`, each one's log-probability.
    """
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    encoder_tokens = tf.convert_to_tensor(encoder_tokens, tf.int32)
    source_padding_mask = make_padding_mask(encoder_tokens)  # (B, S)
    empty = ~tf.reduce_any(source_padding_mask, axis=1)  # (B,)
    context = encoder(encoder_tokens, training=False)  # (B, S, D)
    rows, length = tf.shape(encoder_tokens)[0] * beam_size, max_length if buffer_length is None else buffer_length
    step, state = _step_function(decoder, context, source_padding_mask, beam_size, use_cache, rows, length)
    if prefix_tokens is not None:
        prefix_tokens = tf.convert_to_tensor(prefix_tokens, tf.int32)
    if beam_size > 1:
        done = tf.repeat(empty, beam_size)
        prefix_rows = None if prefix_tokens is None else tf.repeat(prefix_tokens, beam_size, axis=0)
        settings = (beam_size, length_penalty, buffer_length, prefix_rows, no_repeat_ngram)
        return beam_search(step, state, done, max_length, *settings, every_hypothesis=with_log_probs)
    settings = (buffer_length, with_log_probs, choose, prefix_tokens, no_repeat_ngram)
    tokens, log_probs = greedy_search(step, state, empty, max_length, *settings)
    return tokens[:, None], log_probs[:, None]


def decode(model, encoder_tokens, max_length, beam_size=1, length_penalty=0.6, use_cache=True, buffer_length=None):
    """The best hypothesis of `search` (same arguments): int32 `(B, max_length)` (or `buffer_length` wide)."""
    best = search(model, encoder_tokens, max_length, beam_size, length_penalty, use_cache, buffer_length, False)
    return best[0][:, 0]
