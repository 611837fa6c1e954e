"""Help text that fits the terminal: :class:`HelpFormatter`, every command's, wraps descriptions and epilogs to the
width argparse finds (``COLUMNS``, else the terminal's) instead of printing them as written, as argparse's
``RawDescriptionHelpFormatter`` does. Standard library only."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Collection

#: The widest the first column of a table (``NAME<tab>what it does``) grows before a name takes a line of its own.
TABLE_COLUMN = 22


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, but descriptions and epilogs keep their paragraphs (blank lines) and lines are of three
    kinds, each run of one kind a block: prose is filled to the width; a line that starts with a space is printed as
    written (an example command: keep it short); ``NAME<tab>what it does`` is a row of a two-column table whose
    second column wraps under itself."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [part for part in text.strip("\n").split("\n\n") if part.strip()]
        return "\n\n".join(self._paragraph(part, width, indent) for part in paragraphs)

    def _paragraph(self, text: str, width: int, indent: str) -> str:
        blocks: list[tuple[str, list[str]]] = []
        for line in text.splitlines():
            kind = "verbatim" if line[:1].isspace() else "row" if "\t" in line else "prose"
            if blocks and blocks[-1][0] == kind:
                blocks[-1][1].append(line)
            else:
                blocks.append((kind, [line]))
        out: list[str] = []
        for kind, lines in blocks:
            if kind == "verbatim":
                out.extend(indent + line.rstrip() for line in lines)
            elif kind == "row":
                out.extend(_table([line.split("\t", 1) for line in lines], width, indent + "  "))
            else:
                prose = " ".join(" ".join(lines).split())
                out.append(_fill(prose, width, indent, indent))
        return "\n".join(out)


def short_usage(parser: argparse.ArgumentParser, dests: Collection[str]) -> str:
    """A usage of ``-h``, the required flags and those whose ``dest`` is in ``dests`` (a command's common ones),
    then ``[OPTION ...]`` for the others, which its --help lists by section; for ``parser.usage``. Wrapped to the
    width argparse finds now, as the help it goes into."""
    shown = [
        action
        for action in parser._actions
        if action.dest in dests or action.required or isinstance(action, argparse._HelpAction)
    ]
    others = argparse.Action(option_strings=[], dest="options", nargs="*", metavar="OPTION")  # shown [OPTION ...]
    formatter = parser._get_formatter()
    formatter.add_usage(None, [*shown, others], [], prefix="usage: ")
    return formatter.format_help().strip().removeprefix("usage: ").replace("%", "%%")


def _fill(text: str, width: int, first: str, rest: str) -> str:
    # never at a hyphen: a flag (--shard-index) stays whole
    return textwrap.fill(text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)


def _table(rows: list[list[str]], width: int, indent: str) -> list[str]:
    column = min(max(len(name) for name, _ in rows) + 2, TABLE_COLUMN)
    lines = []
    for name, what in rows:
        hanging = indent + " " * column
        text = " ".join(what.split())
        if len(name) + 2 <= column:
            lines.append(_fill(text, width, indent + name.ljust(column), hanging))
        else:  # a name wider than the column: its text starts on the next line
            lines.append(indent + name)
            lines.append(_fill(text, width, hanging, hanging))
    return lines


__all__ = ["HelpFormatter", "short_usage"]
