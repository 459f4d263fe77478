"""Translator: text in, text out, in one tf.function.

Tokenization, one encoder pass, the decoding loop and detokenization all run
inside the graph, so the same object serves Python callers, a SavedModel for
TF Serving, and (through `translate_ids`) runtimes without string ops.
"""

import math
import numbers
from pathlib import Path

import tensorflow as tf

from kformer.data.text import utf8_batch
from kformer.inference.decoding import decode
from kformer.layers.validation import check_positive_int
from kformer.model_dir import TrainedModel, load

EXTRA_OUTPUT_TOKENS = 50
SOURCE_BUCKET = 8  # under XLA, sources are padded to a multiple of this many tokens
XLA_BEAM_BATCH = 64  # beam search runs under XLA up to this many sentences a batch


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
        length_penalty: GNMT's alpha for beam search (0.6 as in GNMT).
        use_cache: decode with the key/value cache (the fast path); False
            re-runs the decoder over the whole prefix at every step.
        max_length: the most source tokens read and target tokens written;
            defaults to the model's training max_length. Longer inputs (even
            10,000 characters) are cut to it. Each batch generates at most
            its longest source + 50 tokens, within this cap.
        xla: compile the whole decoding loop with XLA (`jit_compile`), over
            fixed-size buffers (`max_length` positions) and sources padded to
            a multiple of 8 tokens, so it compiles once per batch size and
            source bucket (1-2 s each, about what tracing the plain loop
            costs). About 3-4x faster a sentence at batch 1, the same tokens.
            Beam search uses it up to 64 sentences a batch.
            False runs the plain graph loop (buffers sized to the batch's output
            limit), which TFLite and ONNX convert.

    Example:
    >>> translator = Translator("kformer-demo", beam_size=4)
    >>> translator(tf.constant(["the black cat sleeps"])).numpy()[0].decode()
    'el gato negro duerme'
    """

    ids_name = "translate_ids"  # the method taking token ids, for the export writers
    text_output = "translations"  # what its texts come out as

    def __init__(self, model, beam_size=1, length_penalty=0.6, use_cache=True, max_length=None, xla=True):
        super().__init__(name="translator")
        trained = load(model) if isinstance(model, (str, Path)) else model
        if not isinstance(trained, TrainedModel):
            raise TypeError(f"Translator needs a model directory or a TrainedModel, got {type(trained).__name__}.")
        if trained.kind != "translator":
            raise ValueError(f"Translator needs a translator; this model is a {trained.kind} (use kformer.Generator).")
        check_positive_int("beam_size", beam_size)
        if max_length is not None:  # None: the model's
            check_positive_int("max_length", max_length)
        if not (isinstance(length_penalty, numbers.Real) and math.isfinite(length_penalty)):
            raise ValueError(f"length_penalty must be a finite number, got length_penalty={length_penalty!r}.")
        self.model = trained.model
        self.source_tokenizer = trained.source_tokenizer
        self.target_tokenizer = trained.target_tokenizer
        self.beam_size = beam_size
        self.length_penalty = float(length_penalty)
        self.use_cache = use_cache
        self.max_length = int(trained.max_length if max_length is None else max_length)
        self.xla = bool(xla and use_cache)
        if self.xla:  # only then: tf.saved_model.save traces and keeps every tf.function a module holds
            self._decode_compiled = tf.function(
                self._decode_fixed,
                input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)],
                jit_compile=True,
            )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def __call__(self, texts):
        """tf.string `(B,)` -> translations tf.string `(B,)`; empty input gives empty output."""
        encoder_tokens = padded_tokens(self.source_tokenizer.tokenize(texts))
        return self.target_tokenizer.detokenize(self.translate_ids(encoder_tokens))

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="encoder_tokens")])
    def translate_ids(self, encoder_tokens):
        """int32 `(B, S)`, 0 = padding -> int32 `(B, T)`, each row [END] then [PAD]."""
        encoder_tokens = encoder_tokens[:, : self.max_length]
        width = tf.shape(encoder_tokens)[1]
        max_length = tf.minimum(width + EXTRA_OUTPUT_TOKENS, self.max_length)

        def graph_loop():
            return decode(self.model, encoder_tokens, max_length, self.beam_size, self.length_penalty, self.use_cache)

        if not self.xla:
            return graph_loop()
        # Padding is masked, so a wider source gives the same output; buckets of 8 bound the compilations.
        # A lone sentence goes with an empty one when greedy: XLA's CPU backend compiles one-row products
        # into loops about 4x slower per step than two-row ones (bench/RESULTS.md), and empty rows are
        # finished at once. Its beams are rows enough.
        batch = tf.shape(encoder_tokens)[0]
        rows = 2 if self.beam_size == 1 else 1
        padded = tf.pad(encoder_tokens, [[0, tf.maximum(rows - batch, 0)], [0, -width % SOURCE_BUCKET]])

        def compiled():
            return self._decode_compiled(padded, max_length)[:batch, :max_length]

        if self.beam_size == 1:
            return compiled()
        # Both loops rewrite every beam's fixed-size cache at every step; up to 64 sentences a batch (measured)
        # the compiled loop is the faster (bench/RESULTS.md). Beyond, each new batch size would compile again.
        return tf.cond(batch <= XLA_BEAM_BATCH, compiled, graph_loop)

    def _decode_fixed(self, encoder_tokens, max_length):
        """The loop over buffers of `self.max_length` positions, `(B, self.max_length)` out (what XLA compiles)."""
        return decode(
            self.model, encoder_tokens, max_length, self.beam_size, self.length_penalty, buffer_length=self.max_length
        )

    def translate(self, sentences, batch_size=64):
        """Python strings in, Python strings out (one for each), batched by similar length.

        Characters UTF-8 cannot encode (lone surrogates) are read as "?".
        """
        check_positive_int("batch_size", batch_size)
        sentences = utf8_batch(sentences)
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        translations = [""] * len(sentences)
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            outputs = self(tf.constant([sentences[i] for i in batch], tf.string)).numpy()
            for index, output in zip(batch, outputs, strict=True):
                translations[index] = output.decode("utf-8")
        return translations
