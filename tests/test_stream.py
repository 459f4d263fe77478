"""Corpora read as a stream: the same splits, batches and tokens as the in-memory path, in bounded memory.

The in-memory path (`read_pairs`, `split_pairs`, `make_dataset` of a list) is
the reference: a stream must give what it gives, read another way.
"""

import ctypes
import gzip
import itertools
import os
import platform
import re
import signal

import keras
import numpy as np
import pytest
from conftest import run_fresh_python

from kformer.cli import main
from kformer.data import stream
from kformer.data.pairs import DataError, read_pairs, split_of, split_pairs
from kformer.data.pipeline import batches_per_epoch, make_dataset
from kformer.data.stream import TrainingStream, corpus_splits
from kformer.data.text import Tokenizer, build_vocabulary
from kformer.training.config import TrainingConfig
from kformer.training.jobs import train_translator

WORDS = "the a cat dog sees eats big small red old man woman".split()


def corpus_lines(count, seed=0):
    """`count` pair lines of 2-7 words, some repeated, a blank line and attribution fields among them."""
    rng = np.random.default_rng(seed)
    lines = []
    for number in range(count):
        words = rng.choice(WORDS, size=rng.integers(2, 8))
        source = " ".join(words)
        lines.append(f"{source}\t{' '.join(reversed(words)).upper()}" + ("\tCC-BY" if number % 7 == 0 else ""))
    return lines[:10] + lines[:3] + [""] + lines[10:]


def write(path, lines):
    text = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)
    return path


def corpus_file(tmp_path, name, lines):
    """`lines` written as the file `name` (.tsv or .gz), or as two aligned files for "aligned"; its --data path."""
    if name != "aligned":
        return write(tmp_path / name, lines)
    sources = write(tmp_path / "c.en", [line.split("\t")[0] for line in lines])
    targets = write(tmp_path / "c.es", [line.split("\t")[1] if line else "" for line in lines])
    return f"{sources},{targets}"


@pytest.fixture
def streamed(monkeypatch):
    """Every file read as a stream, however small."""
    monkeypatch.setattr(stream, "STREAM_ABOVE_BYTES", 0)


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer(build_vocabulary([" ".join(WORDS), " ".join(WORDS).upper()], 60))


@pytest.mark.parametrize("name", ["pairs.tsv", "pairs.tsv.gz", "aligned"])
def test_a_stream_holds_the_splits_of_the_in_memory_path(tmp_path, streamed, name, capsys):
    lines = corpus_lines(3000)
    path = corpus_file(tmp_path, name, lines)
    splits = corpus_splits(path, held_out=20, sample_size=100, valid_fraction=0.05, test_fraction=0.05)
    assert "read as a stream" in capsys.readouterr().out
    expected = split_pairs(read_pairs(path), valid_fraction=0.05, test_fraction=0.05)
    assert isinstance(splits["train"], TrainingStream)
    assert list(splits["train"]) == expected["train"]  # every line read again, each time it is iterated
    assert list(splits["train"]) == expected["train"]
    assert splits["train"].sample == expected["train"][:100]
    assert splits["valid"] == expected["valid"][:20] and splits["test"] == expected["test"][:20]


def test_a_small_file_is_read_into_memory_with_its_held_out_splits_capped(tmp_path, capsys, monkeypatch):
    path = write(tmp_path / "pairs.tsv", corpus_lines(3000))
    expected = split_pairs(read_pairs(path))
    splits = corpus_splits(path, held_out=10, sample_size=100, verbose=0)
    assert splits == {"train": expected["train"], "valid": expected["valid"][:10], "test": expected["test"][:10]}
    expected = split_pairs(read_pairs(path), valid_fraction=0.1, test_fraction=0.05)
    splits = corpus_splits(path, held_out=10**6, sample_size=100, valid_fraction=0.1, test_fraction=0.05)
    assert splits == expected and capsys.readouterr().out.startswith(f"Read 3,003 pairs from {path}")  # verbose
    monkeypatch.setattr(stream, "STREAM_ABOVE_BYTES", path.stat().st_size)  # up to the limit: in memory
    assert isinstance(corpus_splits(path, held_out=10, sample_size=100, verbose=0)["train"], list)
    monkeypatch.setattr(stream, "STREAM_ABOVE_BYTES", path.stat().st_size - 1)
    assert isinstance(corpus_splits(path, held_out=10, sample_size=100, verbose=0)["train"], TrainingStream)


