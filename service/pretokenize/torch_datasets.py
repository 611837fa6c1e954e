"""Reading pre-tokenized shards back in training: map-style torch datasets over a ``manifest.json``.

- :class:`TokenizedDocuments`: document ``i`` of the run (in manifest order) as an int64 id tensor, from
  either format; with ``fields=`` a dict that also holds the kept fields (Parquet).
- :class:`TokenBlocks`: fixed-length blocks of the flat format's token stream (every document's ids back
  to back, shard after shard) for LM pre-training.

Both are safe in DataLoader workers, forked or spawned: they pickle as the manifest and a few numbers,
and each process opens its own memory maps and Parquet readers on first use (a map or a file opened in
the parent is never used in a child).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..corpus import is_url
from .manifest import Manifest, ShardEntry, read_manifest
from .shards import import_pyarrow, numpy_view

_CACHED_ROW_GROUPS = 4


def _manifest(source: str | Path | Manifest) -> Manifest:
    manifest = source if isinstance(source, Manifest) else read_manifest(source)
    if is_url(manifest.root):
        raise ValueError(
            f"{manifest.root}: the torch datasets read local shards (memory maps); copy the run to a local disk "
            "first (aws s3 sync, gcloud storage rsync...)"
        )
    if manifest.format == "megatron":
        raise ValueError(f"{manifest.root}: a megatron run is read by megatron-core's IndexedDataset")
    return manifest


class _PerProcess:
    """Open files of one process; rebuilt after a fork or in a spawned worker (never pickled)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.maps: dict[Path, np.ndarray] = {}
        self.parquet: dict[Path, Any] = {}
        self.row_groups: OrderedDict[tuple[Path, int], tuple[np.ndarray, np.ndarray, dict[str, list[Any]]]] = (
            OrderedDict()
        )


class _ManifestDataset(Dataset[Any]):  # type: ignore[misc]  # torch is not analysed
    def __init__(self, manifest: str | Path | Manifest) -> None:
        self.manifest = _manifest(manifest)
        self.dtype = np.dtype(self.manifest.dtype).newbyteorder("<")
        self._files: _PerProcess | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": None}

    def _open(self) -> _PerProcess:
        files = self._files
        if files is None or files.pid != os.getpid():
            files = self._files = _PerProcess()
        return files

    def _map(self, path: Path, dtype: np.dtype[Any]) -> np.ndarray:
        files = self._open()
        array = files.maps.get(path)
        if array is None:
            if path.stat().st_size == 0:  # an empty shard: nothing to map
                array = np.zeros(0, dtype=dtype)
            else:
                array = np.memmap(path, dtype=dtype, mode="r")
            files.maps[path] = array
        return array


