"""Model directories: save, load, and what a broken one says."""

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, TINY_BATCH, run_fresh_python, to_numpy

from kformer import TrainedModel, build_decoder_only, build_transformer, load
from kformer.data.text import RESERVED_TOKENS, Tokenizer
from kformer.model_dir import ModelDirectoryError
from kformer.training.tasks import LANGUAGE_MODEL, TASKS, TRANSLATION

SOURCE_VOCAB = RESERVED_TOKENS + ["the", "black", "cat", "sleeps"] + [f"w{i}" for i in range(12)]
TARGET_VOCAB = RESERVED_TOKENS + ["el", "gato", "negro", "duerme"] + [f"v{i}" for i in range(22)]


@pytest.fixture
def saved(tmp_path):
    model = build_transformer(len(SOURCE_VOCAB), len(TARGET_VOCAB), d_model=16, num_heads=2, num_layers=1, d_ff=32)
    trained = TrainedModel(model, Tokenizer(SOURCE_VOCAB), Tokenizer(TARGET_VOCAB), {"max_length": 12})
    trained.save(tmp_path / "model")
    return trained, tmp_path / "model"


def test_round_trip_in_a_fresh_process(saved):
    trained, directory = saved
    assert sorted(p.name for p in directory.iterdir()) == [
        "config.json",
        "model.keras",
        "source_vocab.txt",
        "target_vocab.txt",
    ]
    np.save(directory.parent / "expected.npy", to_numpy(trained.model(TINY_BATCH)))
    run_fresh_python(
        f"""
        import numpy as np, kformer
        trained = kformer.load("model")
        assert trained.max_length == 12
        assert trained.source_tokenizer.vocabulary == {SOURCE_VOCAB!r}
        batch = (np.array({TINY_BATCH[0].tolist()}, "int32"), np.array({TINY_BATCH[1].tolist()}, "int32"))
        np.testing.assert_array_equal(np.asarray(trained.model(batch)), np.load("expected.npy"))
        """,
        cwd=directory.parent,
    )


def test_load_gives_back_in_this_process_what_was_saved(saved, tmp_path):
    """The round trip without a fresh process (which mutation testing cannot run): the same outputs, vocabularies
    and settings; a language model's directory needs no source vocabulary; max_length defaults to 40."""
    trained, directory = saved
    loaded = load(directory)
    np.testing.assert_allclose(to_numpy(loaded.model(TINY_BATCH)), to_numpy(trained.model(TINY_BATCH)), atol=1e-6)
    assert loaded.source_tokenizer.vocabulary == SOURCE_VOCAB and loaded.target_tokenizer.vocabulary == TARGET_VOCAB
    assert (loaded.kind, loaded.max_length) == ("translator", 12)
    assert loaded.config == {"max_length": 12, "kind": "translator"}

    lm = TrainedModel(
        build_decoder_only(len(TARGET_VOCAB), d_model=16, num_heads=2, num_layers=1, d_ff=32),
        None,
        Tokenizer(TARGET_VOCAB),
        {"kind": "language_model", "max_length": 1},  # the smallest max_length there is
    )
    lm.save(tmp_path / "lm")
    assert sorted(p.name for p in (tmp_path / "lm").iterdir()) == ["config.json", "model.keras", "target_vocab.txt"]
    loaded = load(tmp_path / "lm")
    assert loaded.source_tokenizer is None and (loaded.kind, loaded.max_length) == ("language_model", 1)
    config = json.loads((directory / "config.json").read_text())
    del config["max_length"]
    (directory / "config.json").write_text(json.dumps(config))
    assert load(directory).max_length == 40


def test_what_a_directory_lacks_or_holds_wrong_is_one_whole_sentence(saved):
    _, directory = saved
    resume = "was training interrupted? Run `kformer train` again with the same --out to resume."
    for change, message in [
        (
            ("source_vocab.txt", "model.keras"),
            f"{directory}: incomplete model directory, missing model.keras, source_vocab.txt; {resume}",
        ),
        (("config.json",), f"{directory}: incomplete model directory, missing config.json; {resume}"),
        ("[1, 2]", f"{directory / 'config.json'}: must hold a JSON object, not list."),
    ]:
        if isinstance(change, str):
            (directory / "config.json").write_text(change)
        else:
            for name in change:
                (directory / name).unlink()
        with pytest.raises(ModelDirectoryError) as error:
            load(directory)
        assert str(error.value) == message


