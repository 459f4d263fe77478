"""Pair files, splits, and the teacher-forcing tf.data pipeline."""

import re
import zipfile

import numpy as np
import pytest
import tensorflow as tf

from kformer.data.pairs import DataError, PairFile, check_pairs, read_lines, read_pairs, split_of, split_pairs
from kformer.data.pipeline import (
    batches_per_epoch,
    bucket_batch_sizes,
    bucket_boundaries,
    make_dataset,
    pair_lengths,
    teacher_forcing,
)
from kformer.data.text import END_ID, START_ID, Tokenizer


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def test_reads_tab_separated_pairs_and_ignores_attribution(tmp_path):
    path = write(tmp_path, "pairs.txt", "Go.\tVe.\tCC-BY 2.0 (France) Attribution: tatoeba.org\n\nHi.\tHola.\n")
    assert read_pairs(path) == [("Go.", "Ve."), ("Hi.", "Hola.")]


def test_reads_the_published_zip_and_skips_its_metadata(tmp_path):
    path = tmp_path / "spa-eng.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("spa-eng/_about.txt", "About this file: no tabs here, and longer than the data. " * 20)
        archive.writestr("spa-eng/spa.txt", "Run!\t¡Corre!\n")
    assert read_pairs(path) == [("Run!", "¡Corre!")]


def test_text_is_nfc_normalised(tmp_path):
    path = write(tmp_path, "pairs.tsv", "coffee\tcafe\u0301\n")
    assert read_pairs(path) == [("coffee", "caf\u00e9")]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("missing.txt", None, "missing.txt: no such file"),
        ("empty.txt", "", "empty.txt: holds no sentence pairs"),
        ("latin1.txt", "Hi.\tHola.\nNo.\tNi\xf1o.\n".encode("latin-1"), "latin1.txt, line 2: not UTF-8"),
        ("notab.txt", "Hi.\tHola.\nHello there\n", "notab.txt, line 2: no tab"),
        ("emptyside.txt", "Hi.\tHola.\n\t¡Corre!\n", "emptyside.txt, line 2: the source side is empty"),
        ("notarget.txt", "Hi.\tHola.\nRun!\t \tCC-BY\n", r"notarget.txt, line 2: the target side is empty\.$"),
        ("broken.zip", b"PK not an archive", r"broken.zip: not a readable .zip archive\.$"),
    ],
)
def test_bad_files_get_one_clear_message(tmp_path, name, content, message):
    path = tmp_path / name if content is None else write(tmp_path, name, content)
    with pytest.raises(DataError, match=message):
        read_pairs(path)


def test_crlf_bom_blank_lines_extra_fields_and_duplicates_are_read_and_counted(tmp_path, capsys):
    text = "\ufeffGo.\tVe.\r\n\r\n   \r\nGo.\tVe.\tCC-BY 2.0\r\nHi.\tHola.\tCC-BY\textra\r\n"
    path = write(tmp_path, "windows.txt", text)
    assert read_pairs(path, verbose=1) == [("Go.", "Ve."), ("Go.", "Ve."), ("Hi.", "Hola.")]
    assert (
        "Read 3 pairs from" in (said := capsys.readouterr().out)
        and "(2 blank lines skipped, 1 duplicate pairs kept, fields after the second tab ignored on 2 lines)" in said
    )


def test_aligned_files_count_what_they_skip(tmp_path, capsys):
    english = write_lines(tmp_path / "d.en", ["one", "", "one", " "])
    spanish = write_lines(tmp_path / "d.es", ["uno", "", "uno", ""])
    assert read_pairs(f"{english},{spanish}", verbose=1) == [("one", "uno"), ("one", "uno")]
    assert f"Read 2 pairs from {english} and {spanish} (2 blank lines skipped, 1 duplicate pairs kept).\n" == (
        capsys.readouterr().out
    )
    assert read_pairs(f"{english},{spanish}") and capsys.readouterr().out == ""  # quiet unless asked
    empty = PairFile(f"{write(tmp_path, 'e.en', b'')},{write(tmp_path, 'e.es', b'')}")
    assert list(empty) == [] and empty.lines == 0


