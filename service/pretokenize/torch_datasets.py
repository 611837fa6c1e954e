"""Map-style torch datasets over a pre-tokenization run's ``manifest.json``, read through memory maps, or where a
store holds it by ranged GETs into a bounded per-process cache (docs/guides/pretokenize.md). Safe in forked or
spawned DataLoader workers: they pickle as the manifest, the storage options and a few numbers, and each process
opens its own files, connections and cache.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..jobs import is_url
from ..jobs.stores import Storage
from ..jobs.urls import join
from .manifest import Manifest, ShardEntry, read_manifest
from .shard_values import BlockCache, MegatronIndex, RemoteValues, Values
from .shards import MASK_SUFFIXES, MASKS_COLUMN, import_pyarrow, numpy_view

_CACHED_ROW_GROUPS = 4
#: Remote Parquet shards kept open per process (each holds the storage layer's read-ahead buffer, 4 MiB).
_OPEN_REMOTE_PARQUET = 4
#: Bytes per ranged GET of a remote run's flat and Megatron files: on S3 a GET's first byte takes ~20-50 ms and
#: 1 MiB ~10 ms more, so a random read costs a round trip at any size up to this, a sequential one ~20 MB/s.
REMOTE_BLOCK_BYTES = 1 << 20
#: Bytes of blocks one process holds per dataset: the index blocks every random read touches stay in.
REMOTE_CACHE_BYTES = 32 << 20
#: The label of a token that does not count toward the loss: torch's ``cross_entropy`` ignores it, as TRL does.
IGNORE_INDEX = -100


_log = logging.getLogger(__name__)


#: A Parquet row group: the offsets and values of its id lists (and mask lists), and its kept fields' values.
_RowGroup = tuple[list[tuple[np.ndarray, np.ndarray]], dict[str, list[Any]]]


class _PerProcess:
    """One process's open files, store connections and block cache; rebuilt after a fork or in a spawned worker."""

    def __init__(self, storage_options: Mapping[str, Any]) -> None:
        self.pid = os.getpid()
        self.storage = Storage(dict(storage_options), log=_log.warning)
        self.cache = BlockCache(self.storage, REMOTE_BLOCK_BYTES, REMOTE_CACHE_BYTES)
        self.maps: dict[str, Values] = {}
        self.megatron: dict[str, MegatronIndex] = {}
        self.parquet: OrderedDict[str, tuple[Any, np.ndarray, Any]] = OrderedDict()
        self.row_groups: OrderedDict[tuple[str, int], _RowGroup] = OrderedDict()