def test_a_vocabulary_file_that_is_not_one_is_named(saved):
    _, directory = saved
    (directory / "target_vocab.txt").write_text("")
    with pytest.raises(ModelDirectoryError) as error:
        load(directory)
    assert str(error.value).startswith(f"{directory}: a vocabulary file is not valid: ")


def test_missing_directory(tmp_path):
    with pytest.raises(ModelDirectoryError, match="no such model directory"):
        load(tmp_path / "nope")


@pytest.mark.parametrize("piece", ["config.json", "model.keras", "target_vocab.txt"])
def test_missing_piece_is_named(saved, piece):
    _, directory = saved
    (directory / piece).unlink()
    with pytest.raises(ModelDirectoryError, match=f"incomplete model directory, missing {piece}"):
        load(directory)


@pytest.mark.parametrize(
    ("side", "vocabulary", "message"),
    [
        ("target", TARGET_VOCAB[:-3], "target vocabulary has 27 tokens but the model's decoder was trained with 30"),
        ("source", SOURCE_VOCAB[:-3], "source vocabulary has 17 tokens but the model's encoder was trained with 20"),
    ],
)
def test_vocabulary_from_another_model_is_detected(saved, side, vocabulary, message):
    _, directory = saved
    Tokenizer(vocabulary).save(directory / f"{side}_vocab.txt")
    with pytest.raises(ModelDirectoryError, match=message):
        load(directory)


def test_corrupt_config_is_named(saved):
    _, directory = saved
    (directory / "config.json").write_text("{not json")
    with pytest.raises(ModelDirectoryError, match="config.json: not valid JSON"):
        load(directory)


def test_config_is_written_last_and_atomically(saved, monkeypatch):
    trained, directory = saved
    config = json.loads((directory / "config.json").read_text())

    def fail(path):
        raise OSError("disk full")

    monkeypatch.setattr(trained.model, "save", fail)
    with pytest.raises(OSError, match="disk full"):
        trained.save(directory)
    # The old files are intact and no temporary file is left behind.
    assert json.loads((directory / "config.json").read_text()) == config
    assert sorted(p.name for p in directory.iterdir() if p.name.startswith(".")) == []


def test_weights_files_are_written_atomically_under_a_name_keras_accepts(saved, tmp_path):
    from kformer.files import write_atomically

    trained, _ = saved
    model = trained.model
    path = tmp_path / "training" / "best.weights.h5"
    # Keras refuses a weights file whose name does not end in .weights.h5, temporary or not.
    write_atomically(path, model.save_weights)
    original = [w.copy() for w in model.get_weights()]
    model.set_weights([np.zeros_like(w) for w in original])
    model.load_weights(path)
    for read, written in zip(model.get_weights(), original, strict=True):
        np.testing.assert_array_equal(read, written)
    assert sorted(p.name for p in path.parent.iterdir()) == ["best.weights.h5"]


def test_a_write_killed_halfway_leaves_a_temporary_file_that_the_next_write_clears(tmp_path):
    """SIGKILL mid-write (no cleanup runs) leaves a hidden temporary; the next write of that file deletes it."""
    import signal
    import subprocess
    import sys

    from kformer.files import write_atomically

    path = tmp_path / "backup" / "latest.weights.h5"
    killed = f"""
import os, signal
from pathlib import Path
from kformer.files import write_atomically
def write(temporary):
    Path(temporary).write_bytes(b"half a file")
    os.kill(os.getpid(), signal.SIGKILL)
write_atomically({str(path)!r}, write)
"""
    for _ in range(2):
        assert subprocess.run([sys.executable, "-c", killed], cwd=REPO).returncode == -signal.SIGKILL
    other = path.parent / ".state.json.abcd1234.json"  # another file's temporary is not this write's business
    other.write_text("{}")
    left = [p.name for p in path.parent.iterdir() if p != other]
    # One, not two: the second write cleared what the first kill left, then was killed in turn.
    assert len(left) == 1 and left[0].startswith(".latest.weights.h5.") and not path.exists()

    write_atomically(path, lambda temporary: Path(temporary).write_bytes(b"whole"))
    assert sorted(p.name for p in path.parent.iterdir()) == [other.name, "latest.weights.h5"]
    assert path.read_bytes() == b"whole"