def test_check_pairs_names_what_is_not_a_list_of_string_pairs():
    assert check_pairs([["a", "b"], ("c", "d")]) == [("a", "b"), ("c", "d")]
    not_a_list = r"^pairs must be a list of \(source, target\) string pairs, not a "
    item = r"^pairs: item {} is not a \(source, target\) pair of strings: ".format
    for pairs, message in [
        ("a\tb", not_a_list + r"str\.$"),
        ({"a": "b"}, not_a_list + r"dict\.$"),
        ([("a", "b"), ("a", "b", "c")], item(1) + r"\('a', 'b', 'c'\)\.$"),
        ([("a", "b"), ("a", 3)], item(1) + r"\('a', 3\)\.$"),
        ([7], item(0) + r"7\.$"),
        ([{"a", "b"}], item(0)),
    ]:
        with pytest.raises(DataError, match=message):
            check_pairs(pairs)
    with pytest.raises(DataError, match=rf"^valid: item 0 is not a \(source, target\) pair of strings: '{'a' * 59}\.$"):
        check_pairs(["a" * 100], "valid")  # shown up to 60 characters


def test_a_directory_is_not_a_pair_file(tmp_path):
    with pytest.raises(DataError, match=f"{tmp_path}: is a directory; give a .txt, .tsv, .gz or .zip file"):
        read_pairs(tmp_path)


def test_a_zip_made_on_a_mac_reads_its_one_text_file(tmp_path):
    path = tmp_path / "pairs.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("__MACOSX/pairs/._spa.txt", b"\x00\x05\x16\x07 resource fork, not text" * 50)
        archive.writestr("pairs/._spa.txt", b"\x00\x05\x16\x07" * 200)
        archive.writestr("pairs/_about.txt", "About this file. " * 100)
        archive.writestr("__MACOSX/spa.txt", "Walk!\tCamina!\n")  # anything under __MACOSX is the Mac's
        archive.writestr("pairs/spa.txt", "Run!\t¡Corre!\n")
    assert read_pairs(path) == [("Run!", "¡Corre!")]


def test_a_zip_holding_a_tsv_file_reads_it_whatever_the_case_of_its_name(tmp_path):
    path = tmp_path / "pairs.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("README", "no pairs here")
        archive.writestr("PAIRS.TSV", "Run!\t¡Corre!\n")
    assert read_pairs(path) == [("Run!", "¡Corre!")]


def test_a_language_models_text_file_is_its_non_empty_lines_stripped(tmp_path):
    path = write(tmp_path, "text.txt", "\ufeff  el gato come.  \n\n   \r\nla casa\r\n")
    assert read_lines(path) == ["el gato come.", "la casa"]  # the byte-order mark dropped, as from a pair file


@pytest.mark.parametrize(
    "content, message",
    [
        (None, r"text.txt: no such file; give a UTF-8 text file, one passage a line\.$"),
        ("Ni\xf1o\n".encode("latin-1"), r"text.txt: not UTF-8 text; re-save the file as UTF-8\.$"),
        (" \n\n", r"text.txt: holds no text\.$"),
    ],
)
def test_a_bad_text_file_gets_one_clear_message(tmp_path, content, message):
    path = tmp_path / "text.txt" if content is None else write(tmp_path, "text.txt", content)
    with pytest.raises(DataError, match=message):
        read_lines(path)
    with pytest.raises(DataError, match=f"^{re.escape(str(tmp_path))}: no such file"):
        read_lines(tmp_path)  # a directory is not a text file


def test_a_zip_with_several_text_files_names_them(tmp_path):
    path = tmp_path / "two.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("spa.txt", "Run!\t¡Corre!\n")
        archive.writestr("fra.txt", "Run!\tCours !\n")
    with pytest.raises(DataError, match=r"two.zip: the archive holds 2 text files \(fra.txt, spa.txt\); unpack it"):
        read_pairs(path)


def test_a_latin1_file_inside_a_zip_names_the_line(tmp_path):
    path = tmp_path / "old.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("spa.txt", "Hi.\tHola.\n\nBoy.\tNi\xf1o.\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"old.zip:spa.txt, line 3: not UTF-8 text; re-save the file as UTF-8"):
        read_pairs(path)


