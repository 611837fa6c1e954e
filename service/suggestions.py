"""Naming what was meant when a name is misspelt: one rule (:func:`closest`) for the HTTP API's fields, every
command's flags (:class:`ArgumentParser`, which every command's parser is) and the Python API's keywords
(:class:`UnknownOptionError`, raised by :func:`check_options` and :func:`checked_keywords`). Standard library only:
the client imports it."""

from __future__ import annotations

import argparse
import functools
import re
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, NoReturn, TypeVar

#: How alike (difflib's ratio, 0..1) a misspelling and a known name must be for the name to be suggested.
SIMILARITY_CUTOFF = 0.6
#: How alike a keyword that may also be a template variable (``apply_chat_template``'s ``**kwargs``) must be to an
#: option's name to be refused as its misspelling: a letter or two off (``add_generation_promt``: 0.98,
#: ``max_lenght``: 0.9), never a variable that merely shares a word (``xml_tools`` against ``tools``: 0.71).
TYPO_CUTOFF = 0.85

F = TypeVar("F", bound=Callable[..., Any])


def closest(name: str, known: Iterable[str], cutoff: float = SIMILARITY_CUTOFF) -> str | None:
    """The known name ``name`` most likely misspells, or None when none is close enough."""
    import difflib  # (when a name is misspelt: the client imports this module)

    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return matches[0] if matches else None


class UnknownOptionError(TypeError):
    """A keyword argument no option of the call has: the TypeError Python raises for it (``except TypeError`` still
    catches it), naming the option most likely meant, as the HTTP API names a misspelt field, or else every option.
    ``name``: the keyword given; ``meant``: the option suggested, or None. Built from its message alone too (as a
    DataLoader worker's error is re-raised in the training process)."""

    def __init__(self, message: str, name: str | None = None, meant: str | None = None) -> None:
        super().__init__(message)
        self.name = name
        self.meant = meant


def unknown_option(where: str, name: str, known: Sequence[str], meant: str | None = None) -> UnknownOptionError:
    """The error for keyword ``name`` given to ``where`` (the call, as ``Collator()``), which takes ``known``:
    Python's words for it, then the option meant (``meant``, else :func:`closest`'s), or else the options."""
    meant = meant if meant is not None else closest(name, known)
    if meant is not None:
        hint = f"did you mean {meant!r}?"
    else:
        hint = f"the options are {', '.join(known)}" if known else "it takes none"
    return UnknownOptionError(f"{where} got an unexpected keyword argument {name!r}; {hint}", name, meant)


def check_options(where: str, given: Iterable[str], known: Collection[str]) -> None:
    """UnknownOptionError for the first name of ``given`` not in ``known`` (``where``: the call, as ``Collator()``)."""
    for name in given:
        if name not in known:
            raise unknown_option(where, name, list(known))


def keyword_only_parameters(function: Callable[..., Any]) -> tuple[str, ...]:
    """The names of ``function``'s keyword-only parameters, in order (its ``**options`` aside)."""
    code = function.__code__
    return code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]


def checked_keywords(method: F) -> F:
    """``method`` (of a class), raising :class:`UnknownOptionError` instead of Python's bare TypeError for a keyword
    it does not take. Where it takes ``**kwargs`` for names of the caller's own (``apply_chat_template``'s template
    variables), a keyword a letter or two off one of its parameters (:data:`TYPO_CUTOFF`) is refused as that
    misspelling; any other passes. Its signature is ``method``'s (``inspect.signature`` follows ``__wrapped__``)."""
    code = method.__code__
    names = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]  # (without self)
    taken = frozenset(names)
    takes_any = bool(code.co_flags & 0x08)  # CO_VARKEYWORDS: **kwargs

    @functools.wraps(method)
    def checked(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not taken.issuperset(kwargs):
            where = f"{type(self).__name__}.{method.__name__}()"
            for name in kwargs:
                if name in taken:
                    continue
                if not takes_any:
                    raise unknown_option(where, name, names)
                meant = closest(name, names, TYPO_CUTOFF)
                if meant is not None:
                    raise UnknownOptionError(
                        f"{where} got the keyword argument {name!r}, which it would pass on as a variable of the "
                        f"template; did you mean {meant!r}?",
                        name,
                        meant,
                    )
        return method(self, *args, **kwargs)

    return checked  # type: ignore[return-value]


_UNRECOGNIZED = "unrecognized arguments: "
_FLAG_HINT = "{flag}: did you mean {meant}?"
_FLAG_HINT_READ = re.compile(re.escape(_FLAG_HINT).replace(r"\{flag\}", r"(--\S+)").replace(r"\{meant\}", r"(--\S+)"))


def unrecognized_flags(error_line: str) -> dict[str, str | None]:
    """What an :class:`ArgumentParser`'s error line (another process's, say) says of flags it does not have: each
    one -> the flag it suggested, or None; {} for any other error."""
    if _UNRECOGNIZED not in error_line:
        return {}
    arguments, *hints = error_line.split(_UNRECOGNIZED, 1)[1].split("; ")
    meant: dict[str, str] = {}
    for hint in hints:
        match = _FLAG_HINT_READ.fullmatch(hint)
        if match is not None:
            meant[match[1]] = match[2]
    return {argument: meant.get(argument) for argument in arguments.split() if argument.startswith("--")}


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, naming the flag (or choice) meant when one is misspelt, on whichever error argparse
    reports first (a misspelt required flag is reported as missing). An error is that one line and a pointer to
    ``--help``, not argparse's usage, which for 30 flags pushes the line to fix off the screen."""

    _given: Sequence[str] = ()

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._given = list(sys.argv[1:] if args is None else args)
        parsed, unknown = self.parse_known_args(self._given, namespace)
        if unknown:
            self.error(_UNRECOGNIZED + " ".join(unknown))
        return parsed

    def error(self, message: str) -> NoReturn:
        hints = [_FLAG_HINT.format(flag=flag, meant=meant) for flag, meant in self.misspelt_flags(self._given)]
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
