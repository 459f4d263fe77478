"""Odd text at the Python API and the command line: one translation per input, or one clear error.

The exported runtimes get the same texts in test_export.py.
"""

import io
import sys

import pytest
from conftest import ODD_TEXTS, VOCAB, copy_task_model

from kformer import Translator
from kformer.cli import main
from kformer.data.text import utf8_batch

LETTERS = set(VOCAB[4:])


@pytest.fixture(scope="module")
def trained():
    return copy_task_model()


@pytest.fixture(scope="module")
def translator(trained):
    return Translator(trained)


@pytest.fixture(scope="module")
def model_dir(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("odd") / "model"
    trained.save(out)
    return out


def test_each_odd_text_gets_one_translation_whatever_its_batch(translator):
    texts = list(ODD_TEXTS.values())
    together = translator.translate(texts)
    assert len(together) == len(texts) and all(isinstance(t, str) for t in together)
    # Padding and batching must not leak between sentences: alone, each gives the same.
    assert [translator.translate([text])[0] for text in texts] == together
    assert together[0] == together[1] == ""  # nothing in, nothing out
    # Nothing is cut: the 5,001 letters go in 417 pieces of 12, of which the model copies up to 7 each (read whole
    # and cut, 12 letters came back); the 2,000 sentences of 24 letters, in 3 pieces each, alike.
    assert 7 / 12 - 0.05 < len(together[2].split()) / 5_001 <= 1
    assert 0.5 < sum(w in LETTERS for w in together[3].split()) / 48_000 <= 1


def test_empty_and_large_batches(translator):
    assert translator.translate([]) == []
    many = translator.translate(["a b c", "d e"] * 5_000)
    assert len(many) == 10_000 and set(many[0::2]) == {"a b c"} and set(many[1::2]) == {"d e"}


def test_text_utf8_cannot_encode_is_read_with_question_marks(translator):
    assert translator.translate(["a\udcffb"]) == translator.translate(["a?b"])


@pytest.mark.parametrize(
    "texts, message",
    [
        ("a b c", r"give a list of strings, not one string: wrap it as \['a b c'\]"),
        (["a", 3], "texts must be strings; item 1 is a int: 3"),
        ([b"a b"], "texts must be strings; item 0 is a bytes"),
        ([None], "item 0 is a NoneType"),
    ],
)
def test_what_is_not_a_list_of_strings_is_one_clear_error(translator, texts, message):
    with pytest.raises(TypeError, match=message):
        translator.translate(texts)
    with pytest.raises(TypeError, match=message):
        utf8_batch(texts)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(beam_size=True), "beam_size must be a positive integer, got beam_size=True"),
        (dict(max_length=0), "max_length must be a positive integer, got max_length=0"),
        (dict(max_length=-3), "max_length must be a positive integer, got max_length=-3"),
        (dict(length_penalty=float("nan")), "length_penalty must be a finite number"),
    ],
)
def test_translator_settings_out_of_range_are_refused_when_made(trained, settings, message):
    with pytest.raises(ValueError, match=message):
        Translator(trained, **settings)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5])
def test_a_batch_size_that_is_not_a_count_is_refused(translator, batch_size):
    with pytest.raises(ValueError, match=f"batch_size must be a positive integer, got batch_size={batch_size}"):
        translator.translate(["a b"], batch_size=batch_size)


@pytest.mark.parametrize(
    "pairs, message",
    [
        ([], r"^pairs is empty: give at least one \(source, reference\) pair to evaluate on\.$"),
        ([("a b", "b a"), ("a",)], r"pairs: item 1 is not a \(source, target\) pair of strings: \('a',\)"),
        ([(1, 2)], "item 0 is not a"),
        ("a b\tb a", "pairs must be a list of .* not a str"),
    ],
)
def test_evaluate_names_what_is_wrong_with_its_pairs(trained, pairs, message):
    from kformer import DataError, evaluate

    with pytest.raises(ValueError, match=message) as raised:  # a ValueError, as the README says
        evaluate(trained, pairs)
    assert type(raised.value) is DataError


