"""The routes. Every POST route (:class:`WorkRoute`: request model, engine submit, answer shaping) takes one
path, :meth:`Routes.serve`, which answers its errors too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import FastAPI
from pydantic import BaseModel
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ..engine import BodyKind, EncodedBatch, Engine, ErrorKind, ForkGuard, ServiceError, TokenizedBatch, TokenizeOptions
from ..engine.memory import Reservation
from ..wire import (
    CHAT_ENCODE_PATH,
    CHAT_RENDER_PATH,
    DECODE_PATH,
    ENCODE_PATH,
    ERROR_TYPES,
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
from .errors import AnyErrorKind, HttpErrorKind
from .metrics import Metrics
from .middleware import hold_until_sent
from .models import (
    ChatRequest,
    DecodeRequest,
    EncodeRequest,
    ErrorBody,
    LengthsRequest,
    TextsRequest,
    TokenizeRequest,
    parse_body,
)
from .negotiation import check_json_body, encode_answer_type, json_answer_type
from .responses import (
    STATUS_BY_KIND,
    BodyPart,
    BodyResponse,
    answer_error,
    error_response,
    json_bytes,
    json_response,
    ragged_arrays,
    safetensors_parts,
)
from .runtime import Runtime

# Seconds before a waiting request gets a task (a cost most never pay) watching for its client's disconnect.
DISCONNECT_WATCH_AFTER = 0.05

Body = TypeVar("Body", bound=BaseModel)
Result = TypeVar("Result")


@dataclass(frozen=True)
class AnswerContext:
    """What shaping an answer may use beside the body and the result."""

    media_type: str  # chosen from Accept by the route's ``answer_type``
    fingerprint: str  # the served tokenizer's
    metrics: Metrics


@dataclass(frozen=True)
class WorkRoute(Generic[Body, Result]):
    """``submit`` queues the parsed body with its reservation; ``answer`` shapes the result into bytes of the media
    type ``answer_type`` picks from ``Accept`` (one of ``media_types``); ``body``: what the body holds (its parsing
    cost); ``doc``: the OpenAPI description; ``errors``: the kinds it answers beyond every work route's."""

    path: str
    name: str
    doc: str
    request: type[Body]
    submit: Callable[[Engine, Body, Reservation], asyncio.Future[Result]]
    answer: Callable[[Body, Result, AnswerContext], BodyPart | list[BodyPart]]
    media_types: tuple[str, ...] = (JSON_MEDIA_TYPE,)
    answer_type: Callable[[str | None], str] = json_answer_type
    body: BodyKind = BodyKind.TEXTS
    errors: tuple[AnyErrorKind, ...] = ()


def _encoded_answer(rows: int, result: EncodedBatch, answering: AnswerContext) -> bytes | list[BodyPart]:
    """An encode's answer (JSON, safetensors, or the ragged binary), whatever its inputs were."""
    answering.metrics.texts.inc(rows)
    answering.metrics.tokens.inc(result.num_tokens)
    metadata = {"fingerprint": answering.fingerprint}
    if answering.media_type == JSON_MEDIA_TYPE:
        return json_bytes(result.data)
    if answering.media_type == RAGGED_MEDIA_TYPE:
        return safetensors_parts(ragged_arrays(result.data), metadata)
    if not result.rectangular:
        raise ServiceError(
            HttpErrorKind.NOT_ACCEPTABLE,
            "the rows have different lengths, which a tensor cannot hold: ask for padding "
            "(padding='longest' or 'max_length'), or accept application/json",
        )
    return safetensors_parts(result.data, metadata)


def _tokenize_answer(body: TextsRequest[TokenizeOptions], result: TokenizedBatch, answering: AnswerContext) -> bytes:
    answer: dict[str, Any] = {"tokens": result.tokens}
    if result.sequence_ids is not None:
        answer["sequence_ids"] = result.sequence_ids
    return json_bytes(answer)


