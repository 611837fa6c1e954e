"""Turning response bodies into what a transformers tokenizer call returns.

The binary answer is a safetensors blob. We read its (tiny, JSON) header ourselves and make every array a
``numpy.frombuffer`` *view* of the response body, and ``torch.from_numpy`` a view of that: no copy at all
from the socket buffer to the tensor. (``safetensors.torch.load(bytes)`` copies each tensor out of the blob
first, and yields read-only memory; ours are writable, as the in-process tokenizer's are, because the
default transport reads the body into a ``bytearray``.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from ..wire import OUTPUT_KEYS
from .exceptions import ProtocolError

# transformers' BatchEncoding key order; unknown keys keep their place after these.
_RANK = {key: i for i, key in enumerate(OUTPUT_KEYS)}

# safetensors dtype -> numpy dtype string (little-endian, as the format is)
_DTYPES = {
    "BOOL": "?",
    "U8": "u1",
    "I8": "i1",
    "U16": "<u2",
    "I16": "<i2",
    "U32": "<u4",
    "I32": "<i4",
    "U64": "<u8",
    "I64": "<i8",
    "F16": "<f2",
    "F32": "<f4",
    "F64": "<f8",
}


class EncodeResult(Mapping[str, Any]):
    """The result of an encode call: a read-only mapping with the keys, order and values of the
    transformers ``BatchEncoding`` the in-process tokenizer returns for the same call (lists, numpy
    arrays or torch tensors, by ``return_tensors``). Keys are also attributes (``result.input_ids``)."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getstate__(self) -> dict[str, Any]:
        return self._data

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._data = state

    @property
    def data(self) -> dict[str, Any]:
        """The underlying dict (as ``BatchEncoding.data``)."""
        return self._data

    def to(self, device: Any) -> EncodeResult:
        """Move torch tensors to ``device`` (as ``BatchEncoding.to``); other values are kept."""
        return EncodeResult({k: v.to(device) if hasattr(v, "to") else v for k, v in self._data.items()})

    def __repr__(self) -> str:
        return f"EncodeResult({self._data!r})"


def ordered(data: dict[str, Any]) -> dict[str, Any]:
    if list(data) == sorted(data, key=lambda k: _RANK.get(k, len(_RANK))):
        return data
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
            dtype = np.dtype(_DTYPES[entry["dtype"]])
            shape = tuple(entry["shape"])
            start, end = entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"{url}: bad safetensors entry {name!r}: {entry!r}", url=url) from exc
        count = 1
        for dim in shape:
            count *= dim
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
    """Make JSON lists identical to a ``return_tensors=None`` BatchEncoding: offsets are tuples, and a
    single (unbatched) text loses its batch dimension unless overflowing tokens were asked for."""
    data = ordered(data)
    offsets = data.get("offset_mapping")
    if offsets is not None:
        data["offset_mapping"] = [[tuple(pair) for pair in row] for row in offsets]
    if not batched and not overflowing:
        data = {k: (v[0] if len(v) > 0 and isinstance(v[0], list) else v) for k, v in data.items()}
    return data
