"""How settings become ``serve``'s command-line flags and a flag names its setting: what the launcher and
``serve --replicas`` pass on to the servers they start, and how the client names a misspelt launch setting.
Standard library only (the server's own parser derives the same flags from its settings: service/http/cli.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def serve_arguments(settings: Mapping[str, Any]) -> list[str]:
    """``serve``'s arguments for ``settings`` (name -> value; None: unset): ``--name value``, ``--[no-]name`` for a
    switch. How the launcher and ``serve --replicas`` pass settings on."""
    arguments: list[str] = []
    for name, value in sorted(settings.items()):
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            arguments.append(flag if value else "--no-" + flag[2:])
        else:
            arguments += [flag, str(value)]
    return arguments


def setting_of_flag(flag: str) -> str:
    """The setting a flag of :func:`serve_arguments` sets: ``--max-length`` -> ``max_length``."""
    return flag.removeprefix("--").replace("-", "_")