WORK_ROUTES: tuple[WorkRoute[Any, Any], ...] = (
    WorkRoute(
        ENCODE_PATH,
        "encode",
        "Encode texts (or pairs) exactly as the in-process transformers tokenizer call would.\n\n"
        "JSON by default; with ``Accept: application/vnd.safetensors``, a safetensors blob of int64 arrays; with "
        "``Accept: application/vnd.tokenizer-service.ragged+safetensors``, the same with each row-major key flat "
        "(rows concatenated) and the rows' lengths, so ragged results need no padding.",
        EncodeRequest,
        lambda engine, body, r: engine.submit_encode(body.texts, body.text_pairs, body.options(), reservation=r),
        lambda body, result, answering: _encoded_answer(len(body.texts), result, answering),
        media_types=(JSON_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE, RAGGED_MEDIA_TYPE),
        answer_type=encode_answer_type,
        errors=(HttpErrorKind.NOT_ACCEPTABLE,),
    ),
    WorkRoute(
        LENGTHS_PATH,
        "lengths",
        'Token counts without the ids: ``{"lengths": [n, ...]}``, one per text (or pair), each '
        '``len(tokenizer(text, text_pair, **options)["input_ids"])``; with ``return_overflowing_tokens``, one list '
        "per text holding the count of each of its rows.",
        LengthsRequest,
        lambda engine, body, r: engine.submit_lengths(body.texts, body.text_pairs, body.options(), reservation=r),
        lambda body, lengths, answering: json_bytes({LENGTHS_KEY: lengths}),
    ),
    WorkRoute(
        TOKENIZE_PATH,
        "tokenize",
        'Split texts (or pairs) into tokens: ``{"tokens": [[...], ...]}``, and ``"sequence_ids"`` if asked.\n\n'
        "As ``tokenizer.tokenize(text, pair, add_special_tokens=...)``; with ``truncation``/``max_length``, the "
        "tokens of the encoding ``/encode`` makes with the same options: one token per id.",
        TokenizeRequest,
        lambda engine, body, r: engine.submit_tokenize(body.texts, body.text_pairs, body.options(), reservation=r),
        _tokenize_answer,
    ),
    WorkRoute(
        DECODE_PATH,
        "decode",
        'Turn id lists back into texts: ``{"texts": [...]}``.',
        DecodeRequest,
        lambda engine, body, r: engine.submit_decode(body.ids, body.options(), reservation=r),
        lambda body, texts, answering: json_bytes({"texts": texts}),
        body=BodyKind.IDS,
    ),
    WorkRoute(
        CHAT_ENCODE_PATH,
        "chat_encode",
        "Encode conversations exactly as ``tokenizer.apply_chat_template(conversations, tokenize=True, "
        "return_dict=True, **options)`` would: ``input_ids``, ``attention_mask`` and, with "
        "``return_assistant_tokens_mask``, ``assistant_masks`` (1 for each token the assistant wrote).\n\n"
        "Masks come from the template's ``{% generation %}`` markers, and a template without them is refused "
        '(422) rather than answered with transformers\' all-zero mask; ``"assistant_masks_from": "turns"`` marks '
        "each assistant message's rendered turn instead, exactly, or refuses a template that rewrites earlier turns. "
        "Answered as ``/encode`` answers: JSON, safetensors or the ragged binary.",
        ChatRequest,
        lambda engine, body, r: engine.submit_chat_encode(body.conversations, body.options(), reservation=r),
        lambda body, result, answering: _encoded_answer(len(body.conversations), result, answering),
        media_types=(JSON_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE, RAGGED_MEDIA_TYPE),
        answer_type=encode_answer_type,
        body=BodyKind.MESSAGES,
        errors=(HttpErrorKind.NOT_ACCEPTABLE,),
    ),
    WorkRoute(
        CHAT_RENDER_PATH,
        "chat_render",
        'The rendered conversations: ``{"texts": [...]}``, exactly ``tokenizer.apply_chat_template(conversations, '
        "tokenize=False, **options)``, what the model sees (the encode's options are ignored there).",
        ChatRequest,
        lambda engine, body, r: engine.submit_chat_render(body.conversations, body.options(), reservation=r),
        lambda body, texts, answering: json_bytes({"texts": texts}),
        body=BodyKind.MESSAGES,
    ),
)