def test_the_size_of_a_stream_is_estimated_from_the_bytes_its_sample_took(tmp_path, streamed):
    path = write(tmp_path / "pairs.tsv", corpus_lines(20_000))
    train = split_pairs(read_pairs(path))["train"]
    estimated = corpus_splits(path, held_out=5, sample_size=2000, verbose=0)["train"].estimated_pairs
    assert estimated == pytest.approx(len(train), rel=0.05) and estimated != len(train)
    # A sample that reaches the end of the file counts it exactly.
    assert corpus_splits(path, held_out=10**6, sample_size=10**6, verbose=0)["train"].estimated_pairs == len(train)


def test_an_epoch_of_a_stream_is_estimated_close_to_the_count_of_its_pairs(tmp_path, streamed, tokenizer):
    path = write(tmp_path / "pairs.tsv", corpus_lines(20_000))
    train = corpus_splits(path, held_out=5, sample_size=2000, verbose=0)["train"]
    # --batch-tokens counts as it batches; at 3 sentences a batch the sample's count, scaled, is 6% off.
    for batching, within in [(dict(batch_size=16), 0.05), (dict(batch_tokens=24), 0.1)]:
        exact = batches_per_epoch(list(train), tokenizer, tokenizer, max_length=8, **batching)
        estimated = batches_per_epoch(train, tokenizer, tokenizer, max_length=8, **batching)
        assert estimated == pytest.approx(exact, rel=within)
    assert exact > 1.5 * batches_per_epoch(list(train), tokenizer, tokenizer, max_length=8)  # 24 tokens: < 64 a batch
    # A stream of one batch counts one.
    whole = corpus_splits(write(tmp_path / "few.tsv", corpus_lines(30)), held_out=1, sample_size=100, verbose=0)
    assert isinstance(whole["train"], TrainingStream)
    assert batches_per_epoch(whole["train"], tokenizer, tokenizer, max_length=8) == 1


def batches(dataset, count):
    return [[part.numpy() for part in keras.tree.flatten(batch)] for batch in itertools.islice(dataset, count)]


def test_a_stream_makes_the_batches_its_pairs_make_in_memory(tmp_path, streamed, tokenizer):
    path = write(tmp_path / "pairs.tsv", corpus_lines(3000))
    train = corpus_splits(path, held_out=5, sample_size=100, verbose=0)["train"]
    settings = dict(batch_size=16, max_length=8, shuffle=False, repeat=True)
    from_disk = batches(make_dataset(train, tokenizer, tokenizer, **settings), 400)  # past the end: it repeats
    in_memory = batches(make_dataset(list(train), tokenizer, tokenizer, **settings), 400)
    assert len(from_disk) == 400
    for disk, memory in zip(from_disk, in_memory, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(disk, memory, strict=True))


@pytest.mark.parametrize("buffer", [1, 8])
def test_a_stream_is_shuffled_within_its_buffer_only(tmp_path, streamed, tokenizer, buffer):
    """A pair can come out at most `buffer - 1` places early: what the buffer does not hold is not in memory."""
    path = write(tmp_path / "pairs.tsv", [f"{first} {second}\tx" for first in WORDS for second in WORDS])
    train = corpus_splits(path, held_out=1, sample_size=10, verbose=0)["train"]
    order = [tuple(ids) for ids in tokenizer.tokenize([source for source, _ in train]).to_list()]
    assert len(set(order)) == len(order)
    dataset = make_dataset(train, tokenizer, tokenizer, batch_size=1, max_length=20, repeat=True, shuffle_buffer=buffer)
    places = [
        order.index(tuple(ids[ids != 0])) for (ids, _), _ in itertools.islice(dataset.as_numpy_iterator(), len(order))
    ]
    assert sorted(places) == list(range(len(order)))  # one epoch: each pair once
    assert all(place <= position + buffer - 1 for position, place in enumerate(places))
    assert (places == list(range(len(order)))) == (buffer == 1)


