"""Corpora of any size: the training split read from disk as training goes, never whole in memory.

`corpus_splits(path)` is what `kformer train --data` reads. A file up to
`STREAM_ABOVE_BYTES` of text is read whole and split in memory (`read_pairs`,
`split_pairs`: exact epochs, a shuffle over the whole split). A larger one is
read in one pass over its start that keeps:

- the validation and test splits, their first `held_out` pairs in file order;
- a sample of the training split, its first `sample_size` pairs, from which
  the vocabularies are learned and the batches of an epoch estimated;

and its training split becomes a `TrainingStream`, which `make_dataset` reads
line by line each epoch, tokenizes in parallel and shuffles in a bounded
buffer. Both ways split by the same rule (`split_of`), so a pair lands in the
same split whichever way its file is read.
"""

import copy
import itertools
import random
import time

from kformer.data.pairs import DataError, PairFile, check_pairs, read_pairs, split_of, split_pairs

STREAM_ABOVE_BYTES = 64 * 2**20  # about 500,000 Tatoeba-length pairs
HELD_OUT = 5000  # validation and test pairs kept from a large corpus: enough for a BLEU within a point


class TrainingStream:
    """The training split of a corpus file, read from disk each time it is iterated.

    Iterating yields its (source, target) pairs in file order: every pair of
    the file that `split_of` puts in "train".

    Attributes:
        sample: the first training pairs, read when it was made.
        estimated_pairs: training pairs in the whole file; exact when the
            sample reached the end of the file, else estimated from the bytes
            the sample took.
    """

    approximate = True  # estimated_pairs may be an estimate

    def __init__(self, corpus, sample, estimated_pairs, valid_fraction, test_fraction):
        self.corpus = corpus
        self.sample = sample
        self.estimated_pairs = estimated_pairs
        self.fractions = valid_fraction, test_fraction
        self._errors = []  # one list for the stream and its shares
        self._share = (0, 1)

    @property
    def error(self):
        """The `DataError` of a bad line that a pass (of the stream or a share) met, or None."""
        return self._errors[0] if self._errors else None

    def share(self, index, count):
        """Worker `index` of `count`'s share of the pairs, which it reads alone.

        Of a plain text file: the pairs on the lines that start in the
        worker's `count`-th of its bytes (`PairFile.part`); the worker reads
        only those. A .gz, a .zip or two aligned files cannot be entered
        midway: each worker reads all of it and keeps every `count`-th pair
        from the `index`-th.
        """
        if count == 1:
            return self
        mine = copy.copy(self)
        part = self.corpus.part(index, count)
        if part is None:
            mine._share = (index, count)
        else:
            mine.corpus = part
        return mine

    def __iter__(self):
        index, count = self._share
        try:
            pairs = (pair for pair in self.corpus if split_of(pair[0], *self.fractions) == "train")
            yield from itertools.islice(pairs, index, None, count)
        except DataError as error:
            self._errors.append(error)
            raise

    def chunks(self, size=1024):
        """The pairs in lists of `size` (the last shorter): how tf.data takes them, one Python call a list."""
        pairs = iter(self)
        while chunk := list(itertools.islice(pairs, size)):
            yield chunk


class InMemoryPairs(list):
    """A training split held in memory, read through a `TrainingStream`'s interface: a job takes either alike.

    Its pairs (a language model's lines) are all its sample, its count exact, and a worker's share every
    `count`-th one.
    """

    approximate, error = False, None
    sample = property(lambda self: self)
    estimated_pairs = property(len)

    def share(self, index, count):
        return self if count == 1 else InMemoryPairs(self[index::count])


def training_pairs(pairs, name):
    """A `TrainingStream` as it is; anything else checked as pairs (`check_pairs`, naming them `name`) and held
    as `InMemoryPairs`."""
    return pairs if isinstance(pairs, TrainingStream) else InMemoryPairs(check_pairs(pairs, name))


