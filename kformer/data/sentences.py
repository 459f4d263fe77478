"""Splitting a line of text into sentences, in the graph, and joining their translations back.

A model trained on single sentences translates a line of several as one
short sentence and drops the rest, so the translator splits each line first.
The rules are regular expressions in RE2 syntax (TensorFlow's regex) that
also read the same in Python's `re`, applied in order: `kformer export` writes
them into its manifest, from which the plain-Python clients (export/wordpiece.py)
split the same way. They are defined here only.

A sentence ends at `.`, `!`, `?` or `…` (repeated or not, then any closing
quotes or brackets) followed by spaces. After `!` and `?` the next sentence
may start with anything; after `.` and `…` it must start with a capital
letter or an opening mark (`¿ ¡ " “ « ( [ '`), so "3.5", "e.g. the" and
"I think... maybe" stay whole. A period after a known abbreviation ("Mr.",
"Sr.", "e.g.", "etc.") or after a single capital (initials, "J. R. R.") ends
nothing.
"""

import tensorflow as tf

_KEEP = "\ue000"  # a private-use character: a period that ends no sentence, while the rules run
BOUNDARY = "\ue001"  # where one sentence ends and the next begins
_CAPITALS = "A-ZÀ-ÖØ-ÞĀĂĄĆĈĊČĎĐĒĔĖĘĚĜĞĠĢĤĦĨĪĬĮİĴĶĹĻĽĿŁŃŅŇŌŎŐŒŔŖŘŚŜŞŠŢŤŦŨŪŬŮŰŲŴŶŸŹŻŽΑ-ΩА-Я"
_OPENING = "¿¡\"“«(\\['‘"
_CLOSING = ")\\]\"'”’»"
_BEFORE_WORD = f"(^|[ \t{_OPENING}])"
ABBREVIATIONS = (
    "Mr|Mrs|Ms|Dr|Drs|Prof|St|Mt|Jr|Sr|Sra|Srta|Sres|Dra|Dña|Ud|Uds|Vd|Vds|Av|Avda|Mme|Mlle|Hr|Fr|Nr|"
    "vs|etc|e\\.g|i\\.e|a\\.m|p\\.m|cf|approx|ca|Inc|Ltd|Co|Corp|Fig|Vol|pp|z\\.B|d\\.h|usw|bzw"
)
SENTENCE_RULES = [
    (f"{_BEFORE_WORD}({ABBREVIATIONS})\\.", f"\\1\\2{_KEEP}"),  # Mr. Smith, Sr. García, e.g. Paris
    (f"{_BEFORE_WORD}([{_CAPITALS}])\\.", f"\\1\\2{_KEEP}"),  # J. R. R. Tolkien
    (f"([!?]+[{_CLOSING}]*[ \t]+)([^ \t])", f"\\1{BOUNDARY}\\2"),  # Really? yes.  ¡Hola! ¿Qué tal?
    (f"([.…]+[{_CLOSING}]*[ \t]+)([{_CAPITALS}{_OPENING}])", f"\\1{BOUNDARY}\\2"),  # It rains. The end.
    (_KEEP, "."),
]


def split_sentences(texts):
    """tf.string `(B,)` -> ragged tf.string `(B, None)`: each line's sentences, in order.

    Each sentence keeps the spaces that follow it, so joining a row gives its
    line back exactly; a line with no sentence end inside is one sentence.
    """
    for pattern, replacement in SENTENCE_RULES:
        texts = tf.strings.regex_replace(texts, pattern, replacement)
    return tf.strings.split(texts, BOUNDARY)


def trailing_spaces(sentences):
    """tf.string (any shape) -> the spaces each ends with (what joins it to the next sentence)."""
    return tf.strings.regex_replace(sentences, "^(?s:.*?)([ \t]*)$", "\\1")


def in_pieces(token_ids, most, word_starts):
    """Ragged int `(N, None)` -> `(N, None, None)`: each row as the fewest pieces of about `most` tokens.

    A row of n tokens, n > most, becomes k = ceil(n / most) pieces of about
    n / k tokens each, cut only where a word starts: a word goes whole to the
    piece its first token's position p falls in, floor(p * k / n). A row of
    `most` tokens or fewer is one piece, itself; an empty row, one empty piece.

    Args:
        token_ids: ragged int32 `(N, None)`, a sentence's tokens a row.
        most: the most tokens a piece should have (a word may take it over).
        word_starts: bool `(V,)`, True at the ids that begin a word (the
            vocabulary's tokens without the "##" of a continuation).
    """
    token_ids = token_ids.with_row_splits_dtype(tf.int32)  # TFLite divides int32, not int64
    lengths = token_ids.row_lengths()  # (N,)
    counts = tf.maximum((lengths + most - 1) // most, 1)  # (N,): pieces a row
    rows, flat = token_ids.value_rowids(), token_ids.flat_values  # (F,) each
    positions = tf.range(tf.size(flat)) - tf.gather(token_ids.row_starts(), rows)  # within the row
    starts = tf.gather(word_starts, flat) | tf.equal(positions, 0)  # (F,)
    word = tf.cumsum(tf.cast(starts, tf.int32)) - 1  # (F,): which word (over all rows) a token belongs to
    word_position = tf.gather(tf.boolean_mask(positions, starts), word)  # its word's first token's position
    piece = word_position * tf.gather(counts, rows) // tf.gather(lengths, rows)  # (F,): within the row
    first_piece = tf.cumsum(counts, exclusive=True)  # (N,): the row's first piece over all rows
    piece_rows = tf.gather(first_piece, rows) + piece  # (F,), sorted
    # Each piece's length as a segment sum (TFLite has no Bincount, which from_value_rowids would use).
    piece_lengths = tf.math.unsorted_segment_sum(tf.ones_like(piece_rows), piece_rows, tf.reduce_sum(counts))
    pieces = tf.RaggedTensor.from_row_lengths(flat, piece_lengths, validate=False)
    return tf.RaggedTensor.from_row_lengths(pieces, counts, validate=False)
