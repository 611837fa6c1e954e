"""A shard's counts in its ``.done`` record, and the ``manifest.json`` worker 0 writes once every shard is done,
with, for Megatron, ``megatron-data-args.txt`` (the shard prefixes, for its ``--data-args-path``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..jobs import DoneRecord, Folder, Storage, is_url
from ..jobs.urls import join

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 2
MEGATRON_DATA_ARGS = "megatron-data-args.txt"
#: The counts of each shard and of the whole run, in this order.
COUNTS = ("documents", "tokens", "skipped")


@dataclass(frozen=True)
class ShardStats:
    """A shard's counts, in its ``.done`` record."""

    documents: int
    tokens: int
    skipped: int
    skipped_examples: list[str]
    dtype: str


def totals(records: list[DoneRecord[ShardStats]]) -> dict[str, int]:
    return {count: sum(getattr(record.stats, count) for record in records) for count in COUNTS}


def build_manifest(
    records: list[DoneRecord[ShardStats]], *, tokenizer: dict[str, Any], settings: dict[str, Any], dtype: str
) -> dict[str, Any]:
    """The manifest of a finished run, from every shard's record in unit order."""
    shards = [
        {
            "name": record.name,
            "files": [f.name for f in record.files],
            **{count: getattr(record.stats, count) for count in COUNTS},
            "unit": record.unit,
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
        "totals": {"shards": len(shards), **totals(records)},
        "shards": shards,
    }


def write_manifest(folder: Folder, manifest: dict[str, Any]) -> str:
    """Write the manifest (and Megatron's data-args file) into ``folder``; its URL."""
    if manifest["format"] == "megatron":
        prefixes = [folder.url(shard["name"]) for shard in manifest["shards"]]
        folder.write_bytes(MEGATRON_DATA_ARGS, ("\n".join(prefixes) + "\n").encode())
    folder.write_bytes(MANIFEST_NAME, (json.dumps(manifest, indent=1, ensure_ascii=False) + "\n").encode())
    return folder.url(MANIFEST_NAME)


@dataclass(frozen=True)
class ShardEntry:
    """One shard of a manifest, with its files as local paths (or URLs)."""

    name: str
    files: tuple[str, ...]
    documents: int
    tokens: int


@dataclass(frozen=True)
class Manifest:
    """A read ``manifest.json``: ``format`` (``"parquet"``, ``"flat"`` or ``"megatron"``), ``dtype`` of the ids,
    the shards in order, and the whole document for the rest (tokenizer, settings, totals)."""

    root: str
    format: str
    dtype: str
    shards: tuple[ShardEntry, ...]
    data: dict[str, Any]

    @property
    def fingerprint(self) -> str:
        return str(self.data["tokenizer"]["fingerprint"])

    @property
    def loss_masks(self) -> bool:
        """Whether the shards hold a loss mask beside the ids (a conversations run that wrote them)."""
        chat = self.data["settings"].get("chat") or {}
        return bool(chat.get("return_assistant_tokens_mask"))

    @property
    def documents(self) -> int:
        return sum(shard.documents for shard in self.shards)

    @property
    def tokens(self) -> int:
        return sum(shard.tokens for shard in self.shards)


def read_manifest(path: str | Path, storage: Storage | None = None) -> Manifest:
    """Read the manifest at ``path`` (the file, or the output folder holding it; a local path or a URL)."""
    location = str(path)
    if not location.endswith(".json"):
        location = join(location, MANIFEST_NAME)
    root, name = location.rsplit("/", 1) if is_url(location) else (str(Path(location).parent), Path(location).name)
    folder = (storage or Storage()).folder(root)
    try:
        data = json.loads(folder.read_bytes(name))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{location}: no manifest; it is written by worker 0 once every shard is done (rerun worker 0 when "
            "the other workers have finished)"
        ) from None
    if data.get("format_version") != MANIFEST_VERSION:
        raise ValueError(
            f"{location}: manifest format_version {data.get('format_version')!r}, expected {MANIFEST_VERSION}"
        )
    shards = tuple(
        ShardEntry(s["name"], tuple(join(root, name) for name in s["files"]), int(s["documents"]), int(s["tokens"]))
        for s in data["shards"]
    )
    return Manifest(root, data["format"], data["dtype"], shards, data)
