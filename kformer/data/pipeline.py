"""The tf.data training pipeline: tokenize, leave out pairs too long, teacher forcing, shuffle, bucket, pad.

Pairs come from a list in memory or from a `TrainingStream` read from disk
(`kformer.data.stream`); after tokenizing, both take the same path.
"""

import ctypes
import math
import platform

import numpy as np
import tensorflow as tf

from kformer.data.pairs import DataError
from kformer.data.stream import Mixture, TrainingStream
from kformer.data.text import END_ID, PAD_ID, START_ID


def teacher_forcing(*ids):
    """Ids of one pair (source, target), or of one line of a language model's text (target alone) ->
    (inputs, labels): ((encoder_tokens, decoder_tokens), labels), or (decoder_tokens, labels) for a line.

    The decoder reads [START] + target and is trained to predict target +
    [END]: at every position t the label is the token that comes after the
    tokens it has seen. Nothing is cut: examples too long for the model are left
    out before (`fits`), so [END] is only ever taught after a whole sentence.
    """
    *source_ids, target_ids = ids
    decoder_tokens = tf.concat([tf.constant([START_ID], tf.int32), target_ids], axis=0)
    labels = tf.concat([target_ids, tf.constant([END_ID], tf.int32)], axis=0)
    return ((*source_ids, decoder_tokens) if source_ids else decoder_tokens), labels


def fits(source_length, target_length, max_length):
    """Whether a pair trains whole within `max_length`: its source tokens, and its target's with [END], fit."""
    return (source_length <= max_length) & (target_length + 1 <= max_length)


def pair_lengths(examples, source_tokenizer, target_tokenizer):
    """Each example's source and target token counts (no [START]/[END]), as two NumPy arrays; a language
    model's lines (no `source_tokenizer`) count 0 source tokens."""
    return _lengths(_token_ids(examples, source_tokenizer, target_tokenizer))


def _lengths(ids):
    """`_token_ids`' rows' lengths: (source, target), a line's source 0."""
    lengths = [side.row_lengths().numpy() for side in ids]
    return (np.zeros_like(lengths[0]), *lengths) if len(ids) == 1 else tuple(lengths)


def _token_ids(examples, source_tokenizer, target_tokenizer):
    """(source ids, target ids) of a list of pairs, ragged; (target ids,) of lines (no `source_tokenizer`)."""
    if source_tokenizer is None:
        return (target_tokenizer.tokenize(tf.constant(list(examples))),)
    sources, targets = zip(*examples, strict=True)
    return source_tokenizer.tokenize(tf.constant(sources)), target_tokenizer.tokenize(tf.constant(targets))


def length_limit(source_lengths, target_lengths, coverage=0.99, bucket_width=8, least=40):
    """The default `max_length` for pairs of these lengths: what `coverage` of them fit whole, rounded up to a
    bucket edge, and never below `least` (kformer's limit before it came from the data, which Tatoeba's
    sentences and the built-in corpus's fit)."""
    longest = np.maximum(source_lengths, target_lengths + 1)
    return max(least, int(math.ceil(np.quantile(longest, coverage) / bucket_width)) * bucket_width)


def bucket_boundaries(max_length, bucket_width=8):
    """Length bucket edges: a pair of length n (its longer side) goes in the first bucket whose edge is above n.

    The last edge lies past max_length, so every pair fits a bucket.
    """
    return list(range(bucket_width + 1, max_length + bucket_width + 1, bucket_width))


