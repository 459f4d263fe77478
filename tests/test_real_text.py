"""Real text at training and evaluation: pairs too long left out and counted, the length limit from the data,
the user's own validation and test files, and scores by source length."""

import json

import numpy as np
import pytest
import sacrebleu
from conftest import VOCAB

from kformer.cli import main
from kformer.data.pipeline import make_dataset
from kformer.data.stream import Mixture
from kformer.data.text import Tokenizer
from kformer.training.evaluation import by_length

TINY = "--d-model 16 --num-heads 2 --num-layers 1 --d-ff 32 --vocab-size 60 --no-xla --batch-size 16"
LETTERS = "abcdefghijklmnopqrstuvwx"


def letter_pairs(path, lengths, seed=0):
    """Pairs of random letters (a letter a word, a word a token), the target the source reversed; written to `path`."""
    rng = np.random.default_rng(seed)
    pairs = []
    for n in lengths:
        words = list(rng.choice(list(LETTERS), n))
        pairs.append((" ".join(words), " ".join(reversed(words))))
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return pairs


def test_scores_by_source_length_are_sacrebleus_on_each_group():
    sources = ["a b", "a b c d e", "a b c d e f", "a " * 12, "a " * 30, "a " * 45, ""]
    hypotheses = ["x y", "the cat sat", "a dog ran here", "one two three", "four five", "six", "seven"]
    references = ["x y", "the cat sat down", "a dog ran", "one two three", "four five six", "six", "eight"]
    rows = by_length(sources, hypotheses, references)
    groups = {"1-5": [0, 1, 6], "6-9": [2], "10-14": [3], "25-39": [4], "40+": [5]}  # the empty source counts first
    assert [row["words"] for row in rows] == list(groups)
    for row, indices in zip(rows, groups.values(), strict=True):
        hyps, refs = [hypotheses[i] for i in indices], [references[i] for i in indices]
        assert row["n"] == len(indices)
        assert row["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
        assert row["chrf"] == round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)
        assert row["length"] == round(sum(len(h.split()) for h in hyps) / sum(len(r.split()) for r in refs), 3)


