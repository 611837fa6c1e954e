"""The routes: each reads a request, calls the engine, and writes the answer. None of them tokenizes."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from safetensors.numpy import save as save_safetensors
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ..engine import EncodedBatch, ErrorKind, ForkGuard, ServiceError
from ..engine.memory import Reservation
from ..wire import (
    DECODE_PATH,
    ENCODE_PATH,
    FINGERPRINT_HEADER,
    HEALTH_PATH,
    INFO_PATH,
    JSON_MEDIA_TYPE,
    LENGTHS_KEY,
    LENGTHS_PATH,
    METRICS_PATH,
    RAGGED_MEDIA_TYPE,
    READY_PATH,
    SAFETENSORS_MEDIA_TYPE,
    TOKENIZE_PATH,
)
from .middleware import hold_until_sent
from .models import DecodeRequest, EncodeRequest, ErrorBody, LengthsRequest, Model, TokenizeRequest, parse_body
from .negotiation import check_json_body, wants_ragged, wants_safetensors
from .responses import STATUS_BY_KIND, BodyResponse, error_response, json_response, ragged_arrays
from .runtime import Runtime

# A request still waiting for the engine after this long gets a task watching for its client's
# disconnect; most requests are answered sooner, and the watcher costs a task per request.
DISCONNECT_WATCH_AFTER = 0.05  # seconds


def _openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {JSON_MEDIA_TYPE: {"schema": model.model_json_schema()}}}}


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}}
# What each error status means to a caller, for the OpenAPI schema (the kinds behind it: STATUS_BY_KIND).
_ERROR_MEANINGS = {
    400: "Not HTTP/1.1 the server can parse (the connection is closed after the answers before it).",
    401: "Missing or wrong API key (when the server has one).",
    406: "A ragged result asked for as safetensors: ask for padding, or accept JSON.",
    408: "The request's headers or body took too long to arrive (the connection is closed).",
    413: "Over a limit (body, texts, characters, response tokens) or over the whole memory budget.",
    415: "The body is not uncompressed UTF-8 JSON.",
    422: "Malformed JSON, a wrong or unknown field, or options the tokenizer refuses.",
    429: "The queue is full or the memory budget has no room now: retry after Retry-After.",
    431: "The request line and headers are over the limit (the connection is closed).",
    503: "Not ready, or draining: retry after Retry-After, elsewhere (the connection is closed).",
    504: "Waited past the queue deadline.",
}


def _error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    assert set(statuses) <= set(STATUS_BY_KIND.values())
    responses: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorBody, "description": _ERROR_MEANINGS[status]}
        if status in (429, 503):
            entry["headers"] = _RETRY_AFTER
        responses[status] = entry
    return responses


# Every route can answer these (auth and the protocol's limits apply to all)
_ANY_ROUTE = (400, 401, 408, 431, 503)
_WORK_ROUTE = (*_ANY_ROUTE, 413, 415, 422, 429, 504)


class Routes:
    """The route functions of one app, bound to its :class:`Runtime`."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.metrics = runtime.metrics

    def install(self, app: FastAPI) -> set[str]:
        """Register every route on ``app``; returns their paths."""
        router = app.router
        router.add_api_route(
            ENCODE_PATH,
            self.encode,
            methods=["POST"],
            response_class=Response,
            openapi_extra=_openapi_body(EncodeRequest),
            responses={
                200: {"content": {JSON_MEDIA_TYPE: {}, SAFETENSORS_MEDIA_TYPE: {}, RAGGED_MEDIA_TYPE: {}}},
                **_error_responses(*_WORK_ROUTE, 406),
            },
        )
        for path, endpoint, model in (
            (LENGTHS_PATH, self.lengths, LengthsRequest),
            (TOKENIZE_PATH, self.tokenize, TokenizeRequest),
            (DECODE_PATH, self.decode, DecodeRequest),
        ):
            router.add_api_route(
                path,
                endpoint,
                methods=["POST"],
                response_class=Response,
                openapi_extra=_openapi_body(model),
                responses={200: {"content": {JSON_MEDIA_TYPE: {}}}, **_error_responses(*_WORK_ROUTE)},
            )
        for path, get, media_type in (
            (INFO_PATH, self.info, JSON_MEDIA_TYPE),
            (HEALTH_PATH, self.healthz, JSON_MEDIA_TYPE),
            (READY_PATH, self.readyz, JSON_MEDIA_TYPE),
            (METRICS_PATH, self.prometheus_metrics, "text/plain"),
        ):
            responses = {200: {"content": {media_type: {}}}, **_error_responses(*_ANY_ROUTE)}
            router.add_api_route(path, get, methods=["GET"], response_class=Response, responses=responses)
            # HEAD answers as GET without the body (RFC 9110 9.3.2); left out of the schema as FastAPI would
            # give both operations one id
            router.add_api_route(path, get, methods=["HEAD"], response_class=Response, include_in_schema=False)
        return {ENCODE_PATH, LENGTHS_PATH, TOKENIZE_PATH, DECODE_PATH, INFO_PATH, HEALTH_PATH, READY_PATH, METRICS_PATH}

    # -- tokenizer routes -------------------------------------------------------------------------------
    async def encode(self, request: Request) -> Response:
        """Encode texts (or pairs) exactly as the in-process transformers tokenizer call would.

        JSON by default; with ``Accept: application/vnd.safetensors``, a safetensors blob of int64 arrays; with
        ``Accept: application/vnd.tokenizer-service.ragged+safetensors``, the same with each row-major key
        flat (rows concatenated) and the rows' lengths, so ragged results need no padding."""
        self.runtime.check_accepting()
        engine = self.runtime.engine
        accept = request.headers.get("accept")
        ragged = wants_ragged(accept)
        binary = ragged or wants_safetensors(accept)
        body, reservation = await self._parse(request, EncodeRequest)
        future = engine.submit_encode(body.texts, body.text_pairs, body.options(), reservation)
        result: EncodedBatch = await _unless_client_leaves(request, future)
        self.metrics.texts.inc(len(body.texts))
        self.metrics.tokens.inc(result.num_tokens)
        headers = {FINGERPRINT_HEADER: engine.loaded.fingerprint}
        if not binary:
            return json_response(result.data, headers)
        if ragged:
            blob = save_safetensors(ragged_arrays(result.data), metadata={"fingerprint": engine.loaded.fingerprint})
            return BodyResponse(blob, media_type=RAGGED_MEDIA_TYPE, headers=headers)
        if not result.rectangular:
            raise ServiceError(
                ErrorKind.NOT_ACCEPTABLE,
                "the rows have different lengths, which a tensor cannot hold: ask for padding "
                "(padding='longest' or 'max_length'), or accept application/json",
            )
        blob = save_safetensors(result.data, metadata={"fingerprint": engine.loaded.fingerprint})
        return BodyResponse(blob, media_type=SAFETENSORS_MEDIA_TYPE, headers=headers)

    async def lengths(self, request: Request) -> Response:
        """Token counts without the ids: ``{"lengths": [n, ...]}``, one per text (or pair), each
        ``len(tokenizer(text, text_pair, **options)["input_ids"])``; with ``return_overflowing_tokens``, one list
        per text holding the count of each of its rows."""
        self.runtime.check_accepting()
        engine = self.runtime.engine
        body, reservation = await self._parse(request, LengthsRequest)
        future = engine.submit_lengths(body.texts, body.text_pairs, body.options(), reservation)
        lengths = await _unless_client_leaves(request, future)
        return json_response({LENGTHS_KEY: lengths}, {FINGERPRINT_HEADER: engine.loaded.fingerprint})

    async def tokenize(self, request: Request) -> Response:
        """Split texts (or pairs) into tokens: ``{"tokens": [[...], ...]}``, and ``"sequence_ids"`` if asked.

        As ``tokenizer.tokenize(text, pair, add_special_tokens=...)``; with ``truncation``/``max_length``, the
        tokens of the encoding ``/encode`` makes with the same options: one token per id."""
        self.runtime.check_accepting()
        engine = self.runtime.engine
        body, reservation = await self._parse(request, TokenizeRequest)
        result = await engine.tokenize_batch(
            body.texts,
            body.text_pairs,
            add_special_tokens=body.add_special_tokens,
            truncation=body.truncation,
            max_length=body.max_length,
            sequence_ids=body.return_sequence_ids,
            reservation=reservation,
        )
        answer: dict[str, Any] = {"tokens": result.tokens}
        if result.sequence_ids is not None:
            answer["sequence_ids"] = result.sequence_ids
        return json_response(answer, {FINGERPRINT_HEADER: engine.loaded.fingerprint})

    async def decode(self, request: Request) -> Response:
        """Turn id lists back into texts: ``{"texts": [...]}``."""
        self.runtime.check_accepting()
        engine = self.runtime.engine
        body, reservation = await self._parse(request, DecodeRequest, ids=True)
        texts = await engine.decode(body.ids, body.skip_special_tokens, body.clean_up_tokenization_spaces, reservation)
        return json_response({"texts": texts}, {FINGERPRINT_HEADER: engine.loaded.fingerprint})

    # -- operations -------------------------------------------------------------------------------------
    async def info(self) -> Response:
        """What is served and how: tokenizer, fingerprint, limits, batching, parallelism, versions."""
        return json_response(
            {
                **self.runtime.engine.info(),
                "max_body_bytes": self.settings.max_body_bytes,
                "auth": self.settings.api_key is not None,
                "http": {
                    "max_header_bytes": self.settings.max_header_bytes,
                    "header_timeout_seconds": self.settings.header_timeout_seconds,
                    "body_timeout_seconds": self.settings.body_timeout_seconds,
                    "max_connections": self.settings.max_connections,
                    "keep_alive_seconds": self.settings.keep_alive_seconds,
                },
            }
        )

    async def healthz(self) -> Response:
        """Liveness: the process answers."""
        return json_response({"status": "alive"})

    async def readyz(self) -> Response:
        """Readiness: the tokenizer is loaded and the server is not draining (503 otherwise)."""
        if not self.runtime.ready:
            return error_response(ErrorKind.UNAVAILABLE, f"not ready: {self.runtime.not_ready_reason()}")
        return json_response({"status": "ready"})

    async def prometheus_metrics(self) -> Response:
        """Prometheus text format."""
        self.metrics.forks.set(ForkGuard.forks_after_load)
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # -- reading bodies ---------------------------------------------------------------------------------
    async def _parse(self, request: Request, model: type[Model], ids: bool = False) -> tuple[Model, Reservation]:
        """The body as ``model``, and the memory reservation made for it before it was read (held until
        the answer is sent; the engine resizes it to the request's bound)."""
        headers = request.headers
        check_json_body(headers.get("content-type"), headers.get("content-encoding"))
        limit = self.settings.max_body_bytes
        declared = headers.get("content-length")
        size = int(declared) if declared is not None and declared.isdigit() else None
        if size is not None and size > limit:
            raise ServiceError(ErrorKind.TOO_LARGE, f"the body has {size} bytes, over max_body_bytes={limit}")
        engine = self.runtime.engine
        # before reading: an overloaded server refuses without taking in the body
        reservation = engine.reserve_intake(size or 0, ids=ids)
        hold_until_sent(request.scope, reservation)
        body = await self._read_body(request, size, reservation, ids)
        return parse_body(body, model), reservation

    async def _read_body(
        self, request: Request, size: int | None, reservation: Reservation, ids: bool
    ) -> bytes | bytearray:
        """The body, in one buffer: with a Content-Length, copied into place as it arrives (never the
        chunks and a joined copy at once); without one, the reservation grows as the body comes."""
        limit = self.settings.max_body_bytes
        buffer = bytearray(size) if size else None
        chunks: list[bytes] = []
        received = 0
        reserved = size or 0
        try:
            async for chunk in request.stream():
                if not chunk:
                    continue
                end = received + len(chunk)
                if end > limit:
                    raise ServiceError(ErrorKind.TOO_LARGE, f"the body exceeds max_body_bytes={limit}")
                if buffer is not None:
                    buffer[received:end] = chunk  # the server's parser holds the body to its Content-Length
                else:
                    if end > reserved:
                        reserved = min(limit, max(2 * end, 64 * 1024))
                        self.runtime.engine.resize_intake(reservation, reserved, ids=ids)
                    chunks.append(chunk)
                received = end
        except ClientDisconnect:
            raise ServiceError(ErrorKind.CLIENT_GONE, "the client disconnected while sending its body") from None
        if buffer is not None:
            return buffer if received == len(buffer) else buffer[:received]
        return b"".join(chunks)


async def _unless_client_leaves(request: Request, future: asyncio.Future[Any]) -> Any:
    """Await the engine's ``future``; if the client disconnects first, cancel it (the batcher then drops
    the request unencoded) and raise CLIENT_GONE. The watcher starts only for requests still waiting
    after ``DISCONNECT_WATCH_AFTER``."""
    watch = _DisconnectWatch(request, future)
    timer = asyncio.get_running_loop().call_later(DISCONNECT_WATCH_AFTER, watch.start)
    try:
        return await future
    except asyncio.CancelledError:
        if watch.client_left:
            raise ServiceError(ErrorKind.CLIENT_GONE, "the client disconnected before its answer") from None
        raise  # the handler itself was cancelled: the future went with it
    finally:
        timer.cancel()
        watch.stop()


class _DisconnectWatch:
    def __init__(self, request: Request, future: asyncio.Future[Any]) -> None:
        self.receive = request.receive
        self.future = future
        self.task: asyncio.Task[None] | None = None
        self.client_left = False

    def start(self) -> None:
        if not self.future.done():
            self.task = asyncio.ensure_future(self._watch())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        if not self.future.done():
            self.client_left = True
            self.future.cancel()
