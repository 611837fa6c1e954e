"""Which files a job reads: paths, directories and globs, resolved to a sorted list with their formats."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import CorpusError

#: Supported formats by file suffix. Text and JSON Lines hold one document per line; gzip-compressed files
#: cannot be split, so each is one unit; Parquet splits by row groups.
FORMATS: dict[str, str] = {
    ".jsonl": "jsonl",
    ".jsonl.gz": "jsonl.gz",
    ".txt": "txt",
    ".txt.gz": "txt.gz",
    ".parquet": "parquet",
}
#: Formats whose files may be cut into line-aligned byte ranges.
SPLITTABLE = frozenset({"jsonl", "txt"})


def format_of(path: str) -> str | None:
    """The format of ``path`` by its suffix, or None if it is not one we read."""
    lower = path.lower()
    for suffix in sorted(FORMATS, key=len, reverse=True):  # .jsonl.gz before .gz-less suffixes
        if lower.endswith(suffix):
            return FORMATS[suffix]
    return None


@dataclass(frozen=True)
class InputFile:
    """One input file. ``name`` is its path relative to the common directory of all inputs (``/``-separated):
    the same on every node whatever the mount point, it names the outputs made from it."""

    path: str  # absolute
    name: str
    format: str
    size: int

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "format": self.format, "size": self.size}


def find_inputs(patterns: Sequence[str], *, exclude: Sequence[str] = ()) -> list[InputFile]:
    """Resolve files, directories (every supported file under them) and globs (``**`` recurses) to input
    files, without duplicates, sorted by name so that every worker sees the same list. Nothing under the
    ``exclude`` directories is an input (a job's own output folder, when it lies among its inputs).

    Raises :class:`CorpusError` for a pattern that matches nothing or a file named explicitly (or by a
    glob) whose format is not supported.
    """
    if not patterns:
        raise CorpusError("no inputs given: name files, directories or globs")
    excluded = [os.path.realpath(folder) + os.sep for folder in exclude]

    def wanted(path: str) -> bool:
        return os.path.exists(path) and not (os.path.realpath(path) + os.sep).startswith(tuple(excluded))

    found: dict[str, str] = {}  # real path -> format
    for pattern in patterns:
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if wanted(m)]
        if not matches:
            raise CorpusError(f"no input matches {pattern!r}")
        for match in matches:
            if os.path.isdir(match):
                inside = [
                    os.path.join(root, name)
                    for root, _, names in os.walk(match)
                    for name in names
                    if format_of(name) is not None and not name.startswith(".") and wanted(os.path.join(root, name))
                ]
                if not inside:
                    raise CorpusError(f"directory {match!r} holds no {'/'.join(FORMATS)} file")
                for path in inside:
                    found.setdefault(os.path.realpath(path), format_of(path) or "")
                continue
            file_format = format_of(match)
            if file_format is None:
                raise CorpusError(f"{match!r}: unsupported input format; supported: {', '.join(FORMATS)}")
            found.setdefault(os.path.realpath(match), file_format)
    root = os.path.commonpath([os.path.dirname(path) for path in found])
    files = [
        InputFile(
            path=path,
            name=os.path.relpath(path, root).replace(os.sep, "/"),
            format=file_format,
            size=os.path.getsize(path),
        )
        for path, file_format in found.items()
    ]
    return sorted(files, key=lambda f: f.name)
