"""How the service answers: each error kind's status (from the wire's one status table), the one error body
shape, JSON built as bytes, and safetensors blobs built in one copy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..engine.errors import ErrorKind, ServiceError
from ..wire import (
    AUTH_SCHEME,
    ERROR_FIELD,
    ERROR_TYPE_FIELD,
    ERROR_TYPES,
    JSON_MEDIA_TYPE,
    PER_ROW_KEYS,
    RAGGED_ROW_LENGTHS,
    RETRY_AFTER_HEADER,
    SAFETENSORS_DTYPES,
)
from .errors import AnyErrorKind, HttpErrorKind

# Every error kind (the engine's, then HTTP's own), with its status from the one status table (wire.ERROR_TYPES).
STATUS_BY_KIND: dict[AnyErrorKind, int] = {
    kind: ERROR_TYPES[kind.value].status for kind in (*ErrorKind, *HttpErrorKind)
}
# Statuses Starlette raises itself (unknown path, wrong method, ...), read back as kinds.
KIND_BY_STATUS: dict[int, AnyErrorKind] = {
    STATUS_BY_KIND[kind]: kind
    for kind in (
        HttpErrorKind.NOT_FOUND,
        HttpErrorKind.METHOD_NOT_ALLOWED,
        ErrorKind.TOO_LARGE,
        HttpErrorKind.UNSUPPORTED_MEDIA_TYPE,
    )
}


def error_body(kind: AnyErrorKind, message: str) -> bytes:
    """The one error body shape, as bytes: ``{"error": message, "error_type": kind}``."""
    return orjson.dumps({ERROR_FIELD: message, ERROR_TYPE_FIELD: kind.value})


def error_response(
    kind: AnyErrorKind, message: str, retry_after: float | None = None, headers: Mapping[str, str] | None = None
) -> Response:
    """An error answer (:func:`error_body`), with the headers its kind calls for."""
    headers = dict(headers or {})
    if retry_after is not None:
        headers[RETRY_AFTER_HEADER] = str(max(1, round(retry_after)))
    if kind is HttpErrorKind.UNAUTHORIZED:
        headers["WWW-Authenticate"] = AUTH_SCHEME
    if kind is ErrorKind.UNAVAILABLE:  # not ready or draining: the client should reconnect (elsewhere)
        headers["Connection"] = "close"
    return Response(error_body(kind, message), STATUS_BY_KIND[kind], headers, JSON_MEDIA_TYPE)


def answer_error(error: ServiceError) -> Response:
    """The answer to an error the engine or the web layer raised (a kind of neither is a bug: internal)."""
    kind = error.kind if isinstance(error.kind, (ErrorKind, HttpErrorKind)) else ErrorKind.INTERNAL
    return error_response(kind, error.message, error.retry_after)


#: A body larger than this is sent in pieces of this size.
BODY_PIECE_BYTES = 1 << 20

#: What an answer's body is made of: bytes, or byte views of arrays (sent as they are, never joined).
BodyPart = bytes | memoryview


class BodyResponse(Response):
    """A 200 whose body, or its parts (a safetensors answer: its header, then each array's buffer), is handed to
    the server unjoined in pieces of at most :data:`BODY_PIECE_BYTES`: write backpressure then holds this
    coroutine -- and the request's reservation -- while a client is slow to read (not the whole body buffered)."""

    def __init__(
        self, content: BodyPart | Sequence[BodyPart], media_type: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self.parts = (content,) if isinstance(content, (bytes, memoryview)) else tuple(content)
        super().__init__(None, 200, headers, media_type)
        length = str(sum(map(len, self.parts))).encode()
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.raw_headers.append((b"content-length", length))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        views = [memoryview(part) for part in self.parts]
        pieces = [
            view[start : start + BODY_PIECE_BYTES]
            for view in views
            for start in range(0, max(len(view), 1), BODY_PIECE_BYTES)
        ]
        last = len(pieces) - 1
        for i, piece in enumerate(pieces):
            await send({"type": "http.response.body", "body": piece, "more_body": i < last})


def json_bytes(payload: Any) -> bytes:
    """``payload`` as JSON, serialised by orjson (numpy arrays included): FastAPI's default encoding of a dict
    response was measured at a third of the in-process speed."""
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


def json_response(payload: Any) -> Response:
    return BodyResponse(json_bytes(payload), media_type=JSON_MEDIA_TYPE)


_SAFETENSORS_DTYPES = {np.dtype(numpy_name): name for name, numpy_name in SAFETENSORS_DTYPES.items()}


def safetensors_parts(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> list[BodyPart]:
    """``arrays`` as a safetensors blob (the tensors of ``safetensors.numpy.save(arrays, metadata)``) in parts:
    the header, padded with spaces to 8 bytes as ``save`` pads it, then each array's own bytes, uncopied
    (``save`` copies each array three times: 0.6 ms of GIL-held time for a batch of 256 x 128, measured)."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    parts: list[BodyPart] = []
    offset = 0
    for name, array in arrays.items():
        dtype = _SAFETENSORS_DTYPES.get(array.dtype)
        if dtype is None:
            raise TypeError(f"{name}: no safetensors dtype for {array.dtype}")
        if not array.flags.c_contiguous:
            array = array.copy()  # (np.ascontiguousarray would make a 0-d array 1-d)
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
        parts.append(array.reshape(-1).view(np.uint8).data)  # (a 0-d or empty array too: flat bytes)
    encoded = orjson.dumps(header)
    encoded += b" " * (-len(encoded) % 8)
    return [len(encoded).to_bytes(8, "little") + encoded, *parts]


def ragged_arrays(data: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """An encode result (``[rows, width]`` arrays, or lists of rows) in the ragged binary layout
    (``service.wire.RAGGED_MEDIA_TYPE``): each per-token key as its rows concatenated (``offset_mapping``:
    ``[tokens, 2]``), the per-row keys as ``[rows]``, and ``row_lengths``."""
    arrays: dict[str, np.ndarray] = {}
    row_lengths: np.ndarray | None = None
    for key, value in data.items():
        if key in PER_ROW_KEYS:
            arrays[key] = np.asarray(value, dtype=np.int64).reshape(-1)
            continue
        width = 2 if key == "offset_mapping" else 1
        if isinstance(value, np.ndarray):
            rows, columns = value.shape[0], value.shape[1]
            lengths = np.full(rows, columns, dtype=np.int64)
            flat = value.reshape(rows * columns, *value.shape[2:])
        else:
            lengths = np.fromiter(map(len, value), dtype=np.int64, count=len(value))
            pieces = [np.asarray(row, dtype=np.int64).reshape(-1, width) for row in value]
            flat = np.concatenate(pieces) if pieces else np.zeros((0, width), dtype=np.int64)
            if width == 1:
                flat = flat.reshape(-1)
        arrays[key] = flat
        row_lengths = lengths
    assert row_lengths is not None, "an encode result always holds input_ids"
    arrays[RAGGED_ROW_LENGTHS] = row_lengths
    return arrays
