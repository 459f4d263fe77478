"""The `kformer` command line."""

import pytest

from kformer.cli import main


def test_walkthrough_prints_the_seeds_numbers(capsys):
    assert main(["walkthrough"]) == 0
    out = capsys.readouterr().out
    assert "+0.0702  +0.7070  +0.2228" in out  # seed 000, Bumrah's weights
    assert "+1.000   +1.365   +0.701" in out  # seed 000, "it"'s output
    assert "+0.26    +0.20    +0.37    +0.18" in out  # seed 003, Part 3, "black"


def test_unknown_command_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err
