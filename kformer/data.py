"""Sentence-pair files, deterministic splits and the tf.data training pipeline.

A pair file is Tatoeba/Anki style: `English<TAB>Target[<TAB>attribution]`, one
pair per line, UTF-8; given as .txt/.tsv or as the .zip it is published in.
"""

import hashlib
import itertools
import math
import unicodedata
import zipfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from kformer.text import END_ID, PAD_ID, START_ID


class DataError(ValueError):
    """Bad input data; the message names the file (and line) and what to do."""


def _decode(raw, name):
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataError(f"{name}, line {line}: not UTF-8 text; re-save the file as UTF-8.") from None


def _decode_line(raw, path, number):
    try:
        return raw.decode("utf-8-sig")  # also drops a byte-order mark
    except UnicodeDecodeError:
        raise DataError(f"{path}, line {number}: not UTF-8 text; re-save the file as UTF-8.") from None


def _read_text(path):
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file; give a .txt, .tsv or .zip of sentence pairs.")
    if path.is_dir():
        raise DataError(f"{path}: is a directory; give a .txt, .tsv or .zip file of sentence pairs.")
    if path.suffix.lower() != ".zip":
        return _decode(path.read_bytes(), str(path)), str(path)
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise DataError(f"{path}: not a readable .zip archive.") from None
    with archive:
        members = [
            name
            for name in archive.namelist()
            if name.lower().endswith((".txt", ".tsv"))
            and not Path(name).name.startswith(("_", "."))  # _about.txt, macOS ._ files
            and not name.startswith("__MACOSX")
        ]
        if not members:
            raise DataError(f"{path}: the archive holds no .txt or .tsv file of sentence pairs.")
        if len(members) > 1:
            raise DataError(
                f"{path}: the archive holds {len(members)} text files ({', '.join(sorted(members))}); "
                "unpack it and give the one with the sentence pairs."
            )
        (member,) = members
        name = f"{path}:{member}"
        return _decode(archive.read(member), name), name


def _report(pairs, source, blank, more=""):
    duplicates = len(pairs) - len(set(pairs))
    print(
        f"Read {len(pairs):,} pairs from {source} ({blank:,} blank lines skipped, "
        f"{duplicates:,} duplicate pairs kept{more}).",
        flush=True,
    )


def read_parallel(source_path, target_path, verbose=0):
    """Reads two aligned plain-text files, one sentence a line: the "Moses" format of OPUS and WMT.

    The files are read together, line by line (never whole into memory);
    text is NFC-normalised and stripped, lines blank on both sides are
    skipped and duplicate pairs kept (with `verbose`, a line counts them).

    Returns:
        A list of (source, target) string pairs.

    Raises:
        DataError: a missing or non-UTF-8 file, a line empty on one side
            only, or files of different lengths (the message gives both counts).
    """
    paths = [Path(source_path), Path(target_path)]
    for path in paths:
        if not path.is_file():
            raise DataError(f"{path}: no such file; give two aligned text files, one sentence a line.")
    pairs, blank = [], 0
    with open(paths[0], "rb") as source, open(paths[1], "rb") as target:
        for number, lines in enumerate(itertools.zip_longest(source, target), start=1):
            if None in lines:
                longer = lines.index(None) ^ 1  # the file that still has lines
                counts = [number - 1, number - 1]
                counts[longer] += 1 + sum(1 for _ in (source, target)[longer])
                raise DataError(
                    f"{paths[0]} has {counts[0]:,} lines but {paths[1]} has {counts[1]:,}; "
                    "the two files must be aligned line by line."
                )
            sides = [
                unicodedata.normalize("NFC", _decode_line(line, path, number).strip())
                for line, path in zip(lines, paths, strict=True)
            ]
            if not any(sides):
                blank += 1
                continue
            if not all(sides):
                empty = paths[sides.index("")]
                raise DataError(f"{empty}, line {number}: empty, but the other file's line {number} is not.")
            pairs.append(tuple(sides))
    if not pairs:
        raise DataError(f"{paths[0]}, {paths[1]}: hold no sentence pairs.")
    if verbose:
        _report(pairs, f"{paths[0]} and {paths[1]}", blank)
    return pairs


def read_pairs(path, verbose=0):
    """Reads sentence pairs from a .txt/.tsv file or a .zip holding one.

    `path` may also name two aligned files, "train.en,train.es" (see `read_parallel`).

    Text is NFC-normalised and stripped (a byte-order mark and CRLF line
    ends are fine); fields after the second tab (Tatoeba's attribution) are
    ignored; blank lines are skipped; duplicate pairs are kept (they are
    how often a translation occurs, and `split_pairs` keeps every copy of a
    source on one side). With `verbose`, a line says how many of each there were.
    In an archive, operating-system and metadata files (`__MACOSX/`, `._*`,
    `_about.txt`) are ignored; it must hold exactly one other text file.

    Returns:
        A list of (source, target) string pairs.

    Raises:
        DataError: a missing, empty or non-UTF-8 file, or a line without a tab
            or with an empty side; the message names the file and line.
    """
    if isinstance(path, str) and "," in path and not Path(path).exists():
        return read_parallel(*path.split(",", 1), verbose=verbose)
    text, name = _read_text(path)
    pairs, blank, extra_fields = [], 0, 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            blank += 1
            continue
        fields = line.split("\t")
        extra_fields += len(fields) > 2
        if len(fields) < 2:
            raise DataError(f"{name}, line {number}: no tab; each line must be 'source<TAB>target'.")
        source, target = (unicodedata.normalize("NFC", field.strip()) for field in fields[:2])
        if not source or not target:
            side = "source" if not source else "target"
            raise DataError(f"{name}, line {number}: the {side} side is empty.")
        pairs.append((source, target))
    if not pairs:
        raise DataError(f"{name}: holds no sentence pairs.")
    if verbose:
        _report(pairs, name, blank, f", fields after the second tab ignored on {extra_fields:,} lines")
    return pairs


