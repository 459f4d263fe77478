"""Sentence-pair files and text files read and checked, and deterministic splits.

A pair file is Tatoeba/Anki style: `English<TAB>Target[<TAB>attribution]`, one
pair per line, UTF-8; given as .txt/.tsv, gzip-compressed (.gz), or as the .zip
it is published in. Two aligned files, one sentence a line, are the other form
("train.en,train.es": the "Moses" format of OPUS and WMT).

Every form is read the same way, line by line (`PairFile`): `read_pairs`
keeps them all in memory, `kformer.data.stream` reads them as training goes.
"""

import contextlib
import copy
import gzip
import hashlib
import itertools
import os
import unicodedata
import zipfile
import zlib
from pathlib import Path


class DataError(ValueError):
    """Bad input data; the message names the file (and line) and what to do."""


def _decode_line(raw, name, number):
    try:
        return raw.decode("utf-8-sig")  # also drops a byte-order mark
    except UnicodeDecodeError:
        raise DataError(f"{name}, line {number}: not UTF-8 text; re-save the file as UTF-8.") from None


def _zip_member(path):
    """The one pair file inside the archive at `path`, or DataError."""
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
    return members[0]


class PairFile:
    """A corpus of sentence pairs on disk, read line by line each time it is iterated (never whole).

    Iterating yields (source, target) pairs: text NFC-normalised and stripped,
    fields after the second tab (Tatoeba's attribution) ignored, blank lines
    skipped, duplicates kept. `blank` and `extra_fields` count what the last
    complete pass skipped and ignored, `lines` the lines it read.

    Args:
        path: a .txt/.tsv file, a .gz of one, a .zip holding one, or two
            aligned files as "source_file,target_file".

    Raises (on making it):
        DataError: no such file, a directory, or an archive without exactly one text file.
    Raises (while iterating):
        DataError: a line not UTF-8, without a tab, or with an empty side; aligned files
            of different lengths. The message names the file and line.
    """

    def __init__(self, path):
        if isinstance(path, str) and "," in path and not Path(path).exists():
            self.paths = [Path(part) for part in path.split(",", 1)]
            for part in self.paths:
                if not part.is_file():
                    raise DataError(f"{part}: no such file; give two aligned text files, one sentence a line.")
            self.name = f"{self.paths[0]} and {self.paths[1]}"
            self.member = None
        else:
            path = Path(path)
            if not path.exists():
                raise DataError(f"{path}: no such file; give a .txt, .tsv, .gz or .zip of sentence pairs.")
            if path.is_dir():
                raise DataError(f"{path}: is a directory; give a .txt, .tsv, .gz or .zip file of sentence pairs.")
            self.paths = [path]
            self.member = _zip_member(path) if path.suffix.lower() == ".zip" else None
            self.name = f"{path}:{self.member}" if self.member else str(path)
        self.blank = self.extra_fields = self.lines = 0
        self._raw = []
        self._bytes = None  # (start, end, file size): only the lines that start in these bytes (`part`)

    def part(self, index, count):
        """Part `index` of `count`: the lines that start in its `count`-th of the file's bytes, read alone.

        The parts hold every line once, and each reads about its share of the
        bytes (the lines it seeks past are not read). Its line numbers count
        from its first line. A plain text file with "\n" line ends can be
        entered midway; for a .gz, a .zip, two aligned files or old Macs' "\r"
        line ends, None. Reading a part of a file whose size has changed since
        raises DataError: the parts would no longer fit together.
        """
        if len(self.paths) == 2 or self.member or self.paths[0].suffix.lower() == ".gz":
            return None
        size = self.size
        with open(self.paths[0], "rb") as raw:
            if size > 2**16 and b"\n" not in raw.read(2**16):
                return None
        start, end = size * index // count, size * (index + 1) // count
        part = copy.copy(self)
        part._raw, part._bytes = [], (start, end, size)
        part.name = f"{self.name} (its part from byte {start:,} to {end:,})"
        return part

    @property
    def size(self):
        """Bytes on disk (compressed, for a .gz or .zip)."""
        return sum(path.stat().st_size for path in self.paths)

    @property
    def text_size(self):
        """Bytes of text: what the archive records for a .zip member, or a .gz's trailer (its size modulo 4 GiB,
        so at least the bytes on disk are taken)."""
        if self.member:
            with zipfile.ZipFile(self.paths[0]) as archive:
                return archive.getinfo(self.member).file_size
        if self.paths[0].suffix.lower() == ".gz" and self.size >= 4:
            with open(self.paths[0], "rb") as raw:
                raw.seek(-4, 2)
                return max(self.size, int.from_bytes(raw.read(4), "little"))
        return self.size

    def position(self):
        """Bytes on disk read so far by the pass under way (read ahead in blocks, so approximate)."""
        return sum(raw.tell() for raw in self._raw if not raw.closed)

    @contextlib.contextmanager
    def _open(self, path):
        """`path` as binary lines, decompressed; its raw file is kept for `position`."""
        with open(path, "rb") as raw:
            self._raw.append(raw)
            try:
                if self.member:
                    with zipfile.ZipFile(raw) as archive, archive.open(self.member) as lines:
                        yield lines
                elif path.suffix.lower() == ".gz":
                    with gzip.open(raw) as lines:
                        yield lines
                else:
                    yield raw
            except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:  # a damaged .gz or .zip
                raise DataError(f"{path}: cannot be read to its end ({error}).") from None
            finally:
                self._raw.remove(raw)

    def __iter__(self):
        return self._aligned() if len(self.paths) == 2 else self._tabbed()

    def _tabbed(self):
        blank = extra = number = 0
        with self._open(self.paths[0]) as lines:
            if self._bytes is not None:
                start, end, size = self._bytes
                now = os.fstat(lines.fileno()).st_size
                if now != size:
                    raise DataError(
                        f"{self.paths[0]}: changed size while training read it in parts ({size:,} bytes, "
                        f"now {now:,}); keep a corpus unchanged while it trains."
                    )
                lines = _starting_in(lines, start, end)
            lines = (line for chunk in lines for line in chunk.splitlines())  # \n, \r\n and old Macs' \r
            for number, raw in enumerate(lines, start=1):
                line = _decode_line(raw, self.name, number)
                if not line.strip():
                    blank += 1
                    continue
                fields = line.split("\t")
                extra += len(fields) > 2
                if len(fields) < 2:
                    raise DataError(f"{self.name}, line {number}: no tab; each line must be 'source<TAB>target'.")
                source, target = (unicodedata.normalize("NFC", field.strip()) for field in fields[:2])
                if not source or not target:
                    side = "source" if not source else "target"
                    raise DataError(f"{self.name}, line {number}: the {side} side is empty.")
                yield source, target
            self.blank, self.extra_fields, self.lines = blank, extra, number

    def _aligned(self):
        blank, number, paths = 0, 0, self.paths
        with self._open(paths[0]) as source, self._open(paths[1]) as target:
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
                yield tuple(sides)
        self.blank, self.lines = blank, number


