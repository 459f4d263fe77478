"""WordPiece tokenization in plain Python, for clients that run without TensorFlow.

It mirrors what kformer's graph does with tensorflow-text's FastWordpiece
(BERT-style split on whitespace and punctuation, then greedy longest-match
pieces, "##" marking a continuation) and its detokenizer with spacing rules,
using only the files of an export directory: a vocabulary file, and the
export's manifest.json beside it, which carries the reserved tokens and the
spacing rules exactly as kformer defines them (kformer/text.py).
"""

import json
import math
import re
import unicodedata
from pathlib import Path

import numpy as np

MAX_WORD_CHARACTERS = 100
# The rules are written for RE2 (TensorFlow's regex); Python's re has no \pL or \pN.
_PYTHON_CLASSES = {r"\pL": r"[^\W\d_]", r"\pN": r"\d"}


def python_pattern(re2_pattern):
    """An RE2 spacing rule's pattern in Python's `re` syntax."""
    for re2, python in _PYTHON_CLASSES.items():
        re2_pattern = re2_pattern.replace(re2, python)
    return re2_pattern


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


class ExportFolderError(Exception):
    """An export folder that lacks what a client needs; `main` prints it as one line."""


def read_manifest(export_dir, *needs):
    """The manifest.json of a translator's `kformer export` folder, once the files in `needs` are known to be there.

    Raises:
        ExportFolderError: no manifest (not an export folder), a language model's export, or a file missing.
    """
    export_dir = Path(export_dir)
    if not (export_dir / "manifest.json").is_file():
        raise ExportFolderError(
            f"{export_dir}: not an export folder (no manifest.json); write one with `kformer export`."
        )
    manifest = json.loads((export_dir / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("kind", "translator") != "translator":
        raise ExportFolderError(f"{export_dir}: holds a {manifest['kind']}'s export; this client translates.")
    for need in ("source_vocab.txt", "target_vocab.txt", *needs):
        if not (export_dir / need).exists():
            raise ExportFolderError(
                f"{export_dir / need}: missing; this export has {', '.join(manifest['formats'])} "
                f"(quantized: {', '.join(manifest['quantize']) or 'none'}): export again with what this client runs."
            )
    return manifest


class WordPiece:
    """Text <-> ids with an export's vocabulary file (one token a line; line n is id n).

    The reserved tokens and spacing rules come from the manifest.json that
    `kformer export` writes beside the vocabulary files.
    """

    def __init__(self, vocabulary_file):
        vocabulary_file = Path(vocabulary_file)
        manifest = json.loads((vocabulary_file.parent / "manifest.json").read_text(encoding="utf-8"))
        self.vocabulary = vocabulary_file.read_text(encoding="utf-8").splitlines()
        self.ids = {token: index for index, token in enumerate(self.vocabulary)}
        self.pad, self.unk, self.start, self.end = (self.ids[token] for token in manifest["reserved_tokens"])
        self.spacing_rules = [(python_pattern(rule), replacement) for rule, replacement in manifest["spacing_rules"]]

    def _word(self, word):
        if len(word) > MAX_WORD_CHARACTERS:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    pieces.append(self.ids[piece])
                    start = end
                    break
            else:
                return [self.unk]
        return pieces

    def tokenize(self, text):
        text = unicodedata.normalize("NFC", text)
        return [piece for word in split_words(text) for piece in self._word(word)]

    def detokenize(self, ids):
        """Ids up to [END] -> readable text (reserved ids dropped, [UNK] shown)."""
        words = []
        for token in ids:
            token = int(token)
            if token == self.end:
                break
            if token in (self.pad, self.start):
                continue
            piece = self.vocabulary[token]
            if piece.startswith("##") and words:
                words[-1] += piece[2:]
            else:
                words.append(piece)
        return self.space(" ".join(words))

    def space(self, text):
        """Closes the gaps the word split opened around punctuation."""
        for pattern, replacement in self.spacing_rules:
            text = re.sub(pattern, replacement, text)
        return text


def by_sentence(translate_sentences, lines, manifest):
    """Translates `lines` as kformer's graph does: each line split into sentences by the manifest's rules
    (kformer/data/sentences.py), every sentence in one call of `translate_sentences` (a list of strings in,
    their translations out), and each line's translations joined by the spaces between its sentences.

    An export from before the rules were written (no "sentence_rules") translates each line whole, as it did.
    """
    split = []
    for line in lines:
        for pattern, replacement in manifest.get("sentence_rules", []):
            line = re.sub(pattern, replacement, line)
        split.append(line.split(manifest["sentence_boundary"]) if "sentence_rules" in manifest else [line])
    translations = iter(translate_sentences([sentence for sentences in split for sentence in sentences]))
    joined = [[next(translations) + sentence[len(sentence.rstrip(" \t")) :] for sentence in s] for s in split]
    return ["".join(line).rstrip(" \t") for line in joined]  # the spaces between sentences, not after the last


def by_piece(translate_pieces, sentences, source, target, manifest):
    """Translates `sentences` as kformer's graph does: a sentence over the manifest's max_length tokens in
    pieces (`pieces`), every piece in one call of `translate_pieces` (token id lists in, their translations'
    ids out), and each sentence's pieces' outputs, up to their [END]s, put end to end and detokenized.

    An export from before pieces (no "max_output_ratio") cuts each sentence to max_length tokens, as it did.
    """
    most = manifest["max_length"]
    if "max_output_ratio" not in manifest:
        outputs = translate_pieces([source.tokenize(sentence)[:most] for sentence in sentences])
        return [target.detokenize(ids) for ids in outputs]
    pieces_of = [pieces(source.tokenize(sentence), most, source.vocabulary) for sentence in sentences]
    outputs = iter(translate_pieces([piece for each in pieces_of for piece in each]))
    ended = (list(ids)[: list(ids).index(target.end)] if target.end in list(ids) else list(ids) for ids in outputs)
    return [target.detokenize([token for _ in each for token in next(ended)]) for each in pieces_of]


def pieces(ids, most, vocabulary):
    """kformer.data.sentences.in_pieces for one sentence: its ids in ceil(n / most) pieces, cut at word starts."""
    count = max(1, -(-len(ids) // most))
    out, word_start = [[] for _ in range(count)], 0
    for position, token in enumerate(ids):
        if position == 0 or not vocabulary[token].startswith("##"):
            word_start = position
        out[word_start * count // len(ids)].append(token)
    return out


def output_limit(manifest, longest):
    """The most tokens (with [END]) kformer's graph writes for a batch whose longest source has `longest`."""
    most = manifest["max_length"]
    if "max_output_ratio" not in manifest:  # an export from before the ratio
        return min(max(longest, 1) + 50, most)
    grown = math.ceil(np.float32(manifest["max_output_ratio"]) * np.float32(min(longest, most)))
    return max(most, int(grown) + manifest["extra_output_tokens"])


def pad_batch(rows, pad=0):
    """Token id lists -> a rectangular list of lists, padded with `pad` ([PAD]'s id)."""
    width = max(1, max((len(row) for row in rows), default=0))
    return [row + [pad] * (width - len(row)) for row in rows]