def test_config_json_is_the_last_file_put_in_place(saved, monkeypatch, tmp_path):
    import kformer.files

    trained, _ = saved
    placed = []
    real_replace = kformer.files.os.replace

    def recording_replace(source, destination):
        placed.append(Path(destination).name)
        real_replace(source, destination)

    monkeypatch.setattr(kformer.files.os, "replace", recording_replace)
    trained.save(tmp_path / "fresh")
    assert placed[-1] == "config.json" and placed.count("config.json") == 1
    assert {"model.keras", "source_vocab.txt", "target_vocab.txt"} <= set(placed[:-1])


def test_files_get_the_users_normal_permissions(tmp_path):
    import os
    import stat

    previous = os.umask(0o022)
    try:
        model = build_transformer(len(SOURCE_VOCAB), len(TARGET_VOCAB), d_model=16, num_heads=2, num_layers=1, d_ff=32)
        TrainedModel(model, Tokenizer(SOURCE_VOCAB), Tokenizer(TARGET_VOCAB), {"max_length": 12}).save(tmp_path / "m")
    finally:
        os.umask(previous)
    for path in (tmp_path / "m").iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path.name  # not mkstemp's 0600


@pytest.mark.parametrize(
    "config, message",
    [
        ([1, 2], "must hold a JSON object"),
        ({"max_length": "12"}, "max_length must be a positive integer"),
        ({"max_length": 0}, "max_length must be a positive integer"),
        ({"kind": "poem"}, "unknown model kind 'poem'"),
    ],
)
def test_config_is_validated_before_use(saved, config, message):
    _, directory = saved
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirectoryError, match=message):
        load(directory)


def test_a_finished_directory_is_not_trained_over_unless_asked(saved):
    from kformer.model_dir import RunDirectory

    _, directory = saved
    (directory / "training").mkdir()
    (directory / "training" / "history.csv").write_text("epoch,loss\n0,1.0\n")
    run = RunDirectory(directory)
    with (
        pytest.raises(ModelDirectoryError, match="already holds a trained model.*--overwrite"),
        run.claim(TRANSLATION),
    ):
        pass
    assert (directory / "config.json").is_file()
    with run.claim(TRANSLATION, overwrite=True):
        assert sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")) == [
            ".kformer.lock",
            "training",
            "training/run.json",
        ]
    with run.claim(TRANSLATION):  # an interrupted run is resumed
        pass


def test_a_finished_language_model_without_a_source_vocabulary_or_training_folder_is_trained_over_when_asked(
    tmp_path,
):
    """What a language model's finished directory holds (no source_vocab.txt; `finish` removed the backup and the
    run left no training/ here): refused in one sentence, then cleared by --overwrite without tripping over the
    files it never had; a translator then meets its interrupted run by name."""
    from kformer.model_dir import RunDirectory

    out = tmp_path / "lm"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"kind": "language_model", "max_length": 8}))
    (out / "target_vocab.txt").write_text("\n".join(RESERVED_TOKENS) + "\n")
    (out / "model.keras").write_text("weights")
    run = RunDirectory(out)
    with pytest.raises(ModelDirectoryError) as error, run.claim(LANGUAGE_MODEL):
        pass
    assert str(error.value) == (
        f"{out}: already holds a trained model; choose another --out, or pass --overwrite to train a new one in its "
        "place."
    )
    with run.claim(LANGUAGE_MODEL, overwrite=True):
        assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
            ".kformer.lock",
            "training",
            "training/run.json",
        ]
    with pytest.raises(ModelDirectoryError) as error, run.claim(TRANSLATION):
        pass
    assert str(error.value) == (
        f"{out}: holds an interrupted run that trains a language model, not a translator; resume it with its own "
        "command, or choose another --out."
    )