def test_a_stream_is_shuffled_afresh_each_epoch_by_the_seed(tmp_path, streamed, tokenizer):
    """Each pass over the file is every pair once, in an order of its own, and the seed fixes the orders."""
    path = write(tmp_path / "pairs.tsv", [f"{first} {second}\tx" for first in WORDS for second in WORDS])
    train = corpus_splits(path, held_out=1, sample_size=10, verbose=0)["train"]
    count = len(list(train))

    def orders(seed):
        dataset = make_dataset(train, tokenizer, tokenizer, batch_size=1, max_length=20, repeat=True, seed=seed)
        sources = [tuple(ids[ids != 0]) for (ids, _), _ in itertools.islice(dataset.as_numpy_iterator(), 2 * count)]
        return sources[:count], sources[count:]

    first, second = orders(seed=3)
    assert sorted(first) == sorted(second) and len(set(first)) == count  # every pair once a pass
    assert first != second
    assert orders(seed=3) == (first, second) and orders(seed=4)[0] != first


def test_a_bad_line_deep_in_a_stream_names_its_line(tmp_path, streamed):
    lines = corpus_lines(3000)
    lines[2500] = "no tab on this line"
    path = write(tmp_path / "pairs.tsv", lines)
    splits = corpus_splits(path, held_out=5, sample_size=50, verbose=0)  # the start is fine
    with pytest.raises(DataError, match="pairs.tsv, line 2501: no tab"):
        list(splits["train"])
    tiny = dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, source_vocab_size=60, target_vocab_size=60)
    config = TrainingConfig(**tiny, max_length=8, batch_size=16, epochs=1, jit_compile=False)
    with pytest.raises(DataError, match="line 2501: no tab; .* Fix it and run the same command again to resume"):
        train_translator(splits, tmp_path / "model", config, verbose=0)


@pytest.mark.slow  # moved from the default suite to keep it within 8 minutes
def test_kformer_train_streams_a_large_corpus_and_shows_the_time_left(tmp_path, streamed, capsys):
    data = write(tmp_path / "pairs.tsv.gz", corpus_lines(4000))
    out = tmp_path / "model"
    tiny = "--d-model 16 --num-heads 2 --num-layers 1 --d-ff 32 --vocab-size 60 --max-length 8 --batch-size 16"
    argv = f"train --data {data} --out {out} --minutes 0.1 --warmup-steps 10 --no-xla --held-out 30 {tiny}"
    assert main(argv.split()) == 0
    printed = capsys.readouterr().out
    assert "read as a stream" in printed and "Training a" in printed and "Saved the model directory" in printed
    assert " left " in printed and "Epoch 1/" not in printed
    assert "test split:" in printed and "(30 sentences," in printed


@pytest.mark.slow  # 30 s: a fresh training process
def test_a_budget_too_short_to_train_says_so_even_under_quiet(tmp_path, capsys):
    data = write(tmp_path / "pairs.tsv", corpus_lines(300))
    out = tmp_path / "model"
    tiny = "--d-model 16 --num-heads 2 --num-layers 1 --d-ff 32 --vocab-size 60 --max-length 8 --batch-size 16"
    assert main(f"--quiet train --data {data} --out {out} --minutes 0.001 --no-xla {tiny}".split()) == 0
    assert re.search(r"warning: only \d+ training steps ran in 0.001 minutes", capsys.readouterr().err)


def test_sigterm_saves_and_stops_training_like_ctrl_c(tmp_path):
    from kformer.training.callbacks import Backup, TrainingInterrupted

    class Preempt(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 3:
                os.kill(os.getpid(), signal.SIGTERM)

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    backup = Backup(tmp_path / "backup", every_steps=1000)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingInterrupted, match="interrupted at step 4;"), backup.guard_interrupts():
        model.fit(np.zeros((64, 2)), np.zeros((64, 1)), batch_size=1, callbacks=[Preempt(), backup], verbose=0)
    assert signal.getsignal(signal.SIGTERM) is before  # put back as it was


