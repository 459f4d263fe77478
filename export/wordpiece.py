"""WordPiece tokenization in plain Python, for clients that run without TensorFlow.

It mirrors what kformer's graph does with tensorflow-text's FastWordpiece
(BERT-style split on whitespace and punctuation, then greedy longest-match
pieces, "##" marking a continuation) and its detokenizer with spacing rules,
using only the vocabulary files of an export directory.
"""

import re
import unicodedata
from pathlib import Path

PAD, UNK, START, END = 0, 1, 2, 3
MAX_WORD_CHARACTERS = 100

SPACING_RULES = [
    (r"(\d) ([:.,]) (\d)", r"\1\2\3"),
    (r" ([.,!?;:%)\]}»…])", r"\1"),
    (r"([¿¡(\[{«$]) ", r"\1"),
    (r"([^\W\d_]) (['’]) (s|t|re|ve|ll|d|m|clock)\b", r"\1\2\3"),
    (r"(\w) - (\w)", r"\1-\2"),
    (r'" ([^"]*?) "', r'"\1"'),
]


def _is_punctuation(character):
    code = ord(character)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(character).startswith("P")


def _is_cjk(character):
    code = ord(character)
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def split_words(text):
    """Whitespace-separated words, with each punctuation or CJK character a word of its own."""
    words, current = [], []
    for character in text:
        if character.isspace() or _is_punctuation(character) or _is_cjk(character):
            if current:
                words.append("".join(current))
                current = []
            if not character.isspace():
                words.append(character)
        else:
            current.append(character)
    if current:
        words.append("".join(current))
    return words


class WordPiece:
    """Text <-> ids with a vocabulary file (one token a line; line n is id n)."""

    def __init__(self, vocabulary_file):
        self.vocabulary = Path(vocabulary_file).read_text(encoding="utf-8").splitlines()
        self.ids = {token: index for index, token in enumerate(self.vocabulary)}

    def _word(self, word):
        if len(word) > MAX_WORD_CHARACTERS:
            return [UNK]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    pieces.append(self.ids[piece])
                    start = end
                    break
            else:
                return [UNK]
        return pieces

    def tokenize(self, text):
        text = unicodedata.normalize("NFC", text)
        return [piece for word in split_words(text) for piece in self._word(word)]

    def detokenize(self, ids):
        """Ids up to [END] -> readable text (reserved ids dropped, [UNK] shown)."""
        words = []
        for token in ids:
            token = int(token)
            if token == END:
                break
            if token in (PAD, START):
                continue
            piece = self.vocabulary[token]
            if piece.startswith("##") and words:
                words[-1] += piece[2:]
            else:
                words.append(piece)
        return space(" ".join(words))


def space(text):
    """Closes the gaps the word split opened around punctuation."""
    for pattern, replacement in SPACING_RULES:
        text = re.sub(pattern, replacement, text)
    return text


def pad_batch(rows, max_length):
    """Token id lists -> a rectangular list of lists, cut to max_length and padded with 0."""
    rows = [row[:max_length] for row in rows]
    width = max(1, max(len(row) for row in rows))
    return [row + [PAD] * (width - len(row)) for row in rows]