def test_scores_by_length_are_cased_unless_asked_and_need_a_reference_for_each_hypothesis():
    hypotheses, references = ["The Cat sat on the mat ."], ["the cat sat on the mat ."]
    (cased,) = by_length(["a b"], hypotheses, references)
    (lowercased,) = by_length(["a b"], hypotheses, references, lowercase=True)
    assert cased["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2) < 100.0
    assert lowercased["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score, 2)
    with pytest.raises(ValueError):
        by_length(["a b", "c"], hypotheses, references)


@pytest.mark.slow  # trains a tiny model: 10-20 s
def test_pairs_over_the_limit_are_left_out_counted_and_the_limit_comes_from_the_data(tmp_path, capsys):
    # 300 pairs of 20-44 letters: what 99% fit (with [END]) is above 40, so the limit is set from the data.
    lengths = np.random.default_rng(1).integers(20, 45, size=300)
    data = tmp_path / "long.tsv"
    letter_pairs(data, lengths)
    out = tmp_path / "model"
    argv = f"train --data {data} --out {out} --epochs 1 --steps-per-epoch 2 --warmup-steps 10 {TINY}"
    assert main(argv.split()) == 0
    config = json.loads((out / "config.json").read_text())
    trained_on = [len(s.split()) for s, _ in (line.split("\t") for line in data.read_text().splitlines())]
    # The training split is what split_pairs leaves after validation and test; recount it by the same hash.
    from kformer.data.pairs import read_pairs, split_pairs

    train = split_pairs(read_pairs(data))["train"]
    longest = np.array([len(s.split()) + 1 for s, _ in train])  # the target, as long, needs [END]
    limit = max(40, int(np.ceil(np.quantile(longest, 0.99) / 8)) * 8)
    assert limit > 40 and len(trained_on) == 300
    assert config["max_length"] == limit == config["training"]["max_length"]
    assert config["result"]["pairs_left_out"] == int(np.sum(longest > limit))
    said = capsys.readouterr().out
    assert f"Sentences of up to {limit} tokens (from the data: 99% of the pairs fit)" in said

    out = tmp_path / "limited"
    assert main(f"train --data {data} --out {out} --epochs 1 --steps-per-epoch 2 --max-length 24 {TINY}".split()) == 0
    left_out = int(np.sum(longest > 24))
    assert json.loads((out / "config.json").read_text())["result"]["pairs_left_out"] == left_out
    assert f"{left_out:,} of {len(train):,} training pairs" in capsys.readouterr().out


@pytest.mark.slow  # trains a tiny model: 10-20 s
def test_own_valid_and_test_files_replace_the_carved_splits_and_leaks_are_counted(tmp_path, capsys):
    data, valid, test = tmp_path / "train.tsv", tmp_path / "dev.tsv", tmp_path / "test.tsv"
    train_pairs = letter_pairs(data, [3, 4, 5] * 40, seed=2)
    letter_pairs(valid, [4] * 9, seed=3)
    with open(valid, "a", encoding="utf-8") as file:  # two sources the training data has: a leak to report
        file.writelines(f"{s}\t{t}\n" for s, t in train_pairs[:2])
    letter_pairs(test, [3] * 7, seed=4)
    out = tmp_path / "model"
    argv = f"train --data {data} --valid {valid} --test {test} --out {out} --epochs 1 --steps-per-epoch 2 {TINY}"
    assert main(argv.split()) == 0
    captured = capsys.readouterr()
    assert f"on {len(set(train_pairs)):,} pairs" in captured.out  # nothing carved out of --data
    assert "test split: BLEU" in captured.out and "(7 sentences" in captured.out
    assert "warning: 2 of the 11 valid pairs have a source that the training pairs have too" in captured.err
    assert "test pairs" not in captured.err
    assert json.loads((out / "training" / "best.json").read_text())["chrf"] >= 0  # scored on --valid's 11


@pytest.mark.parametrize(
    "flag, content, message",
    [
        ("--valid", None, "given.tsv: no such file"),
        ("--valid", "", "given.tsv: holds no sentence pairs"),
        ("--test", "just one field\n", "line 1"),
        ("--valid", "same", "the same file is given twice"),
    ],
)
def test_a_bad_valid_or_test_file_is_one_sentence(tmp_path, capsys, flag, content, message):
    data = tmp_path / "train.tsv"
    letter_pairs(data, [3] * 30)
    given = tmp_path / "given.tsv"
    if content == "same":
        given = data
    elif content is not None:
        given.write_text(content, encoding="utf-8")
    argv = f"train --data {data} {flag} {given} --out {tmp_path / 'm'} --epochs 1 --steps-per-epoch 1 {TINY}"
    assert main(argv.split()) == 2
    error = capsys.readouterr().err
    assert message in error and f"error: {flag} " in error and "Traceback" not in error and error.count("\n") == 1
    assert not (tmp_path / "m").exists()


@pytest.mark.slow  # trains a tiny model: 10-20 s
def test_evaluate_prints_scores_by_length_and_draws_them(tmp_path, capsys):
    data = tmp_path / "pairs.tsv"
    letter_pairs(data, [2, 3, 7, 8, 12] * 8, seed=5)
    out = tmp_path / "model"
    assert main(f"train --data {data} --out {out} --epochs 1 --steps-per-epoch 1 {TINY}".split()) == 0
    capsys.readouterr()
    picture = tmp_path / "lengths.png"
    assert main(["evaluate", "--model", str(out), "--data", str(data), "--plot", str(picture)]) == 0
    printed = capsys.readouterr().out
    assert "source words  sentences   BLEU   chrF" in printed
    assert [line.split()[:2] for line in printed.splitlines() if line.strip().startswith(("1-5", "6-9", "10-14"))] == [
        ["1-5", "16"],
        ["6-9", "16"],
        ["10-14", "8"],
    ]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # trains a tiny model: about 10 s
def test_the_jobs_steps_an_epoch_are_the_batches_its_training_pairs_make(tmp_path, capsys):
    """Pairs of 2-30 letters fill several length buckets, some over the limit: the step count the run reports
    (from the lengths it counted the left-out pairs by) is the number of batches make_dataset gives."""
    import re

    from kformer.data.pairs import read_pairs, split_pairs
    from kformer.data.pipeline import make_dataset
    from kformer.model_dir import load

    data = tmp_path / "mixed.tsv"
    letter_pairs(data, np.random.default_rng(6).integers(2, 31, size=300), seed=6)
    out = tmp_path / "model"
    assert main(f"train --data {data} --out {out} --epochs 1 --max-length 24 {TINY}".split()) == 0
    steps = int(re.search(r"\((\d+) steps an epoch", capsys.readouterr().out).group(1))
    trained = load(out)
    train = split_pairs(read_pairs(data))["train"]
    dataset = make_dataset(train, trained.source_tokenizer, trained.target_tokenizer, 16, 24, shuffle=False)
    assert steps == sum(1 for _ in dataset) > 10


def two_corpora(count=400, seed=0):
    """Two lists of letter pairs of the same lengths, one of the letters a-f and one of g-l."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 9, count)
    return [
        [(" ".join(words), " ".join(reversed(words))) for words in (rng.choice(list(letters), n) for n in lengths)]
        for letters in ("abcdef", "ghijkl")
    ]


def test_a_mixture_draws_each_corpus_by_its_weight_and_the_same_seed_gives_the_same_batches():
    first, second = two_corpora()
    mixture = Mixture([first, second[:100]], [3, 1])
    drawn_first = sum(pair in first for pair in mixture.sample) / len(mixture.sample)
    assert len(mixture.sample) == 500 and abs(drawn_first - 0.75) < 0.06  # the vocabularies' sample, by weight
    assert mixture.estimated_pairs == 500
    tokenizer = Tokenizer(VOCAB)

    def batches(seed, skip=0):
        dataset = make_dataset(mixture, tokenizer, tokenizer, batch_size=16, max_length=12, repeat=True, seed=seed)
        return [inputs[0].numpy() for inputs, _ in dataset.skip(skip).take(120 - skip)]

    rows = np.concatenate([batch.reshape(len(batch), -1)[:, :1] for batch in batches(0)])  # first source tokens
    from_first = np.isin(rows, tokenizer.tokenize(list("abcdef")).flat_values.numpy()).mean()
    assert abs(from_first - 0.75) < 0.04, from_first  # 1,920 pairs drawn 3:1 (4 standard deviations: 0.04)
    again, resumed = batches(0), batches(0, skip=45)
    assert all(np.array_equal(a, b) for a, b in zip(batches(0), again, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(again[45:], resumed, strict=True))  # a resume skips exactly
    assert not all(np.array_equal(a, b) for a, b in zip(again, batches(1), strict=False))


@pytest.mark.parametrize(
    "extra, message",
    [
        ("--weights 3", "--weights gives 1 weights for 2 --data corpora; give one each."),
        ("--weights 3 0", "argument --weights: expected a number above 0, got '0'"),
        ("--weights 3 x", "argument --weights: expected a number above 0, got 'x'"),
        ("SAME", "listed twice; give each corpus once (--weights says how often)."),
        ("--task lm", "--task lm reads one text file: give one --data, without --weights."),
    ],
)
def test_bad_corpora_or_weights_are_one_sentence(tmp_path, capsys, extra, message):
    first, second = tmp_path / "first.tsv", tmp_path / "second.tsv"
    for path, pairs in zip((first, second), two_corpora(40), strict=True):
        path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    data = f"{first} {first}" if extra == "SAME" else f"{first} {second}"
    extra = "" if extra == "SAME" else extra
    argv = f"train --data {data} {extra} --out {tmp_path / 'm'} --epochs 1 --steps-per-epoch 1 {TINY}"
    try:
        code = main(argv.split())
    except SystemExit as stop:  # argparse's own check of a value
        code = stop.code
    error = capsys.readouterr().err
    assert code == 2 and error.endswith(f"{message}\n") and "kformer train: error: " in error, error
    assert "Traceback" not in error
    assert not (tmp_path / "m").exists()


@pytest.mark.slow  # trains a tiny model: about 20 s
def test_kformer_train_runs_on_two_weighted_corpora_with_their_held_out_pairs_together(tmp_path, capsys):
    first, second = tmp_path / "first.tsv", tmp_path / "second.tsv"
    for path, pairs in zip((first, second), two_corpora(2000), strict=True):
        path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    argv = f"train --data {first} {second} --weights 1 2 --out {tmp_path / 'm'} --epochs 1 --steps-per-epoch 5 {TINY}"
    assert main(argv.split()) == 0
    out = capsys.readouterr().out
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["result"]["steps"] == 5
    vocabulary = (tmp_path / "m" / "source_vocab.txt").read_text().split()
    assert set("abcdefghijkl") <= set(vocabulary)  # learned from both corpora
    assert "test split" in out