def _openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {JSON_MEDIA_TYPE: {"schema": model.model_json_schema()}}}}


_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}}


def _error_responses(*kinds: AnyErrorKind) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of these error kinds, by status, with their advice from ``service.wire.ERROR_TYPES``."""
    advice: dict[int, list[str]] = {}
    for kind in kinds:
        error = ERROR_TYPES[kind.value]
        advice.setdefault(error.status, []).append(error.advice)
    responses: dict[int | str, dict[str, Any]] = {}
    for status, sentences in advice.items():
        entry: dict[str, Any] = {"model": ErrorBody, "description": " ".join(sentences)}
        if status in (STATUS_BY_KIND[ErrorKind.OVERLOADED], STATUS_BY_KIND[ErrorKind.UNAVAILABLE]):
            entry["headers"] = _RETRY_AFTER
        responses[status] = entry
    return responses


# Every route can answer these (auth and the protocol's limits apply to all)
_ANY_ROUTE = (
    HttpErrorKind.MALFORMED_HTTP,
    HttpErrorKind.UNAUTHORIZED,
    HttpErrorKind.REQUEST_TIMEOUT,
    HttpErrorKind.HEADERS_TOO_LARGE,
    ErrorKind.UNAVAILABLE,
)
_WORK_ROUTE = (
    *_ANY_ROUTE,
    ErrorKind.TOO_LARGE,
    HttpErrorKind.UNSUPPORTED_MEDIA_TYPE,
    ErrorKind.INVALID_REQUEST,
    ErrorKind.TOKENIZER,
    ErrorKind.OVERLOADED,
    ErrorKind.TIMEOUT,
)


class Routes:
    """The route functions of one app, bound to its :class:`Runtime`."""

    def __init__(self, runtime: Runtime, work_routes: Sequence[WorkRoute[Any, Any]] = WORK_ROUTES) -> None:
        self.runtime = runtime
        self.settings = runtime.settings
        self.metrics = runtime.metrics
        #: path -> work route: what :class:`DirectWorkRoutes` dispatches
        self.work_routes = {route.path: route for route in work_routes}

    def install(self, app: FastAPI) -> set[str]:
        """Register every route on ``app``; returns their paths."""
        router = app.router
        for route in self.work_routes.values():
            # No dependencies= (nor Depends() parameters, nor on the router or the app): DirectWorkRoutes answers these
            # POSTs before FastAPI's routing, so they would never run, and the app refuses to start with them
            # (direct_routes.py). Per-request work goes in serve() or in a middleware (as BearerAuth is).
            router.add_api_route(
                route.path,
                self._endpoint(route),
                methods=["POST"],
                name=route.name,
                description=route.doc,
                response_class=Response,
                openapi_extra=_openapi_body(route.request),
                responses={
                    200: {"content": {media_type: {} for media_type in route.media_types}},
                    **_error_responses(*_WORK_ROUTE, *route.errors),
                },
            )
        for path, get, media_type in (
            (INFO_PATH, self.info, JSON_MEDIA_TYPE),
            (HEALTH_PATH, self.healthz, JSON_MEDIA_TYPE),
            (READY_PATH, self.readyz, JSON_MEDIA_TYPE),
            (METRICS_PATH, self.prometheus_metrics, "text/plain"),
        ):
            responses = {200: {"content": {media_type: {}}}, **_error_responses(*_ANY_ROUTE)}
            router.add_api_route(path, get, methods=["GET"], response_class=Response, responses=responses)
            # HEAD: GET without the body (RFC 9110 9.3.2); not in the schema (FastAPI gives both one operation id)
            router.add_api_route(path, get, methods=["HEAD"], response_class=Response, include_in_schema=False)
        return {*self.work_routes, INFO_PATH, HEALTH_PATH, READY_PATH, METRICS_PATH}

    def _endpoint(self, route: WorkRoute[Any, Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            return await self.serve(route, request)

        return endpoint

    async def serve(self, route: WorkRoute[Body, Result], request: Request) -> Response:
        """Refuse while draining; read ``Accept``; reserve memory for the body, read and parse it; submit; await
        the answer, cancelling the work if the client leaves first; answer with the tokenizer's fingerprint."""
        try:
            self.runtime.check_accepting()
            engine = self.runtime.engine
            headers = request.headers
            media_type = route.answer_type(headers.get("accept"))
            check_json_body(headers.get("content-type"), headers.get("content-encoding"))
            limit = self.settings.max_body_bytes
            declared = headers.get("content-length")
            size = int(declared) if declared is not None and declared.isdigit() else None
            if size is not None and size > limit:
                raise ServiceError(ErrorKind.TOO_LARGE, f"the body has {size} bytes, over max_body_bytes={limit}")
            # reserved before reading (an overloaded server refuses unread bodies) and held until the answer is sent
            reservation = engine.reserve_intake(size or 0, body=route.body)
            hold_until_sent(request.scope, reservation)
            body = parse_body(await self._read_body(request, size, reservation, route.body), route.request)
            result = await _unless_client_leaves(request, route.submit(engine, body, reservation))
            fingerprint = engine.loaded.fingerprint
            content = route.answer(body, result, AnswerContext(media_type, fingerprint, self.metrics))
            return BodyResponse(content, media_type=media_type, headers={FINGERPRINT_HEADER: fingerprint})
        except ServiceError as error:
            return answer_error(error)

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

    async def _read_body(
        self, request: Request, size: int | None, reservation: Reservation, kind: BodyKind
    ) -> bytes | bytearray:
        """The body in one buffer: as it came if in one piece, else with a Content-Length copied into place as it
        arrives (never chunks and a joined copy at once); without one, the reservation grows as it comes."""
        limit = self.settings.max_body_bytes
        buffer: bytearray | None = None
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
                if not size:
                    if end > reserved:
                        # doubling: about log2(n) resizes (budget transactions that may refuse), never over twice
                        # what arrived; the floor makes a small body of many chunks one resize
                        reserved = min(limit, max(2 * end, 64 * 1024))
                        self.runtime.engine.resize_intake(reservation, reserved, body=kind)
                    chunks.append(chunk)
                elif not received and end == size:  # (the server's parser holds the body to its Content-Length)
                    chunks.append(chunk)
                else:
                    if buffer is None:
                        buffer = bytearray(size)
                    buffer[received:end] = chunk
                received = end
        except ClientDisconnect:
            raise ServiceError(HttpErrorKind.CLIENT_GONE, "the client disconnected while sending its body") from None
        if buffer is not None:
            return buffer if received == len(buffer) else buffer[:received]
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _unless_client_leaves(request: Request, future: asyncio.Future[Result]) -> Result:
    """Await the engine's ``future``; if the client disconnects first, cancel it (a queued request is dropped
    unencoded) and raise CLIENT_GONE."""
    watch = _DisconnectWatch(request, future)
    timer = asyncio.get_running_loop().call_later(DISCONNECT_WATCH_AFTER, watch.start)
    try:
        return await future
    except asyncio.CancelledError:
        if watch.client_left:
            raise ServiceError(HttpErrorKind.CLIENT_GONE, "the client disconnected before its answer") from None
        raise  # the handler itself was cancelled: the future went with it
    finally:
        timer.cancel()
        if watch.task is not None:
            watch.task.cancel()


class _DisconnectWatch:
    def __init__(self, request: Request, future: asyncio.Future[Any]) -> None:
        self.receive = request.receive
        self.future = future
        self.task: asyncio.Task[None] | None = None
        self.client_left = False

    def start(self) -> None:
        if not self.future.done():
            self.task = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        if not self.future.done():
            self.client_left = True
            self.future.cancel()