@pytest.mark.parametrize("count", [2, 3, 7])
def test_workers_of_a_text_file_read_only_their_part_of_its_bytes(tmp_path, streamed, count):
    lines = corpus_lines(600)
    path = write(tmp_path / "pairs.tsv", lines)
    train = corpus_splits(path, held_out=5, sample_size=10, verbose=0)["train"]
    everything = list(train)
    shares = [list(train.share(index, count)) for index in range(count)]
    assert sum(shares, []) == everything  # in file order, each pair once
    assert all(abs(len(share) - len(everything) / count) < 0.1 * len(everything) / count for share in shares)
    assert train.share(0, 1) is train
    # A bad line in the last part stops only the worker that reads it.
    lines[-3] = lines[-3].replace("\t", " ")  # the same bytes: the same parts
    train = corpus_splits(write(tmp_path / "pairs.tsv", lines), held_out=5, sample_size=10, verbose=0)["train"]
    assert [list(train.share(index, count)) for index in range(count - 1)] == shares[:-1]
    with pytest.raises(DataError, match=r"pairs.tsv \(its part from byte [\d,]+ to [\d,]+\), line \d+: no tab"):
        list(train.share(count - 1, count))


@pytest.mark.parametrize("end", ["\n", "\r\n"])
def test_a_line_on_a_part_boundary_is_read_once(tmp_path, end):
    from kformer.data.pairs import PairFile

    path = tmp_path / "pairs.tsv"
    path.write_bytes(end.join(["a\tA", "bb\tBB", "c\tC", ""]).encode())
    corpus = PairFile(path)
    for count in range(1, 20):  # parts ending before, on and after each line's first and last byte
        parts = [list(corpus.part(index, count)) for index in range(count)]
        assert sum(parts, []) == [("a", "A"), ("bb", "BB"), ("c", "C")], count


def test_a_file_with_old_mac_line_ends_is_shared_pair_by_pair_and_a_changed_file_refused(tmp_path):
    from kformer.data.pairs import PairFile

    path = tmp_path / "pairs.tsv"
    path.write_bytes("\r".join(corpus_lines(20_000)).encode())  # over 64 KiB without a "\n"
    assert PairFile(path).part(1, 2) is None  # readline would see one line: every-n-th instead
    old_mac = "\r".join(corpus_lines(3000)).encode()
    assert 2**16 < len(old_mac) < 2**17  # over 64 KiB: shared pair by pair
    path.write_bytes(old_mac)
    assert PairFile(path).part(1, 2) is None
    path.write_bytes(old_mac + b"\n" + "\n".join(corpus_lines(3000)).encode())  # the first 64 KiB decide
    assert PairFile(path).part(1, 2) is None
    path.write_bytes(("a long first line, longer than 32 bytes\tA\n" + "\n".join(corpus_lines(5000))).encode())
    assert path.stat().st_size > 2**16 and PairFile(path).part(1, 2) is not None  # "\n" line ends: entered midway
    path = write(tmp_path / "pairs.tsv", corpus_lines(100))
    part = PairFile(path).part(1, 2)
    with open(path, "a") as file:
        file.write("late\tTARDE\n")
    with pytest.raises(DataError, match=r"pairs.tsv: changed size while training read it in parts"):
        list(part)


@pytest.mark.parametrize("name", ["pairs.tsv.gz", "aligned"])
def test_workers_share_a_file_that_cannot_be_entered_midway_pair_by_pair(tmp_path, streamed, name):
    path = corpus_file(tmp_path, name, corpus_lines(500))
    train = corpus_splits(path, held_out=5, sample_size=10, verbose=0)["train"]
    everything = list(train)
    first, second = list(train.share(0, 2)), list(train.share(1, 2))
    assert first == everything[0::2] and second == everything[1::2]


def test_each_worker_trains_on_its_own_share_of_the_pairs(tokenizer):
    import tensorflow as tf

    from kformer.data.stream import InMemoryPairs
    from kformer.training.jobs import _training_data

    pairs = InMemoryPairs((f"{first} {second}", "x") for first in WORDS for second in WORDS)
    config = TrainingConfig(batch_size=8, max_length=20, shuffle_buffer=1)  # a buffer of one: in order
    shares = _training_data(pairs, tokenizer, tokenizer, config)
    for index in (0, 1):
        context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=index, num_replicas_in_sync=2)
        (sources, _), _ = next(iter(shares(context)))
        expected = tokenizer.tokenize([source for source, _ in pairs[index::2][:4]]).to_tensor().numpy()
        assert sources.shape[0] == 4  # the replica's half of the batch
        np.testing.assert_array_equal(sources.numpy()[:, : expected.shape[1]], expected)


