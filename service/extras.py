"""What an extra needs at run time, checked against what is installed: read from the installed distribution's
metadata (pip's copy of pyproject.toml's optional dependencies), so the check and the install cannot disagree.
``serve`` and ``train`` check their whole extra at start-up (not at the first request needing jinja2, say); the
client's optional packages are checked where asked for (:func:`require_module`). Standard library only;
``packaging``, when installed, adds environment markers and version ranges."""

from __future__ import annotations

import importlib.util
import re
from importlib import metadata

DISTRIBUTION = "tokenizer-service"

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def install_command(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def require_module(module: str, extra: str, needed_by: str) -> None:
    """ModuleNotFoundError saying what to install when ``module`` is missing (found without importing it):
    ``needed_by`` (``return_tensors="pt"``, ``client.collator()``...) needs it, ``extra`` brings it."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(
            f"{needed_by} needs {module}, which is not installed: the {extra} extra brings it, "
            f"{install_command(extra)}",
            name=module,
        )


def unmet_line(extra: str) -> str | None:
    """The line a command prints before refusing to start: each unmet requirement of ``extra`` (missing, or outside
    its range), in declaration order, and what installs them. None when all are met, or when the distribution is
    not installed (a source tree on ``sys.path``: no metadata)."""
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return None
    problems = [problem for line in requirements if (problem := _unmet(line, extra)) is not None]
    if not problems:
        return None
    them = "it" if len(problems) == 1 else "them"
    return f"{'; '.join(problems)}: the {extra} extra brings {them}, {install_command(extra)}"


def _unmet(line: str, extra: str) -> str | None:
    try:
        from packaging.requirements import Requirement
    except ImportError:  # no markers or ranges to evaluate: the extra's names alone
        requirement, _, marker = line.partition(";")
        if extra not in _EXTRA_MARKER.findall(marker):
            return None
        name = _NAME.match(requirement)
        if name is None or _installed(name.group(1)) is not None:
            return None
        return f"{name.group(1)} is not installed"
    parsed = Requirement(line)
    if parsed.marker is None or not parsed.marker.evaluate({"extra": extra}):
        return None
    version = _installed(parsed.name)
    if version is None:
        return f"{parsed.name} is not installed"
    if parsed.specifier and not parsed.specifier.contains(version, prereleases=True):
        return f"{parsed.name} {version} is installed, but {parsed.name}{parsed.specifier} is needed"
    return None


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