class _ManifestDataset(Dataset[Any]):  # type: ignore[misc]  # torch is not analysed
    def __init__(
        self, manifest: str | Path | Manifest, loss_masks: bool, storage_options: Mapping[str, Any] | None
    ) -> None:
        self._storage_options = dict(storage_options or {})
        if not isinstance(manifest, Manifest):
            manifest = read_manifest(manifest, Storage(self._storage_options))
        self.manifest = manifest
        self.remote = is_url(self.manifest.root)
        self.dtype = np.dtype(self.manifest.dtype).newbyteorder("<")
        self.loss_masks = loss_masks
        if loss_masks and not self.manifest.loss_masks:
            raise ValueError(
                f"{self.manifest.root}: this run wrote no loss masks (only a conversations run writes them: "
                "pretokenize --messages-field, without --no-loss-masks); pre-tokenize the conversations again, "
                "or read the ids alone (loss_masks=False)"
            )
        self._files: _PerProcess | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": None}

    def _open(self) -> _PerProcess:
        files = self._files
        if files is None or files.pid != os.getpid():
            files = self._files = _PerProcess(self._storage_options)
        return files

    def _map(self, location: str, dtype: np.dtype[Any]) -> Values:
        files = self._open()
        array = files.maps.get(location)
        if array is None:
            size = files.cache.size(location) if self.remote else Path(location).stat().st_size
            if size == 0:  # an empty shard: nothing to map
                array = np.zeros(0, dtype=dtype)
            elif self.remote:
                array = RemoteValues(files.cache, location, dtype, 0, size // dtype.itemsize)
            else:
                array = np.memmap(location, dtype=dtype, mode="r")
            files.maps[location] = array
        return array

    def _megatron_index(self, location: str) -> MegatronIndex:
        files = self._open()
        index = files.megatron.get(location)
        if index is None:
            values: Callable[[np.dtype[Any], int, int], Values]
            if self.remote:
                head = files.cache.read(location, 0, MegatronIndex.HEAD_BYTES)
                values = partial(RemoteValues, files.cache, location)
            else:
                with open(location, "rb") as stream:
                    head = stream.read(MegatronIndex.HEAD_BYTES)
                values = partial(_mapped, location)
            index = files.megatron[location] = MegatronIndex.read(location, head, values)
        return index

    def _loss(self, shard: ShardEntry) -> Values:
        return self._map(self._shard_file(shard, MASK_SUFFIXES["flat"][0]), np.dtype("u1"))

    def _shard_file(self, shard: ShardEntry, suffix: str) -> str:
        path = join(self.manifest.root, shard.name + suffix)
        if path not in shard.files:
            raise FileNotFoundError(f"shard {shard.name} lists no {shard.name + suffix} (files: {shard.files})")
        return path


class TokenizedDocuments(_ManifestDataset):
    """The documents of a pre-tokenization run, in manifest order: ``dataset[i]`` is document ``i``'s ids as a
    1-D int64 tensor, or with ``fields`` or ``loss_masks`` a dict of tensors and values.

    With ``loss_masks=True`` (a conversations run: ``pretokenize --messages-field``) each item is
    ``{"input_ids", "assistant_masks", "labels"}``, int64 tensors of one length: the ids, the run's mask (1 where
    the assistant wrote the token: it counts toward the loss), and the ids with ``-100`` where the mask is 0, not
    shifted (transformers' models shift them; TRL's ``DataCollatorForLanguageModeling`` pads them with ``-100``).

    Documents have different lengths: a DataLoader needs a ``collate_fn`` that pads (or packs) them, defined at
    module level so that spawned workers can unpickle it.

    Args:
        manifest: the run's output folder -- a local directory or a URL (``s3://bucket/run``, ``gs://``, any
            fsspec store) --, its ``manifest.json``, or a :class:`Manifest`.
        fields: columns kept by the run (``pretokenize --keep-field``) to return beside the ids.
        loss_masks: return each document's loss mask and labels beside its ids (a run that wrote masks).
        storage_options: for a run on object storage, the jobs' ``--storage-options`` (an endpoint, a region...),
            passed to the filesystem in each process, never printed; credentials come from the store's own chain.

    Raises:
        ValueError: the run did not keep one of ``fields``, or wrote no loss masks and ``loss_masks`` is set;
            when read, a remote shard changed while it was read.
        FileNotFoundError: no finished run there (worker 0 writes ``manifest.json`` last).
        StorageError: the store refused (the message names the URL and what to fix), or failed for longer than the
            retry deadline (300 s; each failure is retried, a warning on this module's logger saying how).

    Example:
        ```python
        from torch.nn.utils.rnn import pad_sequence
        from torch.utils.data import DataLoader

        def pad(documents):
            return pad_sequence(documents, batch_first=True, padding_value=0)

        loader = DataLoader(TokenizedDocuments("tokens/"), batch_size=8, num_workers=2, collate_fn=pad)

        # A conversations run: the ids and the labels, padded with -100 (the loss skips them).
        def pad_chats(chats):
            return {
                "input_ids": pad_sequence([c["input_ids"] for c in chats], batch_first=True, padding_value=0),
                "labels": pad_sequence([c["labels"] for c in chats], batch_first=True, padding_value=-100),
            }

        chats = TokenizedDocuments("chat-tokens/", loss_masks=True)
        loader = DataLoader(chats, batch_size=8, num_workers=2, collate_fn=pad_chats)
        ```
    """

    def __init__(
        self,
        manifest: str | Path | Manifest,
        *,
        fields: Sequence[str] = (),
        loss_masks: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(manifest, loss_masks, storage_options)
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
        values: dict[str, Any] = {}
        masks = None
        if self.manifest.format == "flat":
            ends = self._map(shard.files[1], np.dtype("<u8"))
            start, end = int(ends[local - 1]) if local else 0, int(ends[local])
            ids = np.asarray(self._map(shard.files[0], self.dtype)[start:end])
            if self.loss_masks:
                masks = np.asarray(self._loss(shard)[start:end])
        elif self.manifest.format == "megatron":
            ids = self._megatron_values(shard, "", local)
            if self.loss_masks:
                masks = self._megatron_values(shard, ".loss", local)
        else:
            ids, masks, values = self._parquet_document(shard, local)
        if masks is not None:
            return {**_with_labels(ids, masks), **values}
        tensor = torch.from_numpy(ids.astype(np.int64))
        if not self.fields:
            return tensor
        return {"input_ids": tensor, **values}

    def _megatron_values(self, shard: ShardEntry, prefix: str, local: int) -> np.ndarray:
        """Document ``local`` of the shard's ``<shard><prefix>.bin``/``.idx``."""
        index = self._megatron_index(self._shard_file(shard, prefix + ".idx"))
        start, end = index.span(local)
        return np.asarray(self._map(self._shard_file(shard, prefix + ".bin"), index.dtype)[start:end])

    def _parquet_document(self, shard: ShardEntry, local: int) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any]]:
        path = shard.files[0]
        files = self._open()
        parquet = files.parquet.get(path)
        if parquet is None:
            _, pq = import_pyarrow()  # a remote file: its footer, then the row groups asked for, by ranged GETs
            stream = files.storage.open_input(path) if self.remote else None
            reader = pq.ParquetFile(stream if stream is not None else path)
            rows = [reader.metadata.row_group(g).num_rows for g in range(reader.metadata.num_row_groups)]
            parquet = files.parquet[path] = (reader, np.cumsum([0, *rows]), stream)
            if stream is not None and len(files.parquet) > _OPEN_REMOTE_PARQUET:  # each holds a read-ahead buffer
                _, (_, _, dropped) = files.parquet.popitem(last=False)
                dropped.close()
        else:
            files.parquet.move_to_end(path)
        reader, group_starts, _ = parquet
        group = int(np.searchsorted(group_starts, local, side="right")) - 1
        key = (path, group)
        cached = files.row_groups.get(key)
        if cached is None:
            cached = files.row_groups[key] = self._read_row_group(reader, group)
            if len(files.row_groups) > _CACHED_ROW_GROUPS:
                files.row_groups.popitem(last=False)
        else:
            files.row_groups.move_to_end(key)
        row = local - int(group_starts[group])
        lists, kept = cached
        ids, *masks = (values[int(offsets[row]) : int(offsets[row + 1])] for offsets, values in lists)
        return ids, masks[0] if masks else None, {name: column[row] for name, column in kept.items()}

    def _read_row_group(self, reader: Any, group: int) -> _RowGroup:
        lists = ["input_ids", *([MASKS_COLUMN] if self.loss_masks else [])]
        table = reader.read_row_group(group, columns=[*lists, *self.fields])
        arrays = [table.column(name).combine_chunks() for name in lists]
        return (
            [(numpy_view(array.offsets), numpy_view(array.values)) for array in arrays],
            {name: table.column(name).to_pylist() for name in self.fields},
        )


