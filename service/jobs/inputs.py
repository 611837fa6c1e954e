"""Which files a job reads: paths, directories, globs and URLs, resolved to a sorted list with their formats."""

from __future__ import annotations

import glob
import os
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import CorpusError
from .stores import Storage
from .urls import is_url

#: Supported formats by file suffix (how each is cut into units: :mod:`.work_units`).
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
    return next((FORMATS[suffix] for suffix in FORMATS if path.lower().endswith(suffix)), None)


@dataclass(frozen=True)
class InputFile:
    """One input file. ``path``: an absolute local path or a URL; ``name``: its path relative to the common
    directory of all inputs (``/``-separated), the same on every node whatever the mount point or bucket."""

    path: str
    name: str
    format: str
    size: int

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "format": self.format, "size": self.size}


def find_inputs(
    patterns: Sequence[str], *, exclude: Sequence[str] = (), storage: Storage | None = None
) -> list[InputFile]:
    """Files, directories (every supported file under them), globs (``**`` recurses) and URLs of any of these as
    input files, without duplicates, sorted by name (every worker sees the same list), none under ``exclude`` (a
    job's outputs). A :class:`CorpusError` for a pattern that matches nothing or a file of no supported format."""
    if not patterns:
        raise CorpusError("no inputs given: name files, directories, globs or URLs")
    storage = storage if storage is not None else Storage()
    excluded = tuple(_key(folder) + "/" for folder in exclude)
    found: dict[str, tuple[str, int]] = {}  # path or URL -> (format, size)
    for pattern in patterns:
        matches = _remote_matches(pattern, storage) if is_url(pattern) else _local_matches(pattern)
        matches = [(path, kind, size) for path, kind, size in matches if not (_key(path) + "/").startswith(excluded)]
        if not matches:
            raise CorpusError(f"no input matches {pattern!r}")
        for path, kind, size in matches:
            if kind == "directory":
                raise CorpusError(f"directory {pattern!r} holds no {'/'.join(FORMATS)} file")
            file_format = format_of(path)
            if file_format is None:
                raise CorpusError(f"{path!r}: unsupported input format; supported: {', '.join(FORMATS)}")
            found.setdefault(path, (file_format, size))
    keys = {path: _key(path) for path in found}
    root = posixpath.commonpath([posixpath.dirname(key) for key in keys.values()])
    files = [
        InputFile(path=path, name=posixpath.relpath(keys[path], root), format=file_format, size=size)
        for path, (file_format, size) in found.items()
    ]
    return sorted(files, key=lambda f: f.name)


def _key(path: str) -> str:
    """The real path, or ``/<scheme>/<bucket and key>`` for a URL (inputs of one bucket share a root, and names
    never hold a scheme)."""
    if is_url(path):
        scheme, rest = path.split("://", 1)
        return posixpath.normpath(f"/{scheme.lower()}/{rest}")
    return os.path.realpath(path).replace(os.sep, "/")


def _supported(name: str) -> bool:
    return format_of(name) is not None and not name.startswith(".")


def _local_matches(pattern: str) -> list[tuple[str, str, int]]:
    matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
    result: list[tuple[str, str, int]] = []
    for match in matches:
        if not os.path.exists(match):
            continue
        if os.path.isdir(match):
            inside = [
                os.path.join(root, name) for root, _, names in os.walk(match) for name in names if _supported(name)
            ]
            result.extend((os.path.realpath(path), "file", os.path.getsize(path)) for path in inside)
            if not inside:
                result.append((os.path.realpath(match), "directory", 0))
            continue
        result.append((os.path.realpath(match), "file", os.path.getsize(match)))
    return result


def _remote_matches(pattern: str, storage: Storage) -> list[tuple[str, str, int]]:
    fs, path = storage.filesystem(pattern)
    scheme = pattern.split("://", 1)[0]

    def url(found: str) -> str:
        return f"{scheme}://{found.split('://', 1)[-1].lstrip('/')}"

    def listing() -> list[tuple[str, str, int]]:
        fs.invalidate_cache()
        directory = not glob.has_magic(path)  # else a glob: every file it matches
        if directory:
            try:
                info = fs.info(path)
            except FileNotFoundError:
                return []
            if info.get("type") != "directory":
                return [(url(path), "file", int(info.get("size") or 0))]
        entries: dict[str, Any] = fs.find(path, detail=True) if directory else fs.glob(path, detail=True)
        files = [
            (url(name), "file", int(entry.get("size") or 0))
            for name, entry in sorted(entries.items())
            if entry.get("type") != "directory" and (not directory or _supported(posixpath.basename(name)))
        ]
        return files or ([(url(path), "directory", 0)] if directory else [])

    return storage.call(pattern, listing)