def test_a_compressed_file_is_sized_by_the_text_it_holds(tmp_path):
    from kformer.data.pairs import PairFile

    lines = corpus_lines(3000)
    text = len(("\n".join(lines) + "\n").encode())
    packed = PairFile(write(tmp_path / "pairs.tsv.gz", lines))
    assert packed.text_size == text > 3 * packed.size  # what decides between memory and a stream


MAPPED_WHILE_A_24_MB_BLOCK_LIVES = """
    import ctypes
    import gc
    import kformer.data.pipeline
    from kformer.data import stream
    from kformer.data.text import Tokenizer, build_vocabulary

    if {disabled}:
        kformer.data.pipeline.reuse_freed_memory = lambda: None
    stream.STREAM_ABOVE_BYTES = 0
    train = stream.corpus_splits("pairs.tsv", sample_size=50, verbose=0)["train"]
    tokenizer = Tokenizer(build_vocabulary(["the cat sees a dog"], 30))
    batches = iter(kformer.data.pipeline.make_dataset(train, tokenizer, tokenizer, repeat=True))
    next(batches)
    del batches  # its threads stop: only this code allocates below
    gc.collect()

    class MallInfo2(ctypes.Structure):
        names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
        _fields_ = [(name, ctypes.c_size_t) for name in names.split()]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype, libc.malloc.restype = MallInfo2, ctypes.c_void_p
    libc.malloc.argtypes, libc.free.argtypes = [ctypes.c_size_t], [ctypes.c_void_p]
    for _ in range(3):  # glibc's own rule maps the first block only, then keeps blocks this size for reuse
        block = libc.malloc(24 * 2**20)  # larger than any block freed before: glibc maps it at first
        mapped, heap = libc.mallinfo2().hblkhd, libc.mallinfo2().arena  # bytes in own mappings, in the heap
        libc.free(block)
    print(mapped - libc.mallinfo2().hblkhd, heap - libc.mallinfo2().arena)  # a block mapped; the heap trimmed
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc 2.33+ only"
)
def test_a_stream_leaves_freed_blocks_for_reuse_as_the_in_memory_path_does(tmp_path):
    """After TensorFlow's generator dataset has set glibc's malloc thresholds (its log names the trim threshold;
    the mmap threshold stays at about 128 KB after it), every larger block a training step allocates would be
    mapped and unmapped afresh (10-15% of a step's CPU, in page faults). `reuse_freed_memory` puts the
    thresholds where glibc's own rule takes them."""
    write(tmp_path / "pairs.tsv", corpus_lines(200))
    mapped, trimmed = {}, {}
    for disabled in (True, False):
        printed = run_fresh_python(MAPPED_WHILE_A_24_MB_BLOCK_LIVES.format(disabled=disabled), tmp_path).split()
        mapped[disabled], trimmed[disabled] = int(printed[-2]), int(printed[-1])
    if mapped[True] == 0:
        pytest.skip("this TensorFlow's generator dataset leaves glibc's thresholds alone: nothing to undo")
    assert mapped[True] >= 24 * 2**20  # without it, the block has a mapping of its own
    # With it, the heap keeps the block for the next (other threads' blocks may come and go meanwhile).
    assert mapped[False] < 24 * 2**20 and trimmed[False] < 2**20


def test_a_mixture_of_a_streamed_corpus_and_one_in_memory_makes_batches_of_both(tmp_path, streamed, tokenizer):
    """A corpus over 64 MB (a stream) mixed with one in memory (`--data A B --weights 1 3`): counted and batched."""
    from kformer.data.stream import Mixture

    path = write(tmp_path / "a.tsv", corpus_lines(600))
    streamed_part = corpus_splits(path, held_out=5, sample_size=100, verbose=0)["train"]
    listed = [(source.upper(), target.lower()) for source, target in streamed_part.sample]  # upper-case sources
    mixture = Mixture([streamed_part, listed], [1, 3])
    assert mixture.estimated_pairs == streamed_part.estimated_pairs + 100  # the stream's is estimated from its start
    assert streamed_part.estimated_pairs == pytest.approx(len(list(streamed_part)), rel=0.05)
    dataset = make_dataset(mixture, tokenizer, tokenizer, batch_size=8, max_length=40, repeat=True)
    upper = set(tokenizer.tokenize([word.upper() for word in WORDS]).flat_values.numpy().tolist())
    firsts = [int(sources[row, 0]) for (sources, _), _ in itertools.islice(dataset.as_numpy_iterator(), 20)
              for row in range(len(sources))]  # fmt: skip
    assert 0.6 < np.mean([token in upper for token in firsts]) < 0.9  # 3 in 4 from the second, 160 draws
    # At most 8 pairs a batch: an epoch of the mixture's estimated pairs is at least that many batches.
    assert batches_per_epoch(mixture, tokenizer, tokenizer, max_length=40, batch_size=8) >= mixture.estimated_pairs / 8


def test_a_mixtures_parts_are_shared_among_workers_part_by_part_and_a_bad_line_in_one_is_its_error(tmp_path, streamed):
    from kformer.data.stream import Mixture

    lines = corpus_lines(600)
    streamed_part = corpus_splits(write(tmp_path / "pairs.tsv", lines), held_out=5, sample_size=10, verbose=0)["train"]
    listed = [("a b", "A B"), ("c", "C"), ("d", "D"), ("e", "E"), ("f", "F")]
    everything, listed_before = list(streamed_part), list(listed)
    mixture = Mixture([streamed_part, listed], [2, 1])
    assert mixture.share(0, 1) is mixture and mixture.weights == [2.0, 1.0]
    assert mixture.estimated_pairs == streamed_part.estimated_pairs + 5
    shares = [mixture.share(index, 2) for index in (0, 1)]
    for index, share in enumerate(shares):
        assert share.weights == [2.0, 1.0] and share.sample == mixture.sample  # the vocabularies' sample is whole
        assert share.parts[1] == listed[index::2]  # a list's every second pair from the index-th
    first, second = (list(share.parts[0]) for share in shares)  # a stream's own shares: each pair once
    assert first and second and sorted(first + second) == sorted(everything) and len(first + second) == len(everything)
    assert list(mixture.parts[0]) == everything and mixture.parts[1] == listed == listed_before  # untouched
    with pytest.raises(TypeError, match=r"^a Mixture is read through make_dataset \(its parts by weight\), not pair"):
        iter(mixture)
    assert mixture.error is None
    lines[-3] = lines[-3].replace("\t", " ")
    bad = corpus_splits(write(tmp_path / "bad.tsv", lines), held_out=5, sample_size=10, verbose=0)["train"]
    mixture = Mixture([listed, bad], [1, 1])
    with pytest.raises(DataError, match=r"bad.tsv, line \d+: no tab"):
        list(bad)
    assert mixture.error is bad.error and mixture.error is not None  # what the job names after its run stops


def test_a_mixtures_sample_draws_the_parts_in_order_by_weight_going_round_a_small_one():
    from kformer.data.stream import Mixture

    small, large = [("p", "P"), ("q", "Q")], [(f"w{i}", f"W{i}") for i in range(20)]
    mixture = Mixture([small, large], [10, 1])
    assert len(mixture.sample) == 22
    drawn_small = [pair for pair in mixture.sample if pair in small]
    assert drawn_small == [small[i % 2] for i in range(len(drawn_small))] and len(drawn_small) > 11  # round and round
    drawn_large = [pair for pair in mixture.sample if pair in large]
    assert drawn_large == large[: len(drawn_large)]
    assert Mixture([small, large], [10, 1], seed=1).sample != mixture.sample
    assert Mixture([small, large], [10, 1], seed=0).sample == mixture.sample
    with pytest.raises(DataError, match=r"^corpus 2 of the mixture has no training pairs; give it more pairs\.$"):
        Mixture([small, []], [1, 1])


def test_pairs_in_memory_read_as_a_stream_reads_and_a_worker_takes_every_count_th():
    from kformer.data.stream import InMemoryPairs, training_pairs

    pairs = [(f"s{i}", f"t{i}") for i in range(10)]
    held = training_pairs(pairs, "splits['train']")
    assert isinstance(held, InMemoryPairs) and held == pairs and held.sample is held
    assert (held.estimated_pairs, held.approximate, held.error) == (10, False, None)
    assert held.share(0, 1) is held
    share = held.share(1, 3)
    assert isinstance(share, InMemoryPairs) and share == pairs[1::3] and share.estimated_pairs == 3
    with pytest.raises(DataError, match=r"^splits\['train'\] must be a list of \(source, target\) string pairs"):
        training_pairs("s0\tt0", "splits['train']")


def test_reading_a_streams_start_says_what_it_reads_how_far_it_has_got_and_what_it_found(
    tmp_path, streamed, capsys, monkeypatch
):
    """On a clock that ticks a second each reading: the first line, a progress line each time more than 10 s
    have passed (every 11 pairs here), and the last line, for a start read in part and a file read to its end."""
    import types

    path = write(tmp_path / "pairs.tsv", corpus_lines(60_000))
    size, pairs = path.stat().st_size, read_pairs(path)
    assert 1.5 * 2**20 < size < 2.5 * 2**20  # "2 MB": a conversion to MB that is off shows
    readings = []

    def tick():
        readings.append(1000 + len(readings))
        return readings[-1]

    monkeypatch.setattr(stream, "time", types.SimpleNamespace(perf_counter=tick))
    for sample_size, held_out in [(100, 20), (10**6, 10**6)]:
        readings.clear()
        splits = corpus_splits(path, held_out=held_out, sample_size=sample_size)
        first, *progress, last = capsys.readouterr().out.splitlines()
        assert first == (
            f"{path}: 2 MB, read as a stream. Reading its start: the first {sample_size:,} training pairs and "
            f"{held_out:,} validation and test pairs ..."
        )
        counted = [int(line.split()[0].replace(",", "")) for line in progress]
        shares = [int(re.fullmatch(r"  [\d,]+ pairs, (\d+)% of the file \.\.\.", line)[1]) for line in progress]
        assert shares == sorted(shares) and 0 < shares[-1] <= 100
        if sample_size == 100:  # stopped at the pair that filled the last of the three splits
            names = [split_of(source) for source, _ in pairs]
            where = {split: [i for i, name in enumerate(names) if name == split] for split in set(names)}
            read = max(where["train"][99], where["valid"][19], where["test"][19]) + 1
            assert pairs[read - 1] in splits["train"].sample + splits["valid"] + splits["test"]
            found = re.fullmatch(
                r"Read ([\d,]+) pairs \(0 MB\) in (\d+) s; about ([\d,]+) training pairs in all\.", last
            )
            assert int(found[3].replace(",", "")) == pytest.approx(len(split_pairs(pairs)["train"]), rel=0.1)
        else:
            read = len(pairs)
            found = re.fullmatch(r"Read ([\d,]+) pairs \(2 MB\) in (\d+) s; ([\d,]+) training pairs in all\.", last)
            assert int(found[3].replace(",", "")) == len(split_pairs(pairs)["train"])
        assert counted == list(range(11, read, 11)) and shares[-1] < 100 * read / len(pairs) + 10
        assert int(found[1].replace(",", "")) == read and int(found[2]) == readings[-1] - 1000
    assert corpus_splits(path, held_out=5, sample_size=10, verbose=0) and capsys.readouterr().out == ""
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: holds no training pairs; give more sentence pairs"):
        corpus_splits(path, held_out=5, sample_size=10, valid_fraction=0.5, test_fraction=0.5, verbose=0)


def test_a_stream_is_read_in_chunks_of_1024_pairs_by_default(tmp_path, streamed):
    train = corpus_splits(write(tmp_path / "pairs.tsv", corpus_lines(3000)), 10, held_out=5, verbose=0)["train"]
    everything = list(train)
    assert [len(chunk) for chunk in train.chunks()] == [1024, 1024, len(everything) - 2048]
    assert sum(train.chunks(size=1000), []) == everything and len(next(train.chunks(size=7))) == 7
