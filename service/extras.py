"""What an extra of this distribution needs at run time, checked against what is installed.

The one declaration is ``[project.optional-dependencies]`` in pyproject.toml; pip writes it into the installed
distribution's metadata, which is what is read here, so the check and the install can never disagree. A command
that needs a whole extra (``serve``, ``train``) checks it before it starts: a package missing, or at a version
outside the declared range, is one line naming the package and the extra that brings it, at start-up rather
than at the first request that reaches it (a chat route without jinja2, say); the client's own optional packages
(torch, for tensors) where they are asked for (:func:`require_module`).

Standard library only (it runs on a client-only install too); ``packaging``, when installed, adds environment
markers and version ranges to the check.
"""

from __future__ import annotations

import importlib.util
import re
from importlib import metadata

DISTRIBUTION = "tokenizer-service"

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def install_command(extra: str) -> str:
    """The command that installs ``extra``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def require_module(module: str, extra: str, needed_by: str) -> None:
    """Raise a ModuleNotFoundError that says what to install when ``module`` is not installed here: ``needed_by``
    (what the user asked for: ``return_tensors="pt"``, ``client.collator()``...) needs it, and ``extra`` brings
    it. Found without importing the module."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(
            f"{needed_by} needs {module}, which is not installed: the {extra} extra brings it, "
            f"{install_command(extra)}",
            name=module,
        )


def unmet_line(extra: str) -> str | None:
    """The one line a command prints before refusing to start: each requirement of ``extra`` that this environment
    does not meet (not installed, or installed at a version outside the declared range), in the order
    pyproject.toml declares them, and what installs them. None when all are met, or when the distribution itself is
    not installed (a source tree on ``sys.path``: nothing to read)."""
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
    """What is wrong with one requirement line of the metadata, if it belongs to ``extra`` and is not met here."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # no markers or ranges to evaluate: the extra's names alone
        requirement, _, marker = line.partition(";")
        if extra not in _EXTRA_MARKER.findall(marker):
            return None
        name = _NAME.match(requirement)
        if name is None:
            return None
        return None if _installed(name.group(1)) is not None else f"{name.group(1)} is not installed"
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