@pytest.mark.parametrize(
    "splits, message",
    [
        ([("a b", "b a")], r"splits must be a dict \{\"train\": pairs"),
        ({"valid": [("a b", "b a")]}, "splits must be a dict"),
        ({"train": [("a b", None)]}, r"splits\['train'\]: item 0 is not a \(source, target\) pair"),
        ({"train": [("a b", "b a")], "valid": ["a b"]}, r"splits\['valid'\]: item 0 is not"),
    ],
)
def test_train_translator_names_what_is_wrong_with_its_splits_before_writing(tmp_path, splits, message):
    from kformer import TrainingConfig, train_translator
    from kformer.data.pairs import DataError

    with pytest.raises(DataError, match=message):
        train_translator(splits, tmp_path / "out", TrainingConfig(epochs=1), verbose=0)
    assert not (tmp_path / "out").exists()


def test_a_side_with_no_words_is_named_not_left_to_the_wordpiece_learner(tmp_path):
    from kformer import TrainingConfig, train_translator
    from kformer.data.pairs import DataError

    splits = {"train": [("a b", " "), ("b c", "")]}
    with pytest.raises(DataError, match="^the target side holds no words to learn a vocabulary from: 2 sentences"):
        train_translator(splits, tmp_path / "out", TrainingConfig(epochs=1), verbose=0)
    assert not (tmp_path / "out" / "config.json").exists()  # nothing that looks like a finished model


def run_translate(model_dir, stdin_bytes, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin_bytes)))
    code = main(["translate", "--model", str(model_dir)])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_stdin_gives_one_line_per_line_even_when_not_utf8(model_dir, monkeypatch, capsys):
    lines = [text.replace("\n", " ").encode() for text in ODD_TEXTS.values()]
    lines += [b"caf\xe9 a b", b"\xff\xfe\x00a", b"a b c\r"]  # latin-1, a UTF-16 mark, a CRLF line end
    code, out, err = run_translate(model_dir, b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n", monkeypatch, capsys)
    assert code == 0 and "Traceback" not in err
    assert len(out.splitlines()) == len(lines)
    assert out.splitlines()[-1] == "a b c"
    said = err.splitlines()
    assert said == [
        f"kformer: stdin line {n} is not UTF-8; its bad bytes were read as U+FFFD."
        for n in (len(lines) - 2, len(lines) - 1)
    ]


def test_cli_with_nothing_on_stdin_prints_nothing(model_dir, monkeypatch, capsys):
    assert run_translate(model_dir, b"", monkeypatch, capsys) == (0, "", "")


@pytest.mark.parametrize(
    "name", ["empty", "whitespace only", "10,000 characters", "NUL bytes", "emoji with joiners and skin tones"]
)
def test_cli_attention_on_odd_text_draws_or_says_why_not(model_dir, tmp_path, capsys, name):
    out = tmp_path / "attention.png"
    code = main(["attention", "--model", str(model_dir), ODD_TEXTS[name], "--out", str(out)])
    printed, err = capsys.readouterr()
    if name in ("empty", "whitespace only"):
        assert (code, out.exists()) == (2, False)
        assert err.strip().startswith("kformer attention: error: ") and "has no tokens to attend to" in err
    else:
        assert code == 0 and out.read_bytes()[:4] == b"\x89PNG"
        assert printed == f"Saved the attention heatmaps to {out}.\n"


def test_cli_translate_arguments_that_are_odd(model_dir, capsys):
    texts = [
        ODD_TEXTS[name]
        for name in ("empty", "NUL bytes", "right-to-left (Arabic, Hebrew)", "100,000 characters in 2,000 sentences")
    ]
    assert main(["translate", "--model", str(model_dir), *texts]) == 0
    assert len(capsys.readouterr().out.split("\n")) == len(texts) + 1  # one line each, then the final newline


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["translate", "--beam", "0", "hi"], "--beam"),
        (["translate", "--batch-size", "-3", "hi"], "--batch-size"),
        (["generate", "--max-tokens", "0", "hi"], "--max-tokens"),
        (["export", "--out", "x", "--beam", "two"], "--beam"),
    ],
)
def test_cli_counts_that_are_not_positive_are_a_usage_error_before_loading(model_dir, tmp_path, capsys, argv, flag):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv[:1], "--model", str(model_dir), *argv[1:]])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument {flag}: expected a positive whole number, got '{argv[argv.index(flag) + 1]}'" in err
    assert "Traceback" not in err