def test_finishing_saves_the_model_and_drops_only_the_backup(tmp_path):
    from conftest import copy_task_model

    from kformer.model_dir import RunDirectory

    run = RunDirectory(tmp_path / "out")
    run.backup.mkdir(parents=True)
    (run.backup / "checkpoint").write_text("state")
    run.history.write_text("epoch,loss\n0,1.0\n")
    trained = copy_task_model()
    run.finish(trained)
    assert not run.backup.exists() and run.history.read_text() == "epoch,loss\n0,1.0\n"
    assert json.loads((run.root / "config.json").read_text())["kind"] == "translator"
    assert load(run.root).target_tokenizer.vocabulary == trained.target_tokenizer.vocabulary
    run.finish(trained)  # again, with no backup left: nothing to remove, no error


def test_each_kind_a_model_directory_may_name_is_a_task_of_kformers():
    from kformer.model_dir import KINDS

    assert set(KINDS) == set(TASKS) and all(TASKS[kind].kind == kind for kind in KINDS)


def test_an_interrupted_run_of_another_task_is_refused_in_one_sentence_that_names_it(tmp_path, capsys):
    from kformer.cli import main
    from kformer.model_dir import RunDirectory

    out = tmp_path / "out"
    with RunDirectory(out).claim(TRANSLATION):  # as a run killed once it started
        pass
    expected = (
        f"{out}: holds an interrupted run that trains a translator, not a language model; resume it with its own "
        "command, or choose another --out."
    )
    with (
        pytest.raises(ModelDirectoryError, match=f"^{re.escape(expected)}$"),
        RunDirectory(out).claim(LANGUAGE_MODEL),
    ):
        pass
    assert main(["--quiet", "train", "--task", "lm", "--data", "builtin", "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"kformer train: error: {expected}\n"
    with RunDirectory(out).claim(TRANSLATION):  # its own task resumes it
        pass


def test_a_model_file_that_would_run_code_is_refused(saved):
    """A .keras file with a Python lambda in it (arbitrary code on load) is refused, not executed."""
    import keras

    _, directory = saved
    inputs = keras.Input((3,))
    keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs)).save(directory / "model.keras")
    with pytest.raises(ModelDirectoryError, match=r"model.keras: cannot be loaded as a Keras model .*lambda"):
        load(directory)


def test_a_lock_held_by_a_live_run_refuses_and_one_left_by_an_ended_run_is_taken_over(tmp_path):
    import os
    import re
    import socket
    import subprocess
    import sys

    from kformer.files import LOCK_FILE, run_lock

    lock, host = tmp_path / LOCK_FILE, socket.gethostname()

    def held_by(pid, on=host):
        lock.write_text(json.dumps({"pid": pid, "host": on, "started": "2026-12-02 06:00:00"}))

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    reaped = subprocess.Popen([sys.executable, "-c", "pass"])
    reaped.wait()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: still in the process table
    try:
        held_by(live.pid)
        expected = (
            f"{tmp_path}: another kformer run is writing it (pid {live.pid} on {host}, started 2026-12-02 "
            "06:00:00); wait for it to end or choose another --out."
        )
        with pytest.raises(ModelDirectoryError, match=f"^{re.escape(expected)}$"), run_lock(tmp_path):
            pass
        assert json.loads(lock.read_text())["pid"] == live.pid  # the live run's lock is left alone
        held_by(live.pid, on="another-host")  # whether it lives cannot be seen from here
        with pytest.raises(ModelDirectoryError, match=f"if that run is gone, delete {re.escape(str(lock))}"):
            with run_lock(tmp_path):
                pass
        for ended in (reaped.pid, zombie.pid):
            held_by(ended)
            with run_lock(tmp_path):
                assert json.loads(lock.read_text())["pid"] == os.getpid()
            assert not lock.exists()
        assert list(tmp_path.iterdir()) == []  # no draft of a lock left behind
    finally:
        live.kill()
        live.wait()
        zombie.wait()
