"""Turning response bodies into what a transformers tokenizer call returns.

The binary answer is a safetensors blob whose (tiny, JSON) header we read ourselves: every array is a
``numpy.frombuffer`` view of the body, and ``torch.from_numpy`` a view of that, with no copy from the socket buffer
to the tensor (``safetensors.torch.load`` copies, into read-only memory; ours are writable, as in-process ones are,
because the default transport reads the body into a ``bytearray``).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from ..transport.exceptions import ProtocolError
from ..wire import OUTPUT_KEYS, PER_ROW_KEYS, RAGGED_ROW_LENGTHS, SAFETENSORS_DTYPES

# transformers' BatchEncoding key order; unknown keys keep their place after these.
_RANK = {key: i for i, key in enumerate(OUTPUT_KEYS)}


class EncodeResult(Mapping[str, Any]):
    """The result of an encode call: a read-only mapping with the keys, order and values of the ``BatchEncoding`` the
    in-process tokenizer returns for the same call (lists, numpy arrays or torch tensors, by ``return_tensors``).
    Keys are also attributes (``result.input_ids``)."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def data(self) -> dict[str, Any]:
        """The underlying dict (as ``BatchEncoding.data``)."""
        return self._data

    def to(self, device: Any) -> EncodeResult:
        """Move torch tensors to ``device`` (as ``BatchEncoding.to``); other values are kept."""
        return EncodeResult({k: v.to(device) if hasattr(v, "to") else v for k, v in self._data.items()})

    def __repr__(self) -> str:
        return f"EncodeResult({self._data!r})"