class Mixture(TrainingStream):
    """Several corpora trained on together, each drawn as often as its weight says (`kformer train --data A B
    --weights 3 1`, OpenNMT-py's corpus weights).

    A training pair comes from corpus i with probability w_i / sum(w), the corpora read round and round
    (tf.data's `sample_from_datasets`, seeded, so a resumed run skips exactly the batches it trained on;
    `make_dataset`). Like a stream, its batches are not counted: it is always repeated.

    Attributes:
        parts: each corpus's training pairs, a `TrainingStream` or `InMemoryPairs` (`training_pairs`).
        weights: one positive number a part.
        sample: pairs drawn from the parts' samples by weight (a small part's again when it runs out), as
            many as they hold together: the vocabularies and lengths are learned from it.
        estimated_pairs: the parts' pairs together (an epoch's worth).
    """

    def __init__(self, parts, weights, seed=0):
        self.parts = [training_pairs(part, f"corpus {index + 1} of the mixture") for index, part in enumerate(parts)]
        self.weights = [float(weight) for weight in weights]
        samples = [part.sample for part in self.parts]
        for index, sample in enumerate(samples):
            if not sample:
                raise DataError(f"corpus {index + 1} of the mixture has no training pairs; give it more pairs.")
        drawn = random.Random(seed).choices(range(len(samples)), self.weights, k=sum(map(len, samples)))
        taken = [0] * len(samples)
        self.sample = []
        for index in drawn:
            self.sample.append(samples[index][taken[index] % len(samples[index])])
            taken[index] += 1
        self.estimated_pairs = sum(part.estimated_pairs for part in self.parts)

    @property
    def error(self):
        return next((part.error for part in self.parts if part.error), None)

    def share(self, index, count):
        """Worker `index` of `count`'s share of every part (see each part's `share`), with the same weights."""
        if count == 1:
            return self
        mine = copy.copy(self)
        mine.parts = [part.share(index, count) for part in self.parts]
        return mine

    def __iter__(self):
        raise TypeError("a Mixture is read through make_dataset (its parts by weight), not pair by pair.")


def corpus_splits(path, sample_size, held_out=HELD_OUT, valid_fraction=0.02, test_fraction=0.02, verbose=1):
    """{"train": pairs or a `TrainingStream`, "valid": pairs, "test": pairs} of the corpus file at `path`.

    Held-out splits keep their first `held_out` pairs; a stream's sample is its first `sample_size`
    training pairs (`TrainingConfig.vocab_sample`); see the module's docstring.

    Raises:
        DataError: a missing or bad file (see `PairFile`), or one without training pairs.
    """
    corpus = PairFile(path)
    if corpus.text_size <= STREAM_ABOVE_BYTES:
        splits = split_pairs(read_pairs(path, verbose), valid_fraction, test_fraction)
        return {name: pairs[:held_out] if name != "train" else pairs for name, pairs in splits.items()}
    return _stream_splits(corpus, held_out, sample_size, valid_fraction, test_fraction, verbose)


def _stream_splits(corpus, held_out, sample_size, valid_fraction, test_fraction, verbose):
    if verbose:
        print(
            f"{corpus.name}: {corpus.size / 2**20:,.0f} MB, read as a stream. Reading its start: the first "
            f"{sample_size:,} training pairs and {held_out:,} validation and test pairs ...",
            flush=True,
        )
    splits = {"train": [], "valid": [], "test": []}
    wanted = {"train": sample_size, "valid": held_out, "test": held_out}
    pairs, count, seen, started, shown = iter(corpus), 0, 0, time.perf_counter(), time.perf_counter()
    try:
        for count, pair in enumerate(pairs, start=1):  # pairs, not lines: blank lines are skipped
            name = split_of(pair[0], valid_fraction, test_fraction)
            seen += name == "train"
            if len(splits[name]) < wanted[name]:
                splits[name].append(pair)
            if all(len(splits[name]) >= wanted[name] for name in splits):
                break
            if verbose and time.perf_counter() - shown > 10:
                shown = time.perf_counter()
                print(f"  {count:,} pairs, {corpus.position() / corpus.size:.0%} of the file ...", flush=True)
        ended = next(pairs, None) is None  # the pass reached the end of the file
        read = corpus.size if ended else corpus.position()
    finally:
        pairs.close()
    if not splits["train"]:
        raise DataError(f"{corpus.name}: holds no training pairs; give more sentence pairs.")
    estimated = seen if ended else round(seen * corpus.size / max(read, 1))
    if verbose:
        print(
            f"Read {count:,} pairs ({read / 2**20:,.0f} MB) in {time.perf_counter() - started:.0f} s; "
            f"{'' if ended else 'about '}{estimated:,} training pairs in all.",
            flush=True,
        )
    stream = TrainingStream(corpus, splits["train"], estimated, valid_fraction, test_fraction)
    return {"train": stream, "valid": splits["valid"], "test": splits["test"]}