class TokenBlocks(_ManifestDataset):
    """Fixed-length blocks of a flat-format run's token stream (every document's ids back to back, with the eos
    id between them if the run appended it, in manifest order): ``dataset[i]`` is tokens
    ``[i * block_size, (i + 1) * block_size)`` as a 1-D int64 tensor; the last partial block is left out. For
    next-token prediction take ``block_size = context + 1`` and ``x, y = block[:-1], block[1:]``.

    With ``loss_masks=True`` (a conversations run, ``--format flat``) ``dataset[i]`` is ``{"input_ids",
    "assistant_masks", "labels"}``: the block, its tokens' loss masks and the block with ``-100`` where the mask
    is 0, not shifted: pass ``input_ids`` and ``labels`` to a transformers model as they are (it shifts), or take
    ``x, y = input_ids[:-1], labels[1:]`` for a loss of your own.

    Args:
        manifest: as :class:`TokenizedDocuments` takes it.
        block_size: tokens per block.
        loss_masks: return each block's loss masks and labels beside its ids (a run that wrote masks).
        storage_options: as :class:`TokenizedDocuments` takes them.

    Raises:
        ValueError: the run is not in the flat format (``pretokenize --format flat``), wrote no loss masks and
            ``loss_masks`` is set, or ``block_size`` is below 1.
        FileNotFoundError: no finished run there.
        StorageError: as :class:`TokenizedDocuments`.

    Example:
        ```python
        loader = DataLoader(TokenBlocks("tokens/", block_size=1025), batch_size=32, shuffle=True, num_workers=4)
        for block in loader:
            x, y = block[:, :-1], block[:, 1:]

        # A conversations run: the loss counts the assistant's tokens only.
        chats = DataLoader(TokenBlocks("chat-tokens/", block_size=1025, loss_masks=True), batch_size=32)
        for batch in chats:
            x, y = batch["input_ids"][:, :-1], batch["labels"][:, 1:]
        ```
    """

    def __init__(
        self,
        manifest: str | Path | Manifest,
        block_size: int,
        *,
        loss_masks: bool = False,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(manifest, loss_masks, storage_options)
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

    def __getitem__(self, index: int) -> Any:
        index = _checked_index(index, len(self))
        start = index * self.block_size
        end = start + self.block_size
        ids = self._cut(self._tokens, start, end)
        if not self.loss_masks:
            return torch.from_numpy(ids.astype(np.int64))
        masks = self._cut(self._loss, start, end)
        return _with_labels(ids, masks)

    def _tokens(self, shard: ShardEntry) -> Values:
        return self._map(shard.files[0], self.dtype)

    def _cut(self, stream: Callable[[ShardEntry], Values], start: int, end: int) -> np.ndarray:
        """Values ``[start, end)`` of every shard's ``stream(shard)`` back to back."""
        pieces = []
        shard_number = int(np.searchsorted(self._starts, start, side="right")) - 1
        while start < end:
            shard = self.manifest.shards[shard_number]
            offset = int(self._starts[shard_number])
            stop = min(end, int(self._starts[shard_number + 1]))
            if stop > start:
                pieces.append(np.asarray(stream(shard)[start - offset : stop - offset]))
                start = stop
            shard_number += 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def _mapped(path: str, dtype: np.dtype[Any], offset: int, count: int) -> np.ndarray:
    return np.memmap(path, dtype, "r", offset, (count,))


def _with_labels(ids: np.ndarray, masks: np.ndarray) -> dict[str, torch.Tensor]:
    if len(masks) != len(ids):
        raise ValueError(f"{len(masks)} loss mask values for {len(ids)} ids: the run's mask files are damaged")
    input_ids = torch.from_numpy(ids.astype(np.int64))
    assistant_masks = torch.from_numpy(masks.astype(np.int64))
    labels = input_ids.masked_fill(assistant_masks == 0, IGNORE_INDEX)
    return {"input_ids": input_ids, "assistant_masks": assistant_masks, "labels": labels}


def _checked_index(index: int, length: int) -> int:
    index = int(index)
    if index < 0:
        index += length
    if not 0 <= index < length:
        raise IndexError(f"index {index} out of range for a dataset of {length}")
    return index