def test_zip_without_a_text_file(tmp_path):
    path = tmp_path / "nothing.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.md", "nothing here")
    with pytest.raises(DataError, match="holds no .txt or .tsv file"):
        read_pairs(path)


def test_split_is_deterministic_and_keeps_each_source_on_one_side():
    pairs = [(f"sentence {i % 300}", f"frase {i}") for i in range(1200)]
    splits = split_pairs(pairs, valid_fraction=0.1, test_fraction=0.1)
    shuffled = split_pairs(list(reversed(pairs)), valid_fraction=0.1, test_fraction=0.1)
    assert {name: set(split) for name, split in splits.items()} == {name: set(s) for name, s in shuffled.items()}
    sides = {name: {source for source, _ in split} for name, split in splits.items()}
    assert not sides["train"] & sides["test"] and not sides["train"] & sides["valid"]
    assert sum(len(split) for split in splits.values()) == 1200
    assert 0.05 < len(splits["test"]) / 1200 < 0.15
    salted = split_pairs(pairs, valid_fraction=0.1, test_fraction=0.1, salt="another")  # another split altogether
    assert salted["test"] != splits["test"]
    assert all(split_of(source, 0.1, 0.1, "another") == name for name in salted for source, _ in salted[name])


def test_the_default_split_holds_out_2_percent_for_validation_and_2_for_test():
    """What `kformer train --data FILE` does (README): 2% and 2% of the unique source sentences."""
    pairs = [(f"sentence {i}", f"frase {i}") for i in range(40_000)]
    sizes = {name: len(split) / len(pairs) for name, split in split_pairs(pairs).items()}
    assert sizes["valid"] == pytest.approx(0.02, abs=0.003) and sizes["test"] == pytest.approx(0.02, abs=0.003)
    # split_of's own defaults, which a language model's held-out lines go by (`kformer train --task lm --data`)
    alone = [split_of(source) for source, _ in pairs]
    assert alone.count("valid") / len(pairs) == sizes["valid"] and alone.count("test") / len(pairs) == sizes["test"]


def test_teacher_forcing_shifts_the_target_by_one():
    (source, decoder_tokens), labels = teacher_forcing(tf.constant([7, 8, 9]), tf.constant([4, 5, 6]))
    np.testing.assert_array_equal(source, [7, 8, 9])
    np.testing.assert_array_equal(decoder_tokens, [START_ID, 4, 5, 6])
    np.testing.assert_array_equal(labels, [4, 5, 6, END_ID])


def test_pairs_too_long_are_left_out_whole_never_cut_before_an_end():
    words = "a b c d e f g h".split()
    tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", *words])
    pairs = [("a b", "c d e"), ("a b c d e f", "a b"), ("a b", "a b c d e"), ("a b c d e", "b"), ("a", "a c d e")]
    pairs += [("c", "d")]
    # max_length 5: a source of up to 5 tokens, a target of up to 4 (with [END], 5).
    dataset = make_dataset(pairs, tokenizer, tokenizer, batch_size=8, max_length=5, shuffle=False)
    targets = sorted(
        tuple(row[row > 0].tolist()) for (_, decoder_tokens), _ in dataset for row in decoder_tokens.numpy()
    )
    # Left out: a source of 6 tokens, a target of 5 (no room for [END]); kept: 5 and 4, exactly at the limit.
    assert targets == [(START_ID, 4, 6, 7, 8), (START_ID, 5), (START_ID, 6, 7, 8), (START_ID, 7)]
    assert batches_per_epoch(pairs, tokenizer, tokenizer, 8, 5) == 1
    with pytest.raises(DataError, match=r"none of the 6 sentence pairs fits max_length=1 tokens a side"):
        make_dataset(pairs, tokenizer, tokenizer, max_length=1)