class TokenizedDocuments(_ManifestDataset):
    """The documents of a pre-tokenization run, in manifest order: ``dataset[i]`` is document ``i``'s ids as a
    1-D int64 tensor (``input_ids``), or with ``fields`` a dict ``{"input_ids": tensor, field: value...}`` of
    the kept fields (Parquet runs only).

    Documents have different lengths, so a DataLoader needs a ``collate_fn`` that pads them (or packs them);
    define it at module level, so spawned workers can unpickle it.

    Args:
        manifest: the run's output directory (local), its ``manifest.json``, or a :class:`Manifest`.
        fields: columns kept by the run (``pretokenize --keep-field``) to return beside the ids.

    Raises:
        ValueError: the run is on object storage (copy it to a local disk first), in the megatron format (read
            by megatron-core's ``IndexedDataset``), or did not keep one of ``fields``.
        FileNotFoundError: no finished run there (worker 0 writes ``manifest.json`` last).

    Example:
        ```python
        from torch.nn.utils.rnn import pad_sequence
        from torch.utils.data import DataLoader

        def pad(documents):
            return pad_sequence(documents, batch_first=True, padding_value=0)

        loader = DataLoader(TokenizedDocuments("tokens/"), batch_size=8, num_workers=2, collate_fn=pad)
        ```
    """

    def __init__(self, manifest: str | Path | Manifest, *, fields: Sequence[str] = ()) -> None:
        super().__init__(manifest)
        self.fields = tuple(fields)
        if self.fields:
            kept = self.manifest.data["settings"].get("keep_fields", [])
            unknown = [name for name in self.fields if name not in kept]
            if unknown:
                raise ValueError(f"fields {unknown} were not kept by this run (kept: {kept})")
        self._starts = np.cumsum([0] + [shard.documents for shard in self.manifest.shards])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> Any:
        index = _checked_index(index, len(self))
        shard_number = int(np.searchsorted(self._starts, index, side="right")) - 1
        shard = self.manifest.shards[shard_number]
        local = index - int(self._starts[shard_number])
        if self.manifest.format == "flat":
            ids = self._flat_document(shard, local)
            values: dict[str, Any] = {}
        else:
            ids, values = self._parquet_document(shard, local)
        tensor = torch.from_numpy(ids.astype(np.int64))
        if not self.fields:
            return tensor
        return {"input_ids": tensor, **values}

    def _flat_document(self, shard: ShardEntry, local: int) -> np.ndarray:
        tokens_path, index_path = Path(shard.files[0]), Path(shard.files[1])
        ends = self._map(index_path, np.dtype("<u8"))
        start = int(ends[local - 1]) if local else 0
        return np.asarray(self._map(tokens_path, self.dtype)[start : int(ends[local])])

    def _parquet_document(self, shard: ShardEntry, local: int) -> tuple[np.ndarray, dict[str, Any]]:
        path = Path(shard.files[0])
        files = self._open()
        parquet = files.parquet.get(path)
        if parquet is None:
            _, pq = import_pyarrow()
            reader = pq.ParquetFile(path)
            rows = [reader.metadata.row_group(g).num_rows for g in range(reader.metadata.num_row_groups)]
            parquet = files.parquet[path] = (reader, np.cumsum([0, *rows]))
        reader, group_starts = parquet
        group = int(np.searchsorted(group_starts, local, side="right")) - 1
        key = (path, group)
        cached = files.row_groups.get(key)
        if cached is None:
            table = reader.read_row_group(group, columns=["input_ids", *self.fields])
            column = table.column("input_ids").combine_chunks()
            offsets = numpy_view(column.offsets)
            values = numpy_view(column.values)
            kept = {name: table.column(name).to_pylist() for name in self.fields}
            cached = (offsets, values, kept)
            files.row_groups[key] = cached
            if len(files.row_groups) > _CACHED_ROW_GROUPS:
                files.row_groups.popitem(last=False)
        else:
            files.row_groups.move_to_end(key)
        offsets, values, kept = cached
        row = local - int(group_starts[group])
        ids = values[int(offsets[row]) : int(offsets[row + 1])]
        return ids, {name: column[row] for name, column in kept.items()}


class TokenBlocks(_ManifestDataset):
    """Fixed-length blocks of a flat-format run's token stream: every document's ids back to back (with the
    eos id between documents if the run appended it), shard after shard in manifest order. ``dataset[i]``
    is tokens ``[i * block_size, (i + 1) * block_size)`` as a 1-D int64 tensor; the last partial block is
    left out. For next-token prediction take ``block_size = context + 1`` and ``x, y = block[:-1], block[1:]``.

    Args:
        manifest: the run's output directory (local), its ``manifest.json``, or a :class:`Manifest`.
        block_size: tokens per block.

    Raises:
        ValueError: the run is not in the flat format (``pretokenize --format flat``), is on object storage,
            or ``block_size`` is below 1.

    Example:
        ```python
        loader = DataLoader(TokenBlocks("tokens/", block_size=1025), batch_size=32, shuffle=True, num_workers=4)
        for block in loader:
            x, y = block[:, :-1], block[:, 1:]
        ```
    """

    def __init__(self, manifest: str | Path | Manifest, block_size: int) -> None:
        super().__init__(manifest)
        if self.manifest.format != "flat":
            raise ValueError(
                f"TokenBlocks reads the flat format; this run is {self.manifest.format!r} "
                "(use TokenizedDocuments, or pre-tokenize with --format flat)"
            )
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, not {block_size}")
        self.block_size = block_size
        self._starts = np.cumsum([0] + [shard.tokens for shard in self.manifest.shards])

    def __len__(self) -> int:
        return int(self._starts[-1]) // self.block_size

    def __getitem__(self, index: int) -> torch.Tensor:
        index = _checked_index(index, len(self))
        start = index * self.block_size
        end = start + self.block_size
        pieces = []
        shard_number = int(np.searchsorted(self._starts, start, side="right")) - 1
        while start < end:
            shard = self.manifest.shards[shard_number]
            offset = int(self._starts[shard_number])
            stop = min(end, int(self._starts[shard_number + 1]))
            if stop > start:
                tokens = self._map(Path(shard.files[0]), self.dtype)
                pieces.append(tokens[start - offset : stop - offset])
                start = stop
            shard_number += 1
        block = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return torch.from_numpy(block.astype(np.int64))


def _checked_index(index: int, length: int) -> int:
    index = int(index)
    if index < 0:
        index += length
    if not 0 <= index < length:
        raise IndexError(f"index {index} out of range for a dataset of {length}")
    return index
