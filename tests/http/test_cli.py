"""Every command of ``tokenizer-service``, as a new user mistypes it: a misspelt flag or choice is answered
with the one meant (as the HTTP API answers a misspelt option), not only with "unrecognized arguments"."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from service.cli import COMMANDS
from testkit.servers import REPO


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def misspelt(flag: str) -> str:
    """``--vocab-size`` -> ``--vocab-siez``: the last two letters swapped, a typo argparse cannot take for an
    abbreviation."""
    return flag[:-2] + flag[-1] + flag[-2]


def longest_flag(command: str) -> str:
    module = importlib.import_module(COMMANDS[command][0])
    parser: argparse.ArgumentParser = module.build_parser(command)
    return max((option for option in parser._option_string_actions if option.startswith("--")), key=len)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_misspelt_flag_is_answered_with_the_flag_meant_first(command):
    """Defect: `serve --modle x` got "unrecognized arguments: --modle x" and a page of usage; then the hint,
    but after 30 lines of usage. Each command's longest flag, misspelt, without the command's required
    arguments: the hint rides on the first error, which is the first line, and --help is named for the rest."""
    flag = longest_flag(command)
    result = run(command, misspelt(flag), "1")
    assert result.returncode == 2, result.stderr
    first, *rest = result.stderr.strip().splitlines()
    assert first.startswith(f"tokenizer-service {command}: error: "), first
    assert f"{misspelt(flag)}: did you mean {flag}?" in first, first
    assert rest == [f"('tokenizer-service {command} --help' describes every flag)"], rest


def test_serve_modle_names_model():
    result = run("serve", "--modle", "embedded:default")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[0] == (
        "tokenizer-service serve: error: unrecognized arguments: --modle embedded:default; "
        "--modle: did you mean --model?"
    )


def test_the_command_alone_names_every_command():
    """Defect: `tokenizer-service` alone said "the following arguments are required: COMMAND, args", naming
    no command (and an `args` no help shows)."""
    result = run()
    assert result.returncode == 2
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith("tokenizer-service: error: name a command: "), first
    assert "args" not in first
    for command in COMMANDS:
        assert command in first, first


def test_a_misspelt_command_or_choice_is_answered_with_the_one_meant():
    assert "did you mean 'serve'?" in run("srve").stderr
    assert "did you mean 'bpe'?" in run("train", "corpus", "--out", "o", "--vocab-size", "9", "--model", "bpee").stderr


def test_an_unknown_flag_close_to_none_is_only_named():
    first = run("serve", "--bogus").stderr.strip().splitlines()[0]
    assert first == "tokenizer-service serve: error: unrecognized arguments: --bogus"