def bucket_batch_sizes(boundaries, batch_size=64, batch_tokens=None):
    """Sentences a batch in each bucket: `batch_size`, or as many as fit `batch_tokens` padded tokens."""
    if batch_tokens is None:
        return [batch_size] * (len(boundaries) + 1)
    widths = [edge - 1 for edge in boundaries]  # a bucket pads to just below its edge
    return [max(1, batch_tokens // width) for width in widths + widths[-1:]]


def batches_per_epoch(
    pairs, source_tokenizer, target_tokenizer, batch_size=64, max_length=40, batch_tokens=None, lengths=None
):
    """How many batches `make_dataset` makes of `pairs` in one pass (its bucketing, counted in NumPy).

    For a `TrainingStream`: the count of its sample, scaled to its estimated size. `lengths`: the
    `pair_lengths` of the pairs (of a stream's sample) when they are already counted.
    """
    if isinstance(pairs, TrainingStream):
        settings = dict(batch_size=batch_size, max_length=max_length, batch_tokens=batch_tokens, lengths=lengths)
        in_sample = batches_per_epoch(pairs.sample, source_tokenizer, target_tokenizer, **settings)
        return max(1, round(in_sample * pairs.estimated_pairs / len(pairs.sample)))
    source_lengths, target_lengths = lengths or pair_lengths(pairs, source_tokenizer, target_tokenizer)
    kept = fits(source_lengths, target_lengths, max_length)
    boundaries = bucket_boundaries(max_length)
    buckets = np.searchsorted(boundaries, np.maximum(source_lengths, target_lengths + 1)[kept], side="right")
    sizes = bucket_batch_sizes(boundaries, batch_size, batch_tokens)
    counts = np.bincount(buckets, minlength=len(sizes))
    return max(1, sum(math.ceil(count / size) for count, size in zip(counts, sizes, strict=True)))


def reuse_freed_memory():
    """Lets glibc's malloc keep freed blocks of up to 32 MB for reuse, as it does until `from_generator` runs.

    TensorFlow's generator dataset, on its first element (under Python 3.11+, against memory growth there),
    sets glibc's malloc thresholds: its log names the trim threshold, 128 KB, and the mmap threshold stays
    at about 128 KB after it too (bench/RESULTS.md). After it every block over that size that a training
    step allocated was mapped and unmapped again: the stream's steps spent 10-15% more CPU than the
    in-memory path's in page faults and munmap. This sets both thresholds where glibc's own adjustment
    takes them (32 MB, the most it goes to, and twice that to trim), for the whole process, after
    TensorFlow's setting; freed blocks kept for reuse cost some memory (0.06 GB at the peak of a
    100,000-pair stream, bench/RESULTS.md). Elsewhere than glibc, it does nothing.
    """
    if platform.libc_ver()[0] != "glibc":
        return
    mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
    mallopt(m_mmap_threshold, 32 * 2**20)
    mallopt(m_trim_threshold, 64 * 2**20)


def _ordered(dataset, buffer, repeat, seed):
    """`dataset` shuffled in a buffer of `buffer` elements (not when None), reshuffled each pass, then repeated."""
    if buffer is not None:
        dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    return dataset.repeat() if repeat else dataset


def _text(pairs, buffer, repeat, seed):
    """The (source, target) strings of a stream, a mixture or a list, shuffled in `buffer` (None: not), repeated."""
    if isinstance(pairs, Mixture):  # every part round and round, drawn by weight
        parts = [_text(part, buffer, True, seed + index) for index, part in enumerate(pairs.parts)]
        return tf.data.Dataset.sample_from_datasets(parts, pairs.weights, seed=seed)
    if not isinstance(pairs, TrainingStream):
        sources, targets = zip(*pairs, strict=True)
        text = tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
        return _ordered(text, buffer and min(buffer, len(pairs)), repeat, seed)

    # A Python call per pair would cap the stream near 2,000 pairs a second; one per 1024 pairs does not.
    def chunks():  # called again for each pass
        reuse_freed_memory()  # after TensorFlow's setting, which comes with the generator's first element
        for chunk in pairs.chunks(1024):
            yield tuple(np.array(side, dtype=object) for side in zip(*chunk, strict=True))

    text = tf.data.Dataset.from_generator(chunks, output_signature=(tf.TensorSpec((None,), tf.string),) * 2)
    # Shuffled as text, before tokenizing: the buffer fills as fast as lines are read.
    return _ordered(text.unbatch(), buffer, repeat, seed)


def _tokenized_stream(stream, source_tokenizer, target_tokenizer, buffer, repeat, seed):
    """A stream's (source ids, target ids), tokenized as read, 1024 pairs at a time in parallel."""
    text = _text(stream, buffer, repeat, seed).batch(1024)
    tokenize = lambda s, t: (source_tokenizer.tokenize(s), target_tokenizer.tokenize(t))  # noqa: E731
    return text.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE).unbatch()


def _tokenized_list(examples, source_tokenizer, target_tokenizer, max_length):
    """A list's (source ids, target ids), or a language model's lines' (target ids,), tokenized at once; a
    `DataError` when there are none, or none fits `max_length`."""
    what = "lines" if source_tokenizer is None else "sentence pairs"
    if not examples:
        raise DataError(f"no {what} to make a dataset from.")
    ids = _token_ids(examples, source_tokenizer, target_tokenizer)
    if not np.any(fits(*_lengths(ids), max_length)):
        raise DataError(
            f"none of the {len(examples):,} {what} fits max_length={max_length} tokens a side; "
            "raise max_length (--max-length)."
        )
    return tf.data.Dataset.from_tensor_slices(ids)


def make_dataset(
    pairs,
    source_tokenizer,
    target_tokenizer,
    batch_size=64,
    max_length=40,
    shuffle=True,
    repeat=False,
    seed=0,
    bucket_width=8,
    batch_tokens=None,
    shuffle_buffer=500_000,
):
    """The tf.data pipeline: tokenize, leave out pairs too long, teacher forcing, shuffle, bucket, pad.

    `pairs`: (source, target) sentence pairs (a list or a `TrainingStream`), or
    with `source_tokenizer` None the lines of a language model's text (a list),
    each read as a target side alone.

    A pair whose source has more than `max_length` tokens, or whose target
    has more than `max_length - 1` (room for [END]), is left out (`fits`),
    never cut: a cut target would teach the model to stop mid-sentence.

    A list of pairs is tokenized at once; a `TrainingStream` as it is read,
    in batches of 1024 pairs tokenized in parallel, each epoch (its
    batches are not counted: give it `repeat`). Either is shuffled in a
    buffer of `shuffle_buffer` pairs, or of all of them when they are fewer:
    the buffer, not the corpus, bounds the memory a stream takes. A stream
    is shuffled as text, before it is tokenized, so that its buffer fills
    as fast as lines are read.

    Pairs of similar length are batched together (buckets `bucket_width`
    tokens wide) and padded with 0 only to their bucket's edge, so a batch of
    six-word sentences is not padded to `max_length`, and XLA sees a few
    shapes instead of one per length. A bucket's batches hold `batch_size`
    sentences, or with `batch_tokens` as many as fit that many padded tokens
    a side (the paper's, fairseq's and OpenNMT's way: short sentences come
    in bigger batches, so every step does about the same work).

    Yields:
        ((encoder_tokens (B, S), decoder_tokens (B, T)), labels (B, T)), int32; of lines,
        (decoder_tokens (B, T), labels (B, T)).
    """
    streamed = isinstance(pairs, TrainingStream)  # a Mixture too
    if streamed:
        dataset = _tokenized_stream(
            pairs, source_tokenizer, target_tokenizer, shuffle_buffer if shuffle else None, repeat, seed
        )
    else:
        dataset = _tokenized_list(pairs, source_tokenizer, target_tokenizer, max_length)
    dataset = dataset.filter(
        lambda *ids: fits(tf.shape(ids[0])[0] if len(ids) == 2 else 0, tf.shape(ids[-1])[0], max_length)
    )
    dataset = dataset.map(teacher_forcing, num_parallel_calls=tf.data.AUTOTUNE)
    if not streamed:
        dataset = _ordered(dataset, min(shuffle_buffer, len(pairs)) if shuffle else None, repeat, seed)
    boundaries = bucket_boundaries(max_length, bucket_width)
    dataset = dataset.bucket_by_sequence_length(
        # A pair's longer side; a line's decoder side, its labels' length.
        element_length_func=lambda inputs, labels: tf.maximum(
            tf.shape(tf.nest.flatten(inputs)[0])[0], tf.shape(labels)[0]
        ),
        bucket_boundaries=boundaries,
        bucket_batch_sizes=bucket_batch_sizes(boundaries, batch_size, batch_tokens),
        padding_values=PAD_ID,  # every component
        pad_to_bucket_boundary=True,
        drop_remainder=False,
    )
    if not repeat and not streamed:
        # Bucketing hides the number of batches; Keras needs it to end an epoch cleanly.
        batches = int(dataset.reduce(0, lambda count, _: count + 1))
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(tf.data.AUTOTUNE)