class RaggedResult(Mapping[str, Any]):
    """The result of :meth:`~service.client.TokenizerClient.encode_ragged`: rows of any lengths, held flat, with no
    padding and no Python list per token (what pre-tokenization writes to disk as it is).

    ``result["input_ids"]`` is one int64 numpy array of every row's ids concatenated (``offset_mapping``:
    ``[tokens, 2]``; ``length`` and ``overflow_to_sample_mapping``: one value per row), ``row_lengths`` the length of
    each row: row ``i`` is ``flat[row_offsets[i]:row_offsets[i + 1]]``. ``rows(key)`` splits a key into per-row views
    and ``tolist()`` gives exactly the lists of an unpadded batched transformers call.
    """

    __slots__ = ("_arrays", "row_lengths", "row_offsets")

    def __init__(self, arrays: dict[str, Any], row_lengths: Any) -> None:
        import numpy as np

        self._arrays = arrays
        self.row_lengths = row_lengths
        self.row_offsets = np.zeros(len(row_lengths) + 1, dtype=np.int64)
        np.cumsum(row_lengths, out=self.row_offsets[1:])

    @classmethod
    def from_lists(cls, data: dict[str, Any]) -> RaggedResult:
        """From a JSON answer's lists of rows (from a server that predates the ragged binary)."""
        import numpy as np

        arrays: dict[str, Any] = {}
        lengths = np.zeros(0, dtype=np.int64)
        for key, value in ordered(data).items():
            if key in PER_ROW_KEYS:
                arrays[key] = np.asarray(value, dtype=np.int64).reshape(-1)
                continue
            lengths = np.fromiter(map(len, value), dtype=np.int64, count=len(value))
            flat = [item for row in value for item in row]
            arrays[key] = np.asarray(flat, dtype=np.int64).reshape((-1, 2) if key == "offset_mapping" else (-1,))
        return cls(arrays, lengths)

    @property
    def num_rows(self) -> int:
        return len(self.row_lengths)

    def __getitem__(self, key: str) -> Any:
        return self._arrays[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def rows(self, key: str = "input_ids") -> list[Any]:
        """The rows of ``key`` as numpy views of the flat array (per-row keys as they are)."""
        flat = self._arrays[key]
        if key in PER_ROW_KEYS:
            return list(flat)
        bounds = self.row_offsets.tolist()
        return [flat[start:end] for start, end in itertools.pairwise(bounds)]

    def tolist(self) -> dict[str, Any]:
        """Plain lists, equal to ``tokenizer(texts, **options)`` (batched, lists) for the same call."""
        out: dict[str, Any] = {}
        for key, flat in self._arrays.items():
            if key in PER_ROW_KEYS:
                out[key] = flat.tolist()
            elif key == "offset_mapping":
                out[key] = [[tuple(pair) for pair in row.tolist()] for row in self.rows(key)]
            else:
                out[key] = [row.tolist() for row in self.rows(key)]
        return out

    def __repr__(self) -> str:
        return f"RaggedResult(rows={self.num_rows}, keys={list(self._arrays)})"


def ragged_from_safetensors(body: bytes | bytearray, url: str) -> RaggedResult:
    """A ragged binary answer (``service.wire.RAGGED_MEDIA_TYPE``) as a :class:`RaggedResult` of views."""
    arrays = arrays_from_safetensors(body, url)
    row_lengths = arrays.pop(RAGGED_ROW_LENGTHS, None)
    if row_lengths is None or row_lengths.ndim != 1:
        raise ProtocolError(f"{url}: a ragged answer without a 1-D {RAGGED_ROW_LENGTHS!r} entry", url=url)
    total = int(row_lengths.sum())
    for key, array in arrays.items():
        expected = len(row_lengths) if key in PER_ROW_KEYS else total
        if array.shape[0] != expected:
            raise ProtocolError(f"{url}: ragged entry {key!r} has {array.shape[0]} values, not {expected}", url=url)
    return RaggedResult(arrays, row_lengths)


def ordered(data: dict[str, Any]) -> dict[str, Any]:
    return {k: data[k] for k in sorted(data, key=lambda k: _RANK.get(k, len(_RANK)))}


def arrays_from_safetensors(body: bytes | bytearray, url: str) -> dict[str, Any]:
    """numpy arrays viewing ``body`` (copied once into a bytearray first if ``body`` is read-only)."""
    import numpy as np

    if isinstance(body, bytes):
        body = bytearray(body)  # frombuffer over bytes would give read-only arrays
    if len(body) < 8:
        raise ProtocolError(f"{url}: a safetensors answer of {len(body)} bytes has no header", url=url)
    header_length = int.from_bytes(body[:8], "little")
    base = 8 + header_length
    if base > len(body):
        raise ProtocolError(f"{url}: safetensors header length {header_length} exceeds the body", url=url)
    try:
        header = json.loads(bytes(body[8:base]))
    except ValueError as exc:
        raise ProtocolError(f"{url}: unreadable safetensors header ({exc})", url=url) from exc
    arrays: dict[str, Any] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = np.dtype(SAFETENSORS_DTYPES[entry["dtype"]])
            shape = tuple(entry["shape"])
            start, end = entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"{url}: bad safetensors entry {name!r}: {entry!r}", url=url) from exc
        count = math.prod(shape)
        if end - start != count * dtype.itemsize or base + end > len(body):
            raise ProtocolError(f"{url}: safetensors entry {name!r} does not fit its shape {shape}", url=url)
        if count == 0:
            arrays[name] = np.empty(shape, dtype=dtype)
        else:
            arrays[name] = np.frombuffer(body, dtype=dtype, count=count, offset=base + start).reshape(shape)
    return ordered(arrays)


def to_torch(arrays: dict[str, Any]) -> dict[str, Any]:
    import torch

    return {name: torch.from_numpy(array) for name, array in arrays.items()}


def lists_as_transformers_gives(data: dict[str, Any], batched: bool, overflowing: bool) -> dict[str, Any]:
    """JSON lists as a ``return_tensors=None`` BatchEncoding holds them: offsets as tuples, and a single text without
    its batch dimension unless overflowing tokens were asked for."""
    data = ordered(data)
    offsets = data.get("offset_mapping")
    if offsets is not None:
        data["offset_mapping"] = [[tuple(pair) for pair in row] for row in offsets]
    if not batched and not overflowing:
        data = {k: (v[0] if len(v) > 0 and isinstance(v[0], list) else v) for k, v in data.items()}
    return data