def _starting_in(raw, start, end):
    """The lines of the binary file `raw` that start at a byte from `start` up to (not including) `end`."""
    position = 0
    if start:
        raw.seek(start - 1)
        position = start - 1 + len(raw.readline())  # past the line under way at `start`, which an earlier part reads
    while position < end and (line := raw.readline()):
        yield line
        position += len(line)


def read_pairs(path, verbose=0):
    """Reads every sentence pair of a corpus file (see `PairFile`) into memory.

    With `verbose`, a line says how many pairs there were, and how many blank
    lines, duplicate pairs and extra fields.

    Returns:
        A list of (source, target) string pairs.

    Raises:
        DataError: a missing, empty or non-UTF-8 file, or a bad line (see `PairFile`);
            the message names the file and line.
    """
    corpus = PairFile(path)
    pairs = list(corpus)
    if not pairs:
        raise DataError(f"{corpus.name}: holds no sentence pairs.")
    if verbose:
        duplicates = len(pairs) - len(set(pairs))
        extra = ""
        if len(corpus.paths) == 1:
            extra = f", fields after the second tab ignored on {corpus.extra_fields:,} lines"
        print(
            f"Read {len(pairs):,} pairs from {corpus.name} ({corpus.blank:,} blank lines skipped, "
            f"{duplicates:,} duplicate pairs kept{extra}).",
            flush=True,
        )
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
        splits[split_of(pair[0], valid_fraction, test_fraction, salt)].append(pair)
    return splits


def split_of(source, valid_fraction=0.02, test_fraction=0.02, salt="kformer"):
    """ "train", "valid" or "test": the split of every pair whose source sentence is `source` (its hash decides)."""
    digest = hashlib.sha256(f"{salt}\0{source}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    if fraction < test_fraction:
        return "test"
    return "valid" if fraction < test_fraction + valid_fraction else "train"


def read_lines(path):
    """Non-empty lines of a UTF-8 text file, for language modelling."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file; give a UTF-8 text file, one passage a line.")
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines()]  # drops a BOM
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; re-save the file as UTF-8.") from None
    lines = [line for line in lines if line]
    if not lines:
        raise DataError(f"{path}: holds no text.")
    return lines
