"""Every command of ``tokenizer-service``, as a new user mistypes it: a misspelt flag or choice is answered
with the one meant (as the HTTP API answers a misspelt option), not only with "unrecognized arguments"."""

from __future__ import annotations

import argparse
import importlib
import os
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


#: The terminal widths the help is read at: a classic terminal and a wide one (argparse wraps to COLUMNS - 2).
HELP_COLUMNS = (80, 100)
#: `serve --help` at 100 columns: a usage of at most this many lines (it names the common flags, [OPTION ...] the
#: rest), and at most this many lines a flag on average, all told: its name, three or four lines of what it does
#: and costs (every setting documents its trade-off, so that text stays), and its share of the description and
#: group titles. Before issue 42: a usage of 25 lines and 183 lines in all for 36 flags (5.1 a flag; 238 lines at
#: 80 columns), the flags in one list in the settings' order.
SERVE_USAGE_LINES, SERVE_LINES_PER_FLAG = 5, 4.5


def help_text(command: str, columns: int) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "service", *([command] if command else []), "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": str(columns)},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("columns", HELP_COLUMNS)
@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_every_help_fits_the_terminal(command, columns):
    """Defect (issue 42): `pretokenize --help` had lines of 446 and 507 characters, `train --help` one of 460,
    and `default-tokenizer` broke the column of the top-level listing: descriptions and epilogs were printed as
    written (RawDescriptionHelpFormatter) with long texts put into them. Every line now fits COLUMNS."""
    text = help_text(command, columns)
    wide = [line for line in text.splitlines() if len(line) > columns]
    assert not wide, f"{len(wide)} lines wider than {columns}: {wide[:3]}"
    if not command:  # the listing's second column starts at one place for every command
        listing = text.split("\ncommands:\n", 1)[1].splitlines()
        rows = [line for line in listing if line[:3] == "  " + line[2:3].strip() and line.split()[0] in COMMANDS]
        starts = {len(line) - len(line.lstrip()[len(line.split()[0]) :].lstrip()) for line in rows}
        assert [line.split()[0] for line in rows] == list(COMMANDS) and len(starts) == 1, listing


def test_serve_help_puts_the_common_flags_first_and_stays_within_its_budget():
    """Defect (issue 42): `serve --help` was 238 lines at 80 columns, a usage of 25 lines and every flag in one
    list. Now the usage names the common flags, the rest are in titled groups after them."""
    from service.http.cli import LAYOUT, build_parser

    text = help_text("serve", 100)
    lines = text.splitlines()
    usage = lines[: lines.index("")]
    assert len(usage) <= SERVE_USAGE_LINES and usage[-1].endswith("[OPTION ...]"), usage
    flags = [action for action in build_parser()._actions if action.option_strings and action.dest != "help"]
    assert len(lines) <= SERVE_LINES_PER_FLAG * len(flags), f"{len(lines)} lines for {len(flags)} flags"
    titles = [title for title, _, _ in LAYOUT if title is not None]
    positions = [next(i for i, line in enumerate(lines) if line.startswith(f"{title}:")) for title in titles]
    assert positions == sorted(positions), "the groups in LAYOUT's order"
    common = [name for title, _, names in LAYOUT if title is None for name in names]
    first_group = lines[: positions[0]]
    for name in common:
        assert any(line.lstrip().startswith("--" + name.replace("_", "-")) for line in first_group), name
