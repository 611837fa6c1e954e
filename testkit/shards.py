"""A finished pre-tokenize run's documents, read back without the package's readers, beside its inputs' (tests
compare the two)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq


def input_documents(root: Path, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """Every document of ``names`` in the order a run writes them (files by name, then in file order),
    read here without the package's reader."""
    documents: list[tuple[str, dict[str, Any]]] = []
    for name in sorted(names):
        path = root / name
        if name.endswith(".parquet"):
            documents.extend((row.pop("text"), row) for row in pq.read_table(path).to_pylist())
        elif name.endswith(".txt"):
            documents.extend((line, {}) for line in path.read_text("utf-8").split("\n")[:-1])
        else:
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as lines:
                for line in lines:
                    record = json.loads(line)
                    documents.append((record.pop("text"), record))
    return documents


def shard_documents(out: Path) -> list[tuple[list[int], dict[str, Any]]]:
    """Every document of a finished run, in manifest order: (ids, other columns)."""
    manifest = json.loads((out / "manifest.json").read_text())
    dtype = np.dtype(manifest["dtype"]).newbyteorder("<")
    documents: list[tuple[list[int], dict[str, Any]]] = []
    for shard in manifest["shards"]:
        files = [out / name for name in shard["files"]]
        if manifest["format"] == "parquet":
            rows = pq.read_table(files[0]).to_pylist()
            documents.extend((row.pop("input_ids"), row) for row in rows)
        else:
            tokens = np.fromfile(files[0], dtype=dtype)
            ends = np.fromfile(files[1], dtype="<u8")
            starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
            documents.extend((tokens[s:e].tolist(), {}) for s, e in zip(starts, ends.astype(np.int64), strict=True))
        assert len(documents) == sum(s["documents"] for s in manifest["shards"][: manifest["shards"].index(shard) + 1])
    return documents
