"""Sentence-pair files and text files read and checked, and deterministic splits.

A pair file is Tatoeba/Anki style: `English<TAB>Target[<TAB>attribution]`, one
pair per line, UTF-8; given as .txt/.tsv or as the .zip it is published in.
"""

import hashlib
import itertools
import unicodedata
import zipfile
from pathlib import Path


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


def read_lines(path):
    """Non-empty lines of a UTF-8 text file, for language modelling."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file; give a UTF-8 text file, one passage a line.")
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; re-save the file as UTF-8.") from None
    lines = [line for line in lines if line]
    if not lines:
        raise DataError(f"{path}: holds no text.")
    return lines
