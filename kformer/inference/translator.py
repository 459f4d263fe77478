"""Translator: text in, text out, in one tf.function.

Tokenization, one encoder pass, the decoding loop and detokenization all run
inside the graph, so the same object serves Python callers, a SavedModel for
TF Serving, and (through `translate_ids`) runtimes without string ops.
"""

import math
import numbers
import types
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from kformer.data.sentences import in_pieces, split_sentences, trailing_spaces
from kformer.data.text import END_ID, PAD_ID, START_ID, utf8_batch
from kformer.inference.decoding import ranking_scores, sampler, search
from kformer.layers.validation import check_positive_int
from kformer.model_dir import TrainedModel, load

EXTRA_OUTPUT_TOKENS = 10  # an output may have max_output_ratio x its source's tokens and this many more
SOURCE_BUCKET = 8  # under XLA, sources are padded to a multiple of this many tokens
XLA_BEAM_BATCH = 64  # beam search runs under XLA up to this many sentences a batch
ALIGNMENT_LAYER = -1  # the decoder block whose cross-attention aligns words (chosen on valid: bench/alignments.py)
_IDS = tf.TensorSpec([None, None], tf.int32)
_TEXTS = tf.TensorSpec([None], tf.string, name="texts")
_FIXED_LOOP = [_IDS, tf.TensorSpec([], tf.int32)]  # the compiled loop's: sources, and the output limit


class OutputLimitWarning(UserWarning):
    """Some translations stopped at the output limit before [END]: they may be cut short.

    `lines` holds their indices in the input (0-based), for a caller to flag or retranslate.
    """

    def __init__(self, lines, translator):
        self.lines = lines
        shown = ", ".join(str(i) for i in lines[:10]) + (" ..." if len(lines) > 10 else "")
        super().__init__(
            f"{len(lines)} translation(s) stopped at the output limit before their end and may be cut short "
            f"(input {shown}): raise max_output_ratio (now {translator.max_output_ratio:g}) or max_length "
            f"(now {translator.max_length})."
        )


class SentenceTooLong(ValueError):
    """A sentence over `max_length` tokens given where it is read whole (n-best lists, scores, prefixes)."""

    def __init__(self, index, tokens, max_length):
        super().__init__(
            f"sentence {index + 1} has {tokens} tokens, more than max_length ({max_length}); n_best, with_scores, "
            "prefix and with_alignments read each sentence whole: split it, or translate it without them (then it is "
            "read in pieces)."
        )
        self.index = index


class PairScore(NamedTuple):
    """How likely the model finds a target given its source (`Translator.score`).

    `log_prob`: the natural-log probability of the target's tokens and [END], the sum of
    `token_log_probs` (one for each of the `tokens`, [END] last).
    """

    log_prob: float
    tokens: int
    token_log_probs: list


def padded_tokens(token_ids):
    """Ragged ids `(B, None)` -> int32 `(B, S)` padded with 0, at least one column wide.

    The extra column lets a batch of empty strings still decode (to empty output).
    """
    encoder_tokens = token_ids.to_tensor(default_value=0)  # (B, S)
    return tf.pad(encoder_tokens, [[0, 0], [0, tf.maximum(1 - tf.shape(encoder_tokens)[1], 0)]])


