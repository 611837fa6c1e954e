"""How the values of a run's flat and Megatron files are read: memory maps on a local disk, or, where a store holds
the run, ranged GETs through the storage layer into a bounded block cache (one per process and dataset); and a
Megatron-LM ``.idx`` read over either. numpy only: the torch datasets (:mod:`.torch_datasets`) sit on it."""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..jobs.stores import Storage
from .shards import MEGATRON_DTYPE_CODES, MEGATRON_HEADER

_MEGATRON_DTYPES = {code: np.dtype(name).newbyteorder("<") for name, code in MEGATRON_DTYPE_CODES.items()}


class BlockCache:
    """Fixed-size blocks of a store's objects, read by ranged GETs through the storage layer, the least recently
    used dropped once they hold more than ``capacity`` bytes. One per process and dataset."""

    def __init__(self, storage: Storage, block_bytes: int, capacity: int) -> None:
        self.storage = storage
        self.block_bytes = block_bytes
        self.capacity = max(capacity, block_bytes)
        self.blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self.held = 0
        self.sizes: dict[str, int] = {}

    def size(self, url: str) -> int:
        size = self.sizes.get(url)
        if size is None:
            fs, path = self.storage.filesystem(url)
            size = self.sizes[url] = self.storage.call(url, lambda: int(fs.size(path)))
        return size

    def read(self, url: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        step = self.block_bytes
        first, last = start // step, (end - 1) // step
        if first == last:
            return self._block(url, first)[start - first * step : end - first * step]
        out = bytearray(end - start)
        for number in range(first, last + 1):
            block = self._block(url, number)
            low, high = max(start, number * step), min(end, (number + 1) * step)
            out[low - start : high - start] = block[low - number * step : high - number * step]
        return bytes(out)

    def _block(self, url: str, number: int) -> bytes:
        key = (url, number)
        block = self.blocks.get(key)
        if block is not None:
            self.blocks.move_to_end(key)
            return block
        size = self.size(url)
        start, end = number * self.block_bytes, min(size, (number + 1) * self.block_bytes)
        fs, path = self.storage.filesystem(url)
        block = self.storage.call(url, lambda: bytes(fs.cat_file(path, start=start, end=end)))
        if len(block) != end - start:
            raise ValueError(
                f"{url}: {len(block)} bytes at offset {start}, expected {end - start} (an object of {size} bytes): "
                "the object changed while it was read; is a run being written there?"
            )
        self.blocks[key] = block
        self.held += len(block)
        while self.held > self.capacity:
            _, dropped = self.blocks.popitem(last=False)
            self.held -= len(dropped)
        return block


class RemoteValues:
    """``count`` values of ``dtype`` at byte ``offset`` of a store's object, read by blocks: a memory map's stand-in."""

    def __init__(self, cache: BlockCache, url: str, dtype: np.dtype[Any], offset: int, count: int) -> None:
        self.cache, self.url, self.dtype, self.offset, self.count = cache, url, dtype, offset, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: int | slice) -> Any:
        size = self.dtype.itemsize
        if isinstance(key, slice):
            start, stop, step = key.indices(self.count)
            if step != 1:
                raise ValueError("remote values are read in contiguous slices")
            stop = max(start, stop)
            data = self.cache.read(self.url, self.offset + start * size, self.offset + stop * size)
            return np.frombuffer(data, self.dtype)
        index = int(key) + (self.count if int(key) < 0 else 0)
        if not 0 <= index < self.count:
            raise IndexError(f"{self.url}: value {key} of {self.count}")
        return self[index : index + 1][0]


#: What a flat or Megatron file's values are read as: a memory map (local) or ranged reads (a store).
Values = np.ndarray | RemoteValues


@dataclass(frozen=True)
class MegatronIndex:
    """A Megatron-LM ``.idx``: ``IndexedDataset``'s ``sequence_lengths``, ``sequence_pointers`` (byte offsets in
    ``.bin``) and ``document_indices``, as memory maps or remote values."""

    dtype: np.dtype[Any]
    lengths: Values
    pointers: Values
    document_indices: Values

    HEAD_BYTES = len(MEGATRON_HEADER) + 8 + 1 + 8 + 8

    @classmethod
    def read(cls, location: str, head: bytes, values: Callable[[np.dtype[Any], int, int], Values]) -> MegatronIndex:
        """The index at ``location`` from its first :attr:`HEAD_BYTES` and ``values(dtype, offset, count)``."""
        if len(head) < cls.HEAD_BYTES or not head.startswith(MEGATRON_HEADER):
            raise ValueError(f"{location}: not a Megatron-LM index (no {MEGATRON_HEADER!r} header)")
        _, code, sequences, documents = struct.unpack("<QBQQ", head[len(MEGATRON_HEADER) : cls.HEAD_BYTES])
        if code not in _MEGATRON_DTYPES:
            raise ValueError(f"{location}: dtype code {code}, not one a pre-tokenization run writes")
        offset = cls.HEAD_BYTES

        def mapped(dtype: str, count: int) -> Values:
            nonlocal offset
            array = np.zeros(0, dtype) if count == 0 else values(np.dtype(dtype), offset, count)
            offset += count * np.dtype(dtype).itemsize
            return array

        return cls(_MEGATRON_DTYPES[code], mapped("<i4", sequences), mapped("<i8", sequences), mapped("<i8", documents))

    def span(self, document: int) -> tuple[int, int]:
        """Document ``document``'s values ``[start, end)`` in ``.bin``."""
        first, stop = int(self.document_indices[document]), int(self.document_indices[document + 1])
        if first == stop:  # a document without ids has no sequence
            return 0, 0
        start = int(self.pointers[first]) // self.dtype.itemsize
        return start, int(self.pointers[stop - 1]) // self.dtype.itemsize + int(self.lengths[stop - 1])
