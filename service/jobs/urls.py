"""Where a job's files are: a local path or a store's URL (``scheme://...``), and joining names to either."""

from __future__ import annotations

import re
from pathlib import Path

#: The extra that installs each store's package (``fsspec`` comes with every one of them).
EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
    "hf": "server",
}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def is_url(location: str | Path) -> bool:
    """Whether ``location`` names a store (``scheme://...``) rather than a local path (``file://`` is local)."""
    match = _URL.match(str(location))
    return match is not None and match.group(1).lower() != "file"


def local_path(location: str | Path) -> Path:
    text = str(location)
    return Path(text[len("file://") :] if text.lower().startswith("file://") else text)


def url_scheme(url: str) -> str:
    """The scheme of a store's URL, lowercased (``url`` is one: :func:`is_url`)."""
    return _URL.match(url).group(1).lower()  # type: ignore[union-attr]


def join(location: str, name: str) -> str:
    """``location/name`` for a URL or a local path (``name`` is ``/``-separated)."""
    if not name:
        return location
    return f"{location.rstrip('/')}/{name}" if is_url(location) else str(Path(location) / name)
