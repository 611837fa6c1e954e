"""Naming what was meant when a name is misspelt: one rule for the HTTP API's fields (:func:`closest`) and every
command's flags (:class:`ArgumentParser`, which every command's parser is). Standard library only."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

#: How alike (difflib's ratio, 0..1) a misspelling and a known name must be for the name to be suggested.
SIMILARITY_CUTOFF = 0.6


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` most likely misspells, or None when none is close enough."""
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=SIMILARITY_CUTOFF)
    return matches[0] if matches else None


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, naming the flag (or choice) meant when one is misspelt, on whichever error argparse
    reports first (a misspelt required flag is reported as missing). An error is that one line and a pointer to
    ``--help``, not argparse's usage, which for 30 flags pushes the line to fix off the screen."""

    _given: Sequence[str] = ()

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._given = list(sys.argv[1:] if args is None else args)
        parsed, unknown = self.parse_known_args(self._given, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        hints = [f"{flag}: did you mean {meant}?" for flag, meant in self.misspelt_flags(self._given)]
        said = "; ".join([message, *hints])
        self.exit(2, f"{self.prog}: error: {said}\n('{self.prog} --help' describes every flag)\n")

    def misspelt_flags(self, given: Sequence[str]) -> list[tuple[str, str]]:
        """``(flag given, flag meant)`` for each unknown ``--flag`` in ``given`` (a prefix of one is known: argparse
        accepts it) close to one of this parser's."""
        known = [option for option in self._option_string_actions if option.startswith("--")]
        misspelt = []
        for argument in given:
            if argument == "--":
                break
            flag = argument.split("=", 1)[0]
            if not flag.startswith("--") or any(option.startswith(flag) for option in known):
                continue
            meant = closest(flag[2:], [option[2:] for option in known])
            if meant is not None:
                misspelt.append((flag, "--" + meant))
        return misspelt

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices:
            shown = ", ".join(repr(choice) for choice in choices)
            meant = closest(str(value), [str(choice) for choice in choices])
            hint = f"did you mean {meant!r}? " if meant is not None else ""
            raise argparse.ArgumentError(action, f"invalid choice: {value!r}; {hint}(choose from {shown})")