def test_a_language_models_lines_are_read_as_text_decoder_side_only():
    """No source tokenizer: each line is [START] + its tokens -> its tokens + [END], batched by its own length;
    a line with no room for [END] is left out, as a pair's target is."""
    words = "a b c d e f g h".split()
    tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", *words])
    lines = ["a b", "c d e f", "h", "a b c d e f g h a b c", "a b c d e f g h a b c d"]  # 2, 4, 1, 11, 12 tokens
    batches = list(make_dataset(lines, None, tokenizer, batch_size=8, max_length=12, shuffle=False))
    assert all(isinstance(inputs, tf.Tensor) for inputs, _ in batches)  # no encoder side at all
    rows = {
        tuple(row[row > 0].tolist()): (tuple(label[label > 0].tolist()), len(row))
        for inputs, labels in batches
        for row, label in zip(inputs.numpy(), labels.numpy(), strict=True)
    }
    ids = {word: index for index, word in enumerate(tokenizer.vocabulary)}
    expected = {}
    for line in lines[:4]:  # 12 tokens leave no room for [END] in 12
        tokens = [ids[word] for word in line.split()]
        width = 8 if len(tokens) + 1 < 9 else 16  # padded to just below the bucket edge above it (9, 17)
        expected[(START_ID, *tokens)] = ((*tokens, END_ID), width)
    assert rows == expected
    assert pair_lengths(lines, None, tokenizer)[0].tolist() == [0] * 5
    assert batches_per_epoch(lines, None, tokenizer, 8, 12) == len(batches) == 2
    with pytest.raises(DataError, match=r"^none of the 5 lines fits max_length=1 tokens"):
        make_dataset(lines, None, tokenizer, max_length=1)


def test_batches_are_padded_with_zeros_to_their_bucket_edge():
    vocabulary = ["[PAD]", "[UNK]", "[START]", "[END]", "a", "b", "c"]
    tokenizer = Tokenizer(vocabulary)
    pairs = [("a", "b"), ("a b c", "c b"), ("a " * 11, "b " * 3)]
    batches = list(
        make_dataset(pairs, tokenizer, tokenizer, batch_size=8, max_length=20, shuffle=False, bucket_width=4)
    )
    shapes = sorted((inputs[0].shape[1], inputs[1].shape[1], labels.shape[1]) for inputs, labels in batches)
    assert shapes == [(4, 4, 4), (12, 12, 12)]
    (encoder_tokens, decoder_tokens), labels = min(batches, key=lambda batch: batch[0][0].shape[1])
    order = np.argsort(encoder_tokens.numpy()[:, 1])  # "a" alone first
    np.testing.assert_array_equal(encoder_tokens.numpy()[order], [[4, 0, 0, 0], [4, 5, 6, 0]])
    np.testing.assert_array_equal(decoder_tokens.numpy()[order], [[START_ID, 5, 0, 0], [START_ID, 6, 5, 0]])
    np.testing.assert_array_equal(labels.numpy()[order], [[5, END_ID, 0, 0], [6, 5, END_ID, 0]])


def test_batches_per_epoch_counts_with_make_datasets_own_defaults():
    """Both default to 64 sentences a batch and 40 tokens a side: 65 short pairs make two batches, and a pair of
    40 words a side (41 target tokens with [END]) is left out."""
    words = "a b c d e f g h".split()
    tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", *words])
    pairs = [("a b c", "d e f")] * 65 + [(" ".join(["a"] * 40), " ".join(["b"] * 40))]
    assert batches_per_epoch(pairs, tokenizer, tokenizer) == len(list(make_dataset(pairs, tokenizer, tokenizer))) == 2


