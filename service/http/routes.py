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
    READY_PATH,
    SAFETENSORS_MEDIA_TYPE,
    TOKENIZE_PATH,
)
from .models import DecodeRequest, EncodeRequest, LengthsRequest, Model, TokenizeRequest, parse_body
from .responses import error_response, json_response
from .runtime import Runtime

# A request still waiting for the engine after this long gets a task watching for its client's
# disconnect; most requests are answered sooner, and the watcher costs a task per request.
DISCONNECT_WATCH_AFTER = 0.05  # seconds


def _openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {JSON_MEDIA_TYPE: {"schema": model.model_json_schema()}}}}


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
            responses={200: {"content": {JSON_MEDIA_TYPE: {}, SAFETENSORS_MEDIA_TYPE: {}}}},
        )
        router.add_api_route(
            LENGTHS_PATH,
            self.lengths,
            methods=["POST"],
            response_class=Response,
            openapi_extra=_openapi_body(LengthsRequest),
        )
        router.add_api_route(
            TOKENIZE_PATH,
            self.tokenize,
            methods=["POST"],
            response_class=Response,
            openapi_extra=_openapi_body(TokenizeRequest),
        )
        router.add_api_route(
            DECODE_PATH,
            self.decode,
            methods=["POST"],
            response_class=Response,
            openapi_extra=_openapi_body(DecodeRequest),
        )
        for path, endpoint in (
            (INFO_PATH, self.info),
            (HEALTH_PATH, self.healthz),
            (READY_PATH, self.readyz),
            (METRICS_PATH, self.prometheus_metrics),
        ):
            router.add_api_route(path, endpoint, methods=["GET"], response_class=Response)
        return {ENCODE_PATH, LENGTHS_PATH, TOKENIZE_PATH, DECODE_PATH, INFO_PATH, HEALTH_PATH, READY_PATH, METRICS_PATH}

    # -- tokenizer routes -------------------------------------------------------------------------------
    async def encode(self, request: Request) -> Response:
        """Encode texts (or pairs) exactly as the in-process transformers tokenizer call would.

        JSON by default; with ``Accept: application/vnd.safetensors``, a safetensors blob of int64 arrays."""
        self.runtime.check_accepting()
        engine = self.runtime.engine
        binary = SAFETENSORS_MEDIA_TYPE in request.headers.get("accept", "")
        body = await self._parse(request, EncodeRequest)
        future = engine.submit_encode(body.texts, body.text_pairs, body.options())
        result: EncodedBatch = await _unless_client_leaves(request, future)
        self.metrics.texts.inc(len(body.texts))
        self.metrics.tokens.inc(result.num_tokens)
        headers = {FINGERPRINT_HEADER: engine.loaded.fingerprint}
        if not binary:
            return json_response(result.data, headers)
        if not result.rectangular:
            raise ServiceError(
                ErrorKind.NOT_ACCEPTABLE,
                "the rows have different lengths, which a tensor cannot hold: ask for padding "
                "(padding='longest' or 'max_length'), or accept application/json",
            )
        blob = save_safetensors(result.data, metadata={"fingerprint": engine.loaded.fingerprint})
        return Response(blob, media_type=SAFETENSORS_MEDIA_TYPE, headers=headers)

    async def lengths(self, request: Request) -> Response:
        """Token counts without the ids: ``{"lengths": [n, ...]}``, one per text (or pair), each
        ``len(tokenizer(text, text_pair, **options)["input_ids"])``; with ``return_overflowing_tokens``, one list
        per text holding the count of each of its rows."""
        self.runtime.check_accepting()
        engine = self.runtime.engine
        body = await self._parse(request, LengthsRequest)
        future = engine.submit_lengths(body.texts, body.text_pairs, body.options())
        lengths = await _unless_client_leaves(request, future)
        return json_response({LENGTHS_KEY: lengths}, {FINGERPRINT_HEADER: engine.loaded.fingerprint})

    async def tokenize(self, request: Request) -> Response:
        """Split texts (or pairs) into tokens: ``{"tokens": [[...], ...]}``, and ``"sequence_ids"`` if asked.

        As ``tokenizer.tokenize(text, pair, add_special_tokens=...)``; with ``truncation``/``max_length``, the
        tokens of the encoding ``/encode`` makes with the same options: one token per id."""
        self.runtime.check_accepting()
        engine = self.runtime.engine
        body = await self._parse(request, TokenizeRequest)
        result = await engine.tokenize_batch(
            body.texts,
            body.text_pairs,
            add_special_tokens=body.add_special_tokens,
            truncation=body.truncation,
            max_length=body.max_length,
            sequence_ids=body.return_sequence_ids,
        )
        answer: dict[str, Any] = {"tokens": result.tokens}
        if result.sequence_ids is not None:
            answer["sequence_ids"] = result.sequence_ids
        return json_response(answer, {FINGERPRINT_HEADER: engine.loaded.fingerprint})

    async def decode(self, request: Request) -> Response:
        """Turn id lists back into texts: ``{"texts": [...]}``."""
        self.runtime.check_accepting()
        engine = self.runtime.engine
        body = await self._parse(request, DecodeRequest)
        texts = await engine.decode(body.ids, body.skip_special_tokens, body.clean_up_tokenization_spaces)
        return json_response({"texts": texts}, {FINGERPRINT_HEADER: engine.loaded.fingerprint})

    # -- operations -------------------------------------------------------------------------------------
    async def info(self) -> Response:
        """What is served and how: tokenizer, fingerprint, limits, batching, parallelism, versions."""
        return json_response(
            {
                **self.runtime.engine.info(),
                "max_body_bytes": self.settings.max_body_bytes,
                "auth": self.settings.api_key is not None,
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
    async def _parse(self, request: Request, model: type[Model]) -> Model:
        return parse_body(await self._read_body(request), model)

    async def _read_body(self, request: Request) -> bytes:
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ServiceError(ErrorKind.TOO_LARGE, f"the body has {declared} bytes, over max_body_bytes={limit}")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ServiceError(ErrorKind.TOO_LARGE, f"the body exceeds max_body_bytes={limit}")
                chunks.append(chunk)
        except ClientDisconnect:
            raise ServiceError(ErrorKind.CLIENT_GONE, "the client disconnected while sending its body") from None
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