def check_pairs(pairs, name="pairs"):
    """`pairs` as a list of (source, target) string tuples, or DataError naming the first item that is not one."""
    if isinstance(pairs, (str, bytes, dict)):
        raise DataError(f"{name} must be a list of (source, target) string pairs, not a {type(pairs).__name__}.")
    checked = []
    for index, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise DataError(f"{name}: item {index} is not a (source, target) pair of strings: {pair!r:.60}.")
        checked.append(tuple(pair))
    return checked


def split_pairs(pairs, valid_fraction=0.02, test_fraction=0.02, salt="kformer"):
    """Splits pairs into train/valid/test by unique source sentence.

    Every translation of one source sentence lands in the same split, so test
    sentences never appear in training. The split of a sentence depends only
    on its text (a hash), not on file order or size.

    Returns:
        {"train": [...], "valid": [...], "test": [...]} lists of pairs.
    """
    splits = {"train": [], "valid": [], "test": []}
    for pair in pairs:
        digest = hashlib.sha256(f"{salt}\0{pair[0]}".encode()).digest()
        fraction = int.from_bytes(digest[:8], "big") / 2**64
        if fraction < test_fraction:
            splits["test"].append(pair)
        elif fraction < test_fraction + valid_fraction:
            splits["valid"].append(pair)
        else:
            splits["train"].append(pair)
    return splits


def teacher_forcing(source_ids, target_ids, max_length):
    """Ids of one pair -> ((encoder_tokens, decoder_tokens), labels).

    The decoder reads [START] + target and is trained to predict target +
    [END]: at every position t the label is the token that comes after the
    tokens it has seen. Sequences are cut to `max_length` tokens.
    """
    source_ids = source_ids[:max_length]
    target_ids = target_ids[: max_length - 1]
    start = tf.constant([START_ID], tf.int32)
    end = tf.constant([END_ID], tf.int32)
    decoder_tokens = tf.concat([start, target_ids], axis=0)
    labels = tf.concat([target_ids, end], axis=0)
    return (source_ids, decoder_tokens), labels


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


def batches_per_epoch(pairs, source_tokenizer, target_tokenizer, batch_size=64, max_length=40, batch_tokens=None):
    """How many batches `make_dataset` makes of `pairs` in one pass (its bucketing, counted in NumPy)."""
    sources, targets = zip(*pairs, strict=True)
    source_lengths = np.minimum(source_tokenizer.tokenize(tf.constant(sources)).row_lengths().numpy(), max_length)
    target_lengths = np.minimum(target_tokenizer.tokenize(tf.constant(targets)).row_lengths().numpy() + 1, max_length)
    boundaries = bucket_boundaries(max_length)
    buckets = np.searchsorted(boundaries, np.maximum(source_lengths, target_lengths), side="right")
    sizes = bucket_batch_sizes(boundaries, batch_size, batch_tokens)
    counts = np.bincount(buckets, minlength=len(sizes))
    return max(1, sum(math.ceil(count / size) for count, size in zip(counts, sizes, strict=True)))


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
):
    """The tf.data pipeline: tokenize, truncate, teacher forcing, bucket, pad.

    Pairs of similar length are batched together (buckets `bucket_width`
    tokens wide) and padded with 0 only to their bucket's edge, so a batch of
    six-word sentences is not padded to `max_length`, and XLA sees a few
    shapes instead of one per length. A bucket's batches hold `batch_size`
    sentences, or with `batch_tokens` as many as fit that many padded tokens
    a side (the paper's, fairseq's and OpenNMT's way: short sentences come
    in bigger batches, so every step does about the same work).

    Yields:
        ((encoder_tokens (B, S), decoder_tokens (B, T)), labels (B, T)), int32.
    """
    if not pairs:
        raise DataError("no sentence pairs to make a dataset from.")
    sources, targets = zip(*pairs, strict=True)
    source_ids = source_tokenizer.tokenize(tf.constant(sources))
    target_ids = target_tokenizer.tokenize(tf.constant(targets))
    dataset = tf.data.Dataset.from_tensor_slices((source_ids, target_ids))
    dataset = dataset.map(lambda s, t: teacher_forcing(s, t, max_length), num_parallel_calls=tf.data.AUTOTUNE)
    if shuffle:
        dataset = dataset.shuffle(len(pairs), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    boundaries = bucket_boundaries(max_length, bucket_width)
    dataset = dataset.bucket_by_sequence_length(
        element_length_func=lambda inputs, labels: tf.maximum(tf.shape(inputs[0])[0], tf.shape(labels)[0]),
        bucket_boundaries=boundaries,
        bucket_batch_sizes=bucket_batch_sizes(boundaries, batch_size, batch_tokens),
        padding_values=((PAD_ID, PAD_ID), PAD_ID),
        pad_to_bucket_boundary=True,
        drop_remainder=False,
    )
    # Workers of a multi-worker strategy each take every n-th batch (the data is in memory, not files).
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)
    if not repeat:
        # Bucketing hides the number of batches; Keras needs it to end an epoch cleanly.
        batches = int(dataset.reduce(0, lambda count, _: count + 1))
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(batches))
    return dataset.prefetch(tf.data.AUTOTUNE)