@pytest.mark.parametrize("batch_tokens", [None, 100, 333])
def test_token_batches_fill_a_token_count_in_every_bucket(batch_tokens):
    """--batch-tokens: a batch is as many sentences as fit the count at its bucket's padded width, every pair once."""
    words = "a b c d e f g h i j".split()
    tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", *words])
    pair_rng = np.random.default_rng(5)
    pairs = [  # lengths 1-44 (some past max_length), the target up to two words shorter
        (" ".join(pair_rng.choice(words, n)), " ".join(pair_rng.choice(words, max(n - d, 1))))
        for n, d in zip(pair_rng.integers(1, 45, size=700), pair_rng.integers(0, 3, size=700), strict=True)
    ]
    dataset = make_dataset(pairs, tokenizer, tokenizer, batch_size=16, max_length=40, batch_tokens=batch_tokens)
    batches = [(inputs[0].numpy(), labels.numpy()) for inputs, labels in dataset]
    whole = [(s, t) for s, t in pairs if len(s.split()) <= 40 and len(t.split()) + 1 <= 40]  # a word a token
    assert 0 < len(whole) < len(pairs) and sum(len(source) for source, _ in batches) == len(whole)
    sizes = {}  # padded width -> sentences in its batches
    for source, labels in batches:
        width = source.shape[1]
        assert width == labels.shape[1] and width in (8, 16, 24, 32, 40)
        assert len(source) <= (batch_tokens // width if batch_tokens else 16)
        sizes.setdefault(width, []).append(len(source))
    for width, counts in sizes.items():
        full = batch_tokens // width if batch_tokens else 16
        assert counts.count(full) >= len(counts) - 1  # only a bucket's last batch is short
    assert batches_per_epoch(pairs, tokenizer, tokenizer, 16, 40, batch_tokens) == len(batches)
    if batch_tokens:
        assert max(sizes[8]) > 3 * max(sizes[40])  # short sentences come in bigger batches


def write_lines(path, lines, encoding="utf-8", ending="\n"):
    path.write_bytes(ending.join(lines).encode(encoding) + ending.encode())
    return path


def test_two_aligned_files_are_read_as_pairs(tmp_path):
    english = write_lines(tmp_path / "train.en", ["\ufeffthe cat", "", "the dogs run"], ending="\r\n")
    spanish = write_lines(tmp_path / "train.es", ["el gato", "", "los perros corren"])
    assert read_pairs(f"{english},{spanish}") == [("the cat", "el gato"), ("the dogs run", "los perros corren")]
    commas = write_lines(tmp_path / "train,v2.es", ["el gato", "", "los perros corren"])  # a comma in the second name
    assert read_pairs(f"{english},{commas}") == read_pairs(f"{english},{spanish}")


def test_files_of_different_lengths_get_both_counts(tmp_path):
    english = write_lines(tmp_path / "a.en", ["one", "two", "three", "four"])
    spanish = write_lines(tmp_path / "a.es", ["uno", "dos"])
    with pytest.raises(DataError, match=r"a.en has 4 lines but .*a.es has 2; the two files must be aligned"):
        read_pairs(f"{english},{spanish}")
    with pytest.raises(DataError, match=r"a.es has 2 lines but .*a.en has 4"):
        read_pairs(f"{spanish},{english}")


def test_aligned_files_name_a_bad_line(tmp_path):
    english = write_lines(tmp_path / "b.en", ["one", "two"])
    latin1 = write_lines(tmp_path / "b.es", ["uno", "años"], encoding="latin-1")
    with pytest.raises(DataError, match=r"b.es, line 2: not UTF-8 text"):
        read_pairs(f"{english},{latin1}")
    one_sided = write_lines(tmp_path / "c.es", ["uno", ""])
    with pytest.raises(DataError, match=r"c.es, line 2: empty, but the other file's line 2 is not"):
        read_pairs(f"{english},{one_sided}")
    with pytest.raises(DataError, match="missing.es: no such file"):
        read_pairs(f"{english},{tmp_path / 'missing.es'}")


def test_old_mac_line_ends_are_line_ends(tmp_path):
    assert read_pairs(write(tmp_path, "mac.txt", "Go.\tVe.\rHi.\tHola.\r")) == [("Go.", "Ve."), ("Hi.", "Hola.")]


def test_a_damaged_gz_is_one_clear_message(tmp_path):
    import gzip

    packed = bytearray(gzip.compress(("Go.\tVe.\n" * 5000).encode()))
    packed[len(packed) // 2 : len(packed) // 2 + 8] = b"\xff" * 8
    with pytest.raises(DataError, match="pairs.tsv.gz: cannot be read to its end"):
        read_pairs(write(tmp_path, "pairs.tsv.gz", bytes(packed)))


def epoch_orders(pairs, tokenizer, epochs=2, **settings):
    """The order in which a repeated dataset of one-token pairs gives their sources, one list an epoch."""
    dataset = make_dataset(pairs, tokenizer, tokenizer, batch_size=1, max_length=8, repeat=True, **settings)
    sources = [int(inputs[0][0, 0]) for inputs, _ in dataset.take(epochs * len(pairs))]
    return [sources[i * len(pairs) : (i + 1) * len(pairs)] for i in range(epochs)]


def test_training_batches_are_shuffled_afresh_each_epoch_by_the_seed():
    """Each epoch is every pair once, in an order of its own; the same seed gives the same orders, another
    seed others; shuffle=False keeps the file's order (what validation uses)."""
    words = [f"w{i}" for i in range(40)]
    tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", *words])
    pairs = [(word, word) for word in words]
    in_order = [tokenizer.vocabulary.index(word) for word in words]
    first, second = epoch_orders(pairs, tokenizer, seed=3)
    assert sorted(first) == sorted(second) == in_order  # every pair once an epoch
    assert first != in_order and second != in_order and first != second
    assert epoch_orders(pairs, tokenizer, seed=3) == [first, second]
    assert epoch_orders(pairs, tokenizer, seed=4)[0] != first
    assert epoch_orders(pairs, tokenizer, shuffle=False) == [in_order, in_order]


@pytest.mark.parametrize("width", [1, 4, 8])
def test_bucket_edges_cover_every_length_up_to_the_limit_with_the_fewest_buckets(width):
    """An example of length n goes to the first edge above n: the edges step by `width` from width + 1, the last
    lies past `max_length` (so every example fits one), and no edge beyond it is needed."""
    for max_length in range(1, 50):
        edges = bucket_boundaries(max_length, width)
        assert edges == list(range(width + 1, edges[-1] + 1, width))
        assert edges[-1] > max_length >= edges[-1] - width


def test_a_batch_holds_at_least_one_sentence_and_64_unless_told():
    """Token batches: as many sentences as fit the count at each bucket's width, but one when even one does
    not fit; without a token count, 64 sentences a bucket (the paper's recipe scaled to a small machine)."""
    assert bucket_batch_sizes([9, 17]) == [64, 64, 64]
    assert bucket_batch_sizes([9, 17], batch_size=5) == [5, 5, 5]
    assert bucket_batch_sizes([9, 17], batch_tokens=10) == [1, 1, 1]  # 10 // 8 = 1, 10 // 16 = 0 -> 1
    assert bucket_batch_sizes([9, 17], batch_tokens=40) == [5, 2, 2]


def test_make_datasets_defaults_are_64_a_batch_a_40_token_limit_seed_0_and_one_pass():
    """The defaults the Python API documents: 64 sentences a batch, pairs of up to 40 tokens a side (41 left out),
    shuffled by seed 0, one pass (a counted epoch, not repeated)."""
    words = [f"w{i}" for i in range(130)]
    tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", *words])
    pairs = [(word, word) for word in words]
    pairs += [(" ".join(words[:40]), "w0"), (" ".join(words[:41]), "w1")]  # 40 source tokens kept, 41 left out
    dataset = make_dataset(pairs, tokenizer, tokenizer)
    assert dataset.cardinality() == 4  # 130 one-token pairs as 64 + 64 + 2, and the 40-token pair alone
    sizes = sorted(len(labels) for _, labels in dataset)
    assert sizes == [1, 2, 64, 64]

    def first_epoch(**seed):  # each pass over a dataset is shuffled afresh: compare first passes
        return [inputs[0][:, 0].numpy().tolist() for inputs, _ in make_dataset(pairs, tokenizer, tokenizer, **seed)]

    assert first_epoch() == first_epoch(seed=0) != first_epoch(seed=1)


def test_nothing_to_make_a_dataset_from_is_one_whole_sentence():
    tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", "a"])
    with pytest.raises(DataError, match=r"^no sentence pairs to make a dataset from\.$"):
        make_dataset([], tokenizer, tokenizer)
    with pytest.raises(DataError, match=r"^no lines to make a dataset from\.$"):
        make_dataset([], None, tokenizer)
    message = r"^none of the 1 sentence pairs fits max_length=1 tokens a side; raise max_length \(--max-length\)\.$"
    with pytest.raises(DataError, match=message):
        make_dataset([("a a", "a")], tokenizer, tokenizer, max_length=1)
