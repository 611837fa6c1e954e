"""The ``.done`` record of each shard and the ``manifest.json`` of a finished run.

A shard's record says what it holds (documents, tokens, skipped records), what it was made from (its work
unit) and how (the tokenizer fingerprint and the output settings). A rerun keeps a shard only when all of
that matches and its files are whole; shards made with another tokenizer or other settings are refused,
never mixed. Worker 0 writes the manifest once every shard is done: the shards in order, their counts, the
tokenizer (fingerprint, source) and the settings -- what training reads (``service.pipeline.training``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..corpus import WorkUnit, atomic_write_bytes
from .shards import shard_files

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


class OutputConflict(Exception):
    """The output directory holds shards that must not be mixed with this run's (another tokenizer, other
    settings, other inputs); the message names one and says what to do."""


def shard_record(
    unit: WorkUnit,
    out: Path,
    files: list[Path],
    *,
    documents: int,
    tokens: int,
    skipped: int,
    skipped_examples: list[str],
    fingerprint: str,
    settings: dict[str, Any],
    dtype: str,
) -> dict[str, Any]:
    """The ``.done`` record of a shard whose files are in place."""
    return {
        "shard": unit.name,
        "files": [{"name": path.relative_to(out).as_posix(), "bytes": path.stat().st_size} for path in files],
        "documents": documents,
        "tokens": tokens,
        "skipped": skipped,
        "skipped_examples": skipped_examples,
        "unit": unit.describe(),
        "dtype": dtype,
        "tokenizer": {"fingerprint": fingerprint},
        "settings": settings,
    }


def check_record(
    record: dict[str, Any],
    unit: WorkUnit,
    out: Path,
    *,
    fingerprint: str,
    settings: dict[str, Any],
    output_format: str,
) -> bool:
    """Whether a done shard can be kept: True when its files are whole, False when it must be redone (a file
    is missing or has another size). Raises :class:`OutputConflict` when it was made with another tokenizer,
    other settings or from another input: those are never mixed, nor silently overwritten."""
    name = unit.name
    theirs = record.get("tokenizer", {}).get("fingerprint")
    if theirs != fingerprint:
        raise OutputConflict(
            f"{out}: shard {name} was made with tokenizer {theirs}, but the service now serves {fingerprint}; "
            "shards of different tokenizers are never mixed: use another --out, or delete the old shards"
        )
    if record.get("settings") != settings:
        raise OutputConflict(
            f"{out}: shard {name} was made with other settings ({_difference(record.get('settings'), settings)}); "
            "use another --out, or the same settings as before"
        )
    if record.get("unit") != unit.describe():
        raise OutputConflict(
            f"{out}: shard {name} was made from {record.get('unit')}, but the input is now {unit.describe()}: "
            "the input changed; use another --out, or delete the old shards"
        )
    expected = {f["name"]: f["bytes"] for f in record.get("files", [])}
    for path in shard_files(out / name, output_format):
        relative = path.relative_to(out).as_posix()
        if relative not in expected or not path.exists() or path.stat().st_size != expected[relative]:
            return False
    return True


def _difference(theirs: Any, ours: dict[str, Any]) -> str:
    if not isinstance(theirs, dict):
        return "no settings recorded"
    changed = [
        f"{key}: {theirs.get(key)!r} then, {ours.get(key)!r} now" for key in ours if theirs.get(key) != ours.get(key)
    ]
    return "; ".join(changed) or "unknown difference"


def build_manifest(
    records: list[dict[str, Any]], *, tokenizer: dict[str, Any], settings: dict[str, Any], dtype: str
) -> dict[str, Any]:
    """The manifest of a finished run, from the records of every shard in unit order."""
    shards = [
        {
            "name": record["shard"],
            "files": [f["name"] for f in record["files"]],
            "documents": record["documents"],
            "tokens": record["tokens"],
            "skipped": record["skipped"],
            "unit": record["unit"],
        }
        for record in records
    ]
    return {
        "format_version": MANIFEST_VERSION,
        "created_by": f"tokenizer-service {__version__}",
        "format": settings["format"],
        "dtype": dtype,
        "tokenizer": tokenizer,
        "settings": settings,
        "totals": {
            "shards": len(shards),
            "documents": sum(s["documents"] for s in shards),
            "tokens": sum(s["tokens"] for s in shards),
            "skipped": sum(s["skipped"] for s in shards),
        },
        "shards": shards,
    }


def write_manifest(out: Path, manifest: dict[str, Any]) -> Path:
    path = out / MANIFEST_NAME
    atomic_write_bytes(path, (json.dumps(manifest, indent=1, ensure_ascii=False) + "\n").encode())
    return path


@dataclass(frozen=True)
class ShardEntry:
    """One shard of a manifest, with its files as absolute paths."""

    name: str
    files: tuple[Path, ...]
    documents: int
    tokens: int


@dataclass(frozen=True)
class Manifest:
    """A read ``manifest.json``: ``format`` (``"parquet"`` or ``"flat"``), ``dtype`` of the ids, the shards
    in order, and the whole document for the rest (tokenizer, settings, totals)."""

    root: Path
    format: str
    dtype: str
    shards: tuple[ShardEntry, ...]
    data: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        return str(self.data["tokenizer"]["fingerprint"])

    @property
    def documents(self) -> int:
        return sum(shard.documents for shard in self.shards)

    @property
    def tokens(self) -> int:
        return sum(shard.tokens for shard in self.shards)


def read_manifest(path: str | Path) -> Manifest:
    """Read the manifest at ``path`` (the file, or the output directory holding it)."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no manifest; it is written by worker 0 once every shard is done (rerun worker 0 when "
            "the other workers have finished)"
        ) from None
    if data.get("format_version") != MANIFEST_VERSION:
        raise ValueError(f"{path}: manifest format_version {data.get('format_version')!r}, expected {MANIFEST_VERSION}")
    root = path.parent
    shards = tuple(
        ShardEntry(s["name"], tuple(root / name for name in s["files"]), int(s["documents"]), int(s["tokens"]))
        for s in data["shards"]
    )
    return Manifest(root, data["format"], data["dtype"], shards, data)
