"""A job's command-line flags, derived from its config dataclass as ``serve``'s are from its ``Settings``: a field
that is a flag says so beside its default (``field(default=8, metadata=flag("requests in flight", metavar="N"))``),
whence the flag's name, type, choices, default and help; a command places each flag in a help section.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any

from ..helptext import short_usage

FLAG = "flag"  # the key of a field's metadata

#: A command's help sections, in order: (title, description, field names); the title None is the parser's own.
Layout = Sequence[tuple[str | None, str | None, Sequence[str]]]


@dataclass(frozen=True)
class Flag:
    """How a config field is a flag. ``name``: ``--field-name`` unless given, ``""`` for the positional argument;
    ``parse``: the argparse type of one value; ``convert``: the parsed value to the field's (a list to a tuple);
    ``shown``: how the help shows the default; ``default_text``: the help's words for a default that is not a
    value; ``env``: an environment variable the default is read from (parsed as the flag is)."""

    help: str
    name: str | None = None
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    choices: Sequence[Any] | None = None
    action: str | None = None
    nargs: str | None = None
    required: bool = False
    convert: Callable[[Any], Any] | None = None
    shown: Callable[[Any], str] = lambda value: f"{value:g}" if isinstance(value, float) else str(value)
    default_text: str | None = None
    env: str | None = None


def flag(help: str, **how: Any) -> dict[str, Flag]:
    """The metadata of a config field that is a flag (``how``: :class:`Flag`'s fields)."""
    return {FLAG: Flag(help, **how)}


def declared(config_type: type) -> dict[str, Field[Any]]:
    return {f.name: f for f in fields(config_type) if FLAG in f.metadata}


def default_of(item: Field[Any]) -> Any:
    if item.default is not MISSING:
        return item.default
    if item.default_factory is not MISSING:
        return item.default_factory()
    return None


def add_flags(
    parser: argparse.ArgumentParser, config_type: type, layout: Layout, helps: Mapping[str, str] | None = None
) -> None:
    """Every flag of ``config_type`` in the sections of ``layout``, each once (else a ValueError), and a usage of
    the flags of its first section (title None); ``helps``: a job's own words for a shared flag (``--out``...)."""
    flags = declared(config_type)
    placed = [name for _, _, names in layout for name in names]
    if sorted(placed) != sorted(flags):
        raise ValueError(
            f"the layout of {config_type.__name__}'s flags places {sorted(placed)}, not its flags {sorted(flags)}"
        )
    for title, description, names in layout:
        group: Any = parser if title is None else parser.add_argument_group(title, description)
        for name in names:
            _add(group, flags[name], (helps or {}).get(name))
    # the usage names the first section's flags; --help lists the others by section
    parser.usage = short_usage(parser, [name for title, _, names in layout if title is None for name in names])


def _add(group: Any, item: Field[Any], help_text: str | None) -> None:
    spec: Flag = item.metadata[FLAG]
    default = default_of(item)
    if spec.env is not None:
        default = os.environ.get(spec.env, default)  # a string: argparse parses it as it parses the flag
    text = help_text or spec.help
    if spec.default_text is not None:
        text += f" (default: {spec.default_text})"
    elif _shows(default) and not spec.required and spec.action not in ("store_true", "store_false"):
        text += f" (default {spec.shown(default)})"
    options: dict[str, Any] = {"help": text.replace("%", "%%")}
    for key in ("metavar", "choices", "nargs"):
        if getattr(spec, key) is not None:
            options[key] = getattr(spec, key)
    if spec.parse is not None:
        options["type"] = spec.parse
    if spec.name == "":
        group.add_argument(item.name, **options)
        return
    if spec.action is not None:
        options["action"] = spec.action
    if spec.action == "append" and default is not None:
        default = list(default)  # argparse appends to a copy of its default
    group.add_argument(flag_name(item), dest=item.name, default=default, required=spec.required, **options)


def flag_name(item: Field[Any]) -> str:
    """The flag of a config field: its declared name, else ``--field-name``."""
    spec: Flag = item.metadata[FLAG]
    return spec.name or "--" + item.name.replace("_", "-")


def flag_of(config_type: type, field_name: str) -> str:
    """The flag of ``config_type``'s field ``field_name``, for messages that name it (never typed again)."""
    return flag_name(declared(config_type)[field_name])


def _shows(default: Any) -> bool:
    """Neither None, a switch's False, nor an empty collection (0 is shown)."""
    return default is not None and default is not False and (bool(default) or default == 0)


def config_values(config_type: type, args: argparse.Namespace) -> dict[str, Any]:
    """The fields of ``config_type`` from parsed flags, converted to the fields' types."""
    values = {}
    for name, item in declared(config_type).items():
        value = getattr(args, name)
        convert = item.metadata[FLAG].convert
        values[name] = convert(value) if convert is not None and value is not None else value
    return values