class Translator(tf.Module):
    """Translates batches of sentences with a trained model.

    Args:
        model: a model directory path or a loaded `TrainedModel`.
        beam_size: 1 for greedy search, more for beam search.
        length_penalty: GNMT's alpha, 0 or more (0.6 as in GNMT): beam search
            ranks hypotheses by log p / ((5 + n) / 6)^alpha, n their tokens with
            [END]; the scores `translate` gives are this too.
        use_cache: decode with the key/value cache (the fast path); False
            re-runs the decoder over the whole prefix at every step.
        max_length: the most source tokens translated at once, by default the
            model's training max_length: a longer sentence is translated in
            pieces of about this many tokens or fewer, cut where words start,
            and their translations are joined by spaces (`in_pieces`; on long
            sentences this scored twice the chrF of a longer buffer,
            bench/RESULTS.md). Nothing is cut.
        max_output_ratio: a batch's outputs have at most max(max_length,
            ceil(max_output_ratio x S) + 10) tokens with [END], S its longest
            source's tokens up to max_length; an output stopped there without
            [END] is reported (`translate` warns with `OutputLimitWarning`).
        xla: compile the whole decoding loop with XLA (`jit_compile`), over
            fixed-size buffers (`max_length` positions, or the longest output's
            for sources over (max_length - 10) / max_output_ratio tokens) and
            sources padded to a multiple of 8 tokens, so it compiles once per
            batch size, source bucket and buffer (1-2 s each, about what tracing
            the plain loop costs). About 3-4x faster a sentence at batch 1, the
            same tokens. Beam search uses it up to 64 sentences a batch.
            False runs the plain graph loop (buffers sized to the batch's output
            limit), which TFLite and ONNX convert.
        no_repeat_ngram: above 0, no translation holds an n-gram of this many
            tokens twice (greedy and beam; 0: no such rule). Scores stay the
            model's log-probabilities.
        temperature, top_k, top_p, seed: above temperature 0, draw each token
            instead of taking the most likely (for back-translation), with
            `kformer.Generator`'s sampler (`decoding.sampler`): the same seed
            gives the same translations in the same loop (XLA's random numbers
            are not the plain loop's). Greedy search only (`beam_size=1`).

    Example:
    >>> translator = Translator("kformer-demo", beam_size=4)
    >>> translator(tf.constant(["the black cat sleeps"])).numpy()[0].decode()
    'el gato negro duerme'
    """

    ids_name = "translate_ids"  # the method taking token ids, for the export writers
    text_output = "translations"  # what its texts come out as

    def __init__(
        self,
        model,
        beam_size=1,
        length_penalty=0.6,
        use_cache=True,
        max_length=None,
        max_output_ratio=2.0,
        xla=True,
        no_repeat_ngram=0,
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        seed=0,
    ):
        super().__init__(name="translator")
        trained = load(model) if isinstance(model, (str, Path)) else model
        if not isinstance(trained, TrainedModel):
            raise TypeError(f"Translator needs a model directory or a TrainedModel, got {type(trained).__name__}.")
        if trained.source_tokenizer is None:  # a language model's
            raise ValueError("Translator needs a translator; this model has no source side (use kformer.Generator).")
        check_positive_int("beam_size", beam_size)
        vocab_size = trained.target_tokenizer.vocab_size
        if beam_size > vocab_size:
            raise ValueError(
                f"beam_size must be at most the target vocabulary's {vocab_size:,} tokens, got beam_size={beam_size}."
            )
        if max_length is not None:  # None: the model's
            check_positive_int("max_length", max_length)
        if not (isinstance(max_output_ratio, numbers.Real) and 0 < max_output_ratio < math.inf):
            raise ValueError(f"max_output_ratio must be a number above 0, got max_output_ratio={max_output_ratio!r}.")
        if not (isinstance(length_penalty, numbers.Real) and math.isfinite(length_penalty)):
            raise ValueError(f"length_penalty must be a finite number, got length_penalty={length_penalty!r}.")
        if length_penalty < 0:
            raise ValueError(f"length_penalty must be 0 or more (0: none), got length_penalty={length_penalty!r}.")
        if (
            not isinstance(no_repeat_ngram, numbers.Integral)
            or isinstance(no_repeat_ngram, bool)
            or no_repeat_ngram < 0
        ):
            raise ValueError(
                f"no_repeat_ngram must be a whole number, 0 or more, got no_repeat_ngram={no_repeat_ngram!r}."
            )
        choose = sampler(temperature, top_k, top_p, seed)  # checks the settings
        if temperature > 0 and beam_size > 1:
            raise ValueError(f"sampling (temperature={temperature}) draws one translation: use beam_size=1.")
        self.model = trained.model
        self.source_tokenizer = trained.source_tokenizer
        self.target_tokenizer = trained.target_tokenizer
        self.beam_size = beam_size
        self.length_penalty = float(length_penalty)
        self.use_cache = use_cache
        self.max_length = int(trained.max_length if max_length is None else max_length)
        self.max_output_ratio = float(max_output_ratio)
        self.no_repeat_ngram = int(no_repeat_ngram)
        self.longest_output = int(self.output_limit(self.max_length))
        self.xla = bool(xla and use_cache)
        self._choose = choose if temperature > 0 else None  # greedy keeps its own argmax
        self._word_starts = tf.constant([not token.startswith("##") for token in self.source_tokenizer.vocabulary])
        if self.xla:  # only then: tf.saved_model.save traces and keeps every tf.function a module holds
            self._decode_compiled = self._fixed_loop(self.max_length)
            if self.longest_output > self.max_length:
                self._decode_compiled_long = self._fixed_loop(self.longest_output)
        # The functions of scores and n-best lists, made on first use (`_on_demand`).
        self._made = types.SimpleNamespace()

    def output_limit(self, source_tokens):
        """The most tokens, [END] included, of the outputs of a batch whose longest source has `source_tokens`."""
        longest = tf.minimum(source_tokens, self.max_length)
        grown = tf.math.ceil(self.max_output_ratio * tf.cast(longest, tf.float32))
        return tf.maximum(self.max_length, tf.cast(grown, tf.int32) + EXTRA_OUTPUT_TOKENS)

    @tf.function(input_signature=[_TEXTS])
    def __call__(self, texts):
        """tf.string `(B,)` -> translations tf.string `(B,)`; empty input gives empty output.

        A line of several sentences is split (`split_sentences`), a sentence over
        `max_length` tokens into pieces (`in_pieces`), all of them translated in
        one batch with every other line's; a sentence's pieces are joined by
        spaces, a line's sentences by the spaces that separated them.
        """
        return self._translate_lines(texts)[0]

    def _translate_lines(self, texts):
        """tf.string `(B,)` -> (translations `(B,)`, bool `(B,)`: whether a line's output stopped at the limit)."""
        sentences = split_sentences(texts)  # (B, None)
        output, stopped = self.translate_tokens(self.source_tokenizer.tokenize(sentences.flat_values))
        texts = self.target_tokenizer.detokenize(output) + trailing_spaces(sentences.flat_values)
        joined = sentences.with_flat_values(texts)
        translations = tf.strings.regex_replace(tf.strings.reduce_join(joined, axis=1), "[ \t]+$", "")  # not the last's
        return translations, tf.reduce_any(sentences.with_flat_values(stopped), axis=1)

    def translate_tokens(self, token_ids):
        """Ragged int32 `(N, None)`, a sentence's ids a row -> (its translation's ids, int32 `(N, T)` with
        [END] and [PAD] among them; bool `(N,)`, whether it stopped at the output limit before [END]).

        A sentence over `max_length` tokens is translated in pieces (`in_pieces`), in one batch with the rest, and
        its pieces' outputs are put end to end (detokenizing drops the reserved ids between them).
        """

        def whole():  # no sentence over the limit: the batch as it is (the pieces' ops cost 10% at batch 1)
            output = self.translate_ids(padded_tokens(token_ids))
            return output, self._stopped(output, token_ids.row_lengths())

        def by_pieces():
            pieces = in_pieces(token_ids, self.max_length, self._word_starts)  # (N, None, None)
            output = self.translate_ids(padded_tokens(pieces.values))  # (P, T)
            stopped = self._stopped(output, pieces.values.row_lengths())  # (P,)
            by_sentence = tf.RaggedTensor.from_row_lengths(output, pieces.row_lengths(), validate=False)
            return by_sentence.merge_dims(1, 2).to_tensor(PAD_ID), tf.reduce_any(pieces.with_values(stopped), 1)

        return tf.cond(tf.reduce_any(token_ids.row_lengths() > self.max_length), by_pieces, whole)

    @staticmethod
    def _stopped(output, source_lengths):
        """bool `(B,)`: a row of `output` without [END] whose source was not empty (an empty one ends at once)."""
        return ~tf.reduce_any(tf.equal(output, END_ID), axis=1) & (source_lengths > 0)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="encoder_tokens")])
    def translate_ids(self, encoder_tokens):
        """int32 `(B, S)`, 0 = padding -> int32 `(B, T)`, each row [END] then [PAD]."""
        return self._search(encoder_tokens, with_log_probs=False)[0][:, 0]

    def best_ids(self, encoder_tokens):
        """int32 `(B, S)` -> `translate_ids`'s tokens `(B, T)` and their log-probabilities `(B,)`: what the
        exports' `translate_ids` serve. Greedy search sums them (a softmax normaliser a step, bench/RESULTS.md);
        beam search ranks by them anyway and stops as soon as its best is settled, as `translate_ids` does."""
        tokens, log_probs = self._search(encoder_tokens, with_log_probs=self.beam_size == 1)
        return tokens[:, 0], log_probs[:, 0]

    def search_ids(self, encoder_tokens, prefix_tokens=None):
        """int32 `(B, S)` -> every hypothesis, best first: tokens int32 `(B, N, T)` and log-probabilities `(B, N)`.

        N is `beam_size` (1 when greedy); the first hypothesis is `translate_ids`'s. With
        `prefix_tokens` (int32 `(B, P)`, 0-padded), each hypothesis starts with its row's.
        """
        if prefix_tokens is None:
            search = self._on_demand("search_ids", lambda: tf.function(lambda x: self._search(x, True), [_IDS]))
            return search(tf.cast(encoder_tokens, tf.int32))
        search = self._on_demand("prefixed", lambda: tf.function(lambda x, y: self._search(x, True, y), [_IDS] * 2))
        return search(tf.cast(encoder_tokens, tf.int32), tf.cast(prefix_tokens, tf.int32))

    def _on_demand(self, name, make):
        """The tf.function `make()` gives, made on first use and kept where tf.saved_model does not look.

        A SavedModel of a Translator traces every tf.function the module holds
        that has an input signature (about 2 s each), so the functions of
        scores and n-best lists, which the exports do not serve, stay out of it.
        """
        if not hasattr(self._made, name):
            setattr(self._made, name, make())
        return getattr(self._made, name)

    def _search(self, encoder_tokens, with_log_probs, prefix_tokens=None):
        width = tf.shape(encoder_tokens)[1]
        if prefix_tokens is not None:
            width = tf.maximum(width, tf.shape(prefix_tokens)[1])
        max_length = self.output_limit(width)
        settings = (self.beam_size, self.length_penalty, self.use_cache)

        def graph_loop():
            return search(
                self.model,
                encoder_tokens,
                max_length,
                *settings,
                with_log_probs=with_log_probs,
                choose=self._choose,
                prefix_tokens=prefix_tokens,
                no_repeat_ngram=self.no_repeat_ngram,
            )

        if not self.xla or prefix_tokens is not None:  # a prefix: the graph loop alone
            return graph_loop()
        # Padding is masked, so a wider source gives the same output; buckets of 8 bound the compilations.
        # A lone sentence goes with an empty one when greedy: XLA's CPU backend compiles one-row products
        # into loops about 4x slower per step than two-row ones (bench/RESULTS.md), and empty rows are
        # finished at once. Its beams are rows enough.
        batch = tf.shape(encoder_tokens)[0]
        rows = 2 if self.beam_size == 1 else 1
        padded = tf.pad(encoder_tokens, [[0, tf.maximum(rows - batch, 0)], [0, -width % SOURCE_BUCKET]])

        def compiled(buffer):
            if with_log_probs:  # greedy's sum costs a softmax normaliser a step, every beam settled more steps: apart
                loop = self._on_demand(f"search_compiled_{buffer}", lambda: self._fixed_loop(buffer, True))
            else:
                loop = self._decode_compiled if buffer == self.max_length else self._decode_compiled_long
            tokens, log_probs = loop(padded, max_length)
            return tokens[:batch, :, :max_length], log_probs[:batch]

        # A buffer of the longest output costs up to 1.5x a step (bench/RESULTS.md): the model's own when it is enough.
        def by_buffer():
            if self.longest_output == self.max_length:
                return compiled(self.max_length)
            short = max_length <= self.max_length
            return tf.cond(short, lambda: compiled(self.max_length), lambda: compiled(self.longest_output))

        if self.beam_size == 1:
            return by_buffer()
        # Both loops rewrite every beam's fixed-size cache at every step; up to 64 sentences a batch (measured)
        # the compiled loop is the faster (bench/RESULTS.md). Beyond, each new batch size would compile again.
        return tf.cond(batch <= XLA_BEAM_BATCH, by_buffer, graph_loop)

    def _fixed_loop(self, buffer, with_log_probs=False):
        """The search over buffers of `buffer` positions (a Python int), compiled with XLA."""
        settings = (self.beam_size, self.length_penalty, True, buffer, with_log_probs, self._choose)

        def decode_fixed(encoder_tokens, max_length):
            return search(self.model, encoder_tokens, max_length, *settings, no_repeat_ngram=self.no_repeat_ngram)

        return tf.function(decode_fixed, input_signature=_FIXED_LOOP, jit_compile=True)

    def score_ids(self, encoder_tokens, target_tokens):
        """Teacher-forced log-probabilities of given targets: int32 `(B, S)` and `(B, T)`, 0 = padding, no [END]
        -> float32 `(B, T + 1)`, each target token's and then [END]'s, 0 after them."""
        score_ids = self._on_demand("score_ids", lambda: tf.function(self._teacher_forced, [_IDS, _IDS]))
        return score_ids(tf.cast(encoder_tokens, tf.int32), tf.cast(target_tokens, tf.int32))

    def _teacher_forced(self, encoder_tokens, target_tokens):
        targets = tf.RaggedTensor.from_tensor(target_tokens, padding=PAD_ID)
        rows = targets.nrows()
        decoder_tokens = tf.concat([tf.fill([rows, 1], START_ID), targets], axis=1).to_tensor(PAD_ID)  # (B, T' + 1)
        labels = tf.concat([targets, tf.fill([rows, 1], END_ID)], axis=1).to_tensor(PAD_ID)  # (B, T' + 1)
        logits = tf.cast(self.model([encoder_tokens, decoder_tokens], training=False), tf.float32)  # (B, T' + 1, V)
        chosen = tf.gather(logits, labels, batch_dims=2) - tf.reduce_logsumexp(logits, axis=-1)
        token_log_probs = tf.where(tf.not_equal(labels, PAD_ID), chosen, 0.0)
        return tf.pad(token_log_probs, [[0, 0], [0, tf.shape(target_tokens)[1] + 1 - tf.shape(labels)[1]]])

    def translate(self, sentences, batch_size=64, n_best=1, with_scores=False, prefix=None, with_alignments=False):
        """Python strings in, Python strings out (one for each), batched by similar length.

        Characters UTF-8 cannot encode (lone surrogates) are read as "?". A line of
        several sentences is translated sentence by sentence (see `__call__`),
        except with `n_best`, `with_scores` or `prefix`, which read it as one.

        Args:
            n_best: the most likely `n_best` translations of each sentence (at most
                `beam_size`), best first: a list of them for each sentence.
            with_scores: each translation as `(translation, score)`, the score what
                beam search ranks by: log p(translation | sentence) / ((5 + n) / 6)^alpha,
                n its tokens with [END] and alpha the `length_penalty` (0: the
                log-probability itself; `score` gives it token by token).
            prefix: a target text for each sentence that its translation must
                start with (autocompletion, a tag); the rest is decoded after it.
            with_alignments: each translation with its word alignment to its
                sentence, read whole (`align`): a `(string, alignment)` pair, or
                `(string, score, alignment)` with `with_scores`.

        Returns:
            A string for each sentence; with `n_best` > 1 a list of them; with
            `with_scores` each one a `(string, score)` pair.
        """
        check_positive_int("batch_size", batch_size)
        check_positive_int("n_best", n_best)
        if n_best > self.beam_size:
            raise ValueError(f"n_best must be at most beam_size ({self.beam_size}), got n_best={n_best}.")
        sentences = utf8_batch(sentences)
        prefix_ids = None if prefix is None else self._prefix_ids(prefix, len(sentences))
        translations, stopped = [None] * len(sentences), []
        for batch in self._batches(sentences, batch_size):
            texts = tf.constant([sentences[i] for i in batch], tf.string)
            if n_best == 1 and not with_scores and prefix is None:  # the text-to-text graph a SavedModel serves
                lines = self._on_demand("lines", lambda: tf.function(self._translate_lines, [_TEXTS]))
                outputs, cut = (x.numpy() for x in lines(texts))
                for index, output in zip(batch, outputs, strict=True):
                    translations[index] = output.decode("utf-8")
                stopped += [index for index, flag in zip(batch, cut, strict=True) if flag]
                continue
            source = padded_tokens(self.source_tokenizer.tokenize(texts))
            source_lengths = tf.math.count_nonzero(source, axis=1)  # [PAD] is id 0
            for index, length in zip(batch, source_lengths.numpy(), strict=True):
                if length > self.max_length:  # read whole, not in pieces: refused, not cut nor run out of memory
                    raise SentenceTooLong(index, int(length), self.max_length)
            prefix_tokens = None if prefix is None else tf.ragged.constant([prefix_ids[i] for i in batch]).to_tensor()
            tokens, log_probs = (x.numpy() for x in self.search_ids(source, prefix_tokens))
            cut = self._stopped(tf.constant(tokens[:, 0]), source_lengths).numpy()  # the best's
            stopped += [index for index, flag in zip(batch, cut, strict=True) if flag]
            scores = ranking_scores(tokens, log_probs, self.length_penalty).numpy()
            best = tf.constant(tokens[:, :n_best].reshape(len(batch) * n_best, -1))
            texts = self.target_tokenizer.detokenize(best).numpy().reshape(len(batch), n_best)
            for row, index in enumerate(batch):
                alive = log_probs[row, :n_best] > -1e8  # an empty source's beams: only the first ever lived
                found = [
                    (text.decode("utf-8"), float(score))
                    for text, score, live in zip(texts[row], scores[row, :n_best], alive, strict=True)
                    if live
                ]
                found = found if with_scores else [text for text, _ in found]
                translations[index] = found if n_best > 1 else found[0]
        if stopped:
            warnings.warn(OutputLimitWarning(sorted(stopped), self), stacklevel=2)
        return self._with_alignments(sentences, translations, batch_size) if with_alignments else translations

    def _with_alignments(self, sentences, translations, batch_size):
        """`translate`'s results, each translation with its alignment: (text, alignment), (text, score, alignment)."""
        lists = [found if isinstance(found, list) else [found] for found in translations]
        items = [(i, found) for i, each in enumerate(lists) for found in each]
        texts = [found if isinstance(found, str) else found[0] for _, found in items]
        aligned = iter(self.align([sentences[i].decode("utf-8") for i, _ in items], texts, batch_size))

        def add(found):
            return (found, next(aligned)) if isinstance(found, str) else (*found, next(aligned))

        return [[add(t) for t in found] if isinstance(found, list) else add(found) for found in translations]

    def _prefix_ids(self, prefix, count):
        """Each prefix's token ids, or ValueError naming the first that cannot be one."""
        if isinstance(prefix, (str, bytes)):
            raise ValueError(f"prefix must be a list of target texts, one a sentence, not one {type(prefix).__name__}.")
        prefix = [text.decode("utf-8") for text in utf8_batch(prefix)]
        if len(prefix) != count:
            raise ValueError(f"prefix needs one text a sentence: got {len(prefix)} prefixes for {count} sentences.")
        ids = self.target_tokenizer.tokenize(tf.constant(prefix, tf.string)).to_list()
        for index, (text, tokens) in enumerate(zip(prefix, ids, strict=True)):
            if not tokens:
                raise ValueError(f"prefix {index} ({text!r}) has no tokens; give target text, or no prefix.")
            if len(tokens) >= self.longest_output:
                raise ValueError(
                    f"prefix {index} has {len(tokens)} tokens; the translations are at most {self.longest_output} "
                    "with [END]: give a shorter one."
                )
        return ids

    def align(self, sources, translations, batch_size=64, layer=ALIGNMENT_LAYER):
        """Word alignments of each translation to its source, in Pharaoh format: "0-0 1-2 2-1" links source word
        i to target word j (words split at spaces, counted from 0).

        Each target word is linked to the source word its tokens attended to most while the model read the
        translation teacher-forced (as `score` does): the cross-attention of the decoder block `layer` (by
        default the last: bench/alignments.py), averaged over its heads, summed over each word's tokens. Sentences over
        `max_length` tokens are refused (`SentenceTooLong`): they are read whole.
        """
        check_positive_int("batch_size", batch_size)
        sources, translations = utf8_batch(sources), utf8_batch(translations)
        if len(sources) != len(translations):
            raise ValueError(f"align needs one translation a source: got {len(sources)} and {len(translations)}.")
        attention = self._on_demand(
            f"cross_attention_{layer}", lambda: tf.function(self._cross_attention(layer), [_IDS, _IDS])
        )
        alignments = [None] * len(sources)
        for batch in self._batches(sources, batch_size):
            source_words = _word_tokens(self.source_tokenizer, [sources[i] for i in batch])  # (B, words, tokens)
            target_words = _word_tokens(self.target_tokenizer, [translations[i] for i in batch])
            source, target = (words.merge_dims(1, 2) for words in (source_words, target_words))  # (B, tokens)
            for index, length in zip(batch, source.row_lengths().numpy(), strict=True):
                if length > self.max_length:
                    raise SentenceTooLong(index, int(length), self.max_length)
            decoder_tokens = tf.concat([tf.fill([len(batch), 1], START_ID), target.to_tensor(PAD_ID)], 1)  # (B, T)
            weights = attention(source.to_tensor(PAD_ID), decoder_tokens).numpy()  # (B, T, S)
            rows = zip(batch, _tokens_per_word(source_words), _tokens_per_word(target_words), strict=True)
            for row, (index, source_counts, target_counts) in enumerate(rows):
                by_source = _word_matrix(source_counts)  # (source tokens, source words)
                by_target = _word_matrix(target_counts)  # (target tokens, target words)
                word_weights = by_target.T @ weights[row, : len(by_target), : len(by_source)] @ by_source
                links = word_weights.argmax(axis=1) if word_weights.size else []
                spoken = target_counts > 0  # a word of no tokens attended to nothing
                alignments[index] = " ".join(f"{i}-{j}" for j, i in enumerate(links) if spoken[j])
        return alignments

    def _cross_attention(self, layer):
        """`(source (B, S), decoder tokens (B, T)) -> (B, T, S)`: block `layer`'s cross-attention, heads averaged."""
        encoder, decoder = self.model.get_layer("encoder"), self.model.get_layer("decoder")

        def attention(source, decoder_tokens):
            context = encoder(source, training=False)
            _, scores = decoder.run_with_attention(decoder_tokens, context, source != PAD_ID, training=False)
            return tf.reduce_mean(scores[layer]["cross_attention"], axis=1)

        return attention

    def score(self, sources, targets, batch_size=64):
        """How likely each target is as the translation of its source, in one teacher-forced pass a batch.

        Returns:
            A `PairScore` for each pair: the log-probability of the target's tokens
            and [END] (what the search computes for the same tokens), their count,
            and each token's log-probability.
        """
        check_positive_int("batch_size", batch_size)
        sources, targets = utf8_batch(sources), utf8_batch(targets)
        if len(sources) != len(targets):
            raise ValueError(f"score needs one target a source: got {len(sources)} sources, {len(targets)} targets.")
        scores = [None] * len(sources)
        for batch in self._batches(sources, batch_size):
            source = padded_tokens(self.source_tokenizer.tokenize(tf.constant([sources[i] for i in batch])))
            target = self.target_tokenizer.tokenize(tf.constant([targets[i] for i in batch]))
            token_log_probs = self.score_ids(source, target.to_tensor(PAD_ID)).numpy()
            for row, (index, length) in enumerate(zip(batch, target.row_lengths().numpy() + 1, strict=True)):
                values = [float(value) for value in token_log_probs[row, :length]]
                scores[index] = PairScore(float(token_log_probs[row, :length].sum()), int(length), values)
        return scores

    @staticmethod
    def _batches(texts, batch_size):
        """Indices of `texts` in batches of `batch_size`, texts of similar length together."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def _word_matrix(tokens_per_word):
    """float `(tokens, words)`: 1 where a token belongs to a word, for sums over each word's tokens."""
    return np.repeat(np.eye(len(tokens_per_word), dtype="float32"), tokens_per_word, axis=0)


def _word_tokens(tokenizer, texts):
    """Ragged int32 `(B, words, tokens)`: each text's words (split at spaces), each word's tokens."""
    words = [text.split() for text in texts]
    flat = tokenizer.tokenize(tf.constant([w for each in words for w in each], tf.string))  # (0,) when none
    return tf.RaggedTensor.from_row_lengths(flat, [len(each) for each in words])


def _tokens_per_word(words):
    """For each row of ragged `(B, words, tokens)`, its words' token counts (NumPy)."""
    return np.split(words.values.row_lengths().numpy(), np.cumsum(words.row_lengths().numpy())[:-1])
