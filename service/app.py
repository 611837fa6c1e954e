"""The HTTP face of the engine. It parses, authorises, counts and serialises; it never tokenizes.

Hot path: the body is validated straight from bytes by pydantic-core, and the response is built as bytes
(orjson over numpy arrays, or a safetensors blob) -- FastAPI's default encoding of a dict response was
measured at a third of the in-process speed.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import logging
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from safetensors.numpy import save as save_safetensors
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from . import __version__
from .encoding import EncodedBatch
from .engine import Engine, EngineLimits
from .errors import ErrorKind, ServiceError
from .loading import LoadedTokenizer, load_tokenizer
from .metrics import Metrics
from .parallelism import ForkGuard, available_cpus
from .protocol import FINGERPRINT_HEADER, SAFETENSORS_MEDIA_TYPE, DecodeRequest, EncodeRequest, TokenizeRequest
from .settings import Settings

logger = logging.getLogger(__name__)

# The one status table.
STATUS_BY_KIND: dict[ErrorKind, int] = {
    ErrorKind.INVALID_REQUEST: 422,
    ErrorKind.TOKENIZER: 422,
    ErrorKind.TOO_LARGE: 413,
    ErrorKind.NOT_ACCEPTABLE: 406,
    ErrorKind.UNAUTHORIZED: 401,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.METHOD_NOT_ALLOWED: 405,
    ErrorKind.OVERLOADED: 429,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.TIMEOUT: 504,
    ErrorKind.CLIENT_GONE: 499,  # nginx's "client closed request": logged nowhere, sent to nobody
    ErrorKind.INTERNAL: 500,
}
KIND_BY_STATUS = {404: ErrorKind.NOT_FOUND, 405: ErrorKind.METHOD_NOT_ALLOWED, 413: ErrorKind.TOO_LARGE}
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# The service exports its own Prometheus metrics; FastAPI's built-in OpenTelemetry hooks (newer releases)
# cost a provider lookup on every request.
_NO_OPENTELEMETRY = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def error_response(kind: ErrorKind, message: str, retry_after: float | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """The one error body shape: ``{"error": message, "error_type": kind}``."""
    headers = dict(headers or {})
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, round(retry_after)))
    if kind is ErrorKind.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    return Response(
        orjson.dumps({"error": message, "error_type": kind.value}),
        status_code=STATUS_BY_KIND[kind],
        media_type="application/json",
        headers=headers,
    )


def _json(payload: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json",
                    headers=headers)


def _describe_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{where}: {err['msg']}")
    more = len(exc.errors()) - 5
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


def create_app(settings: Settings, loaded: LoadedTokenizer | None = None) -> FastAPI:
    """Build the ASGI app. The engine is started in the lifespan; ``loaded`` skips loading there
    (the CLI loads first so that a bad source fails with one line before the server starts)."""
    metrics = Metrics()
    threads = settings.threads or available_cpus()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tokenizer = loaded or await asyncio.to_thread(load_tokenizer, settings.model, settings.revision)
        engine = Engine(
            tokenizer,
            threads=threads,
            limits=EngineLimits(settings.max_texts_per_request, settings.max_text_chars, settings.max_response_tokens),
            batching=settings.batching_config(),
            observer=metrics,
        )
        await engine.astart()
        app.state.engine = engine
        logger.info("serving %s (%s) with %d Rust threads", tokenizer.source, tokenizer.fingerprint, threads)
        try:
            yield
        finally:
            await engine.astop()

    app = FastAPI(
        title="tokenizer-service",
        version=__version__,
        description="HuggingFace fast tokenization over HTTP, with exact transformers parity.",
        lifespan=lifespan,
        **_NO_OPENTELEMETRY,
    )
    app.state.settings = settings
    app.state.metrics = metrics

    def engine_of(request: Request) -> Engine:
        engine = getattr(request.app.state, "engine", None)
        if engine is None:
            raise ServiceError(ErrorKind.UNAVAILABLE, "the tokenizer is not loaded yet", retry_after=1.0)
        return engine

    async def read_body(request: Request) -> bytes:
        limit = settings.max_body_bytes
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

    async def parse(request: Request, model: type[BaseModel]) -> Any:
        body = await read_body(request)
        try:
            return model.model_validate_json(body)
        except ValidationError as exc:
            if any(err["type"] == "json_invalid" for err in exc.errors()):
                # pydantic-core refuses JSON that Python's json accepts (e.g. a lone surrogate "\ud800"):
                # such a text reaches the tokenizer, which refuses it exactly as it would in-process.
                try:
                    return model.model_validate(json.loads(body))
                except (ValueError, ValidationError):
                    pass
            raise ServiceError(ErrorKind.INVALID_REQUEST, _describe_validation_error(exc)) from None

    # -- routes -----------------------------------------------------------------------------------------
    @app.post("/encode", response_class=Response, openapi_extra=_openapi_body(EncodeRequest),
              responses={200: {"content": {"application/json": {}, SAFETENSORS_MEDIA_TYPE: {}}}})
    async def encode(request: Request) -> Response:
        """Encode texts (or pairs) exactly as the in-process transformers tokenizer call would.

        JSON by default; with ``Accept: application/vnd.safetensors``, a safetensors blob of int64 arrays."""
        engine = engine_of(request)
        binary = SAFETENSORS_MEDIA_TYPE in request.headers.get("accept", "")
        body = await parse(request, EncodeRequest)
        future = engine.submit_encode(body.texts, body.text_pairs, body.options())
        result: EncodedBatch = await _unless_client_leaves(request, future)
        metrics.texts.inc(len(body.texts))
        metrics.tokens.inc(result.num_tokens)
        headers = {FINGERPRINT_HEADER: engine.loaded.fingerprint}
        if not binary:
            return _json(result.data, headers)
        if not result.rectangular:
            raise ServiceError(
                ErrorKind.NOT_ACCEPTABLE,
                "the rows have different lengths, which a tensor cannot hold: ask for padding "
                "(padding='longest' or 'max_length'), or accept application/json",
            )
        blob = save_safetensors(result.data, metadata={"fingerprint": engine.loaded.fingerprint})
        return Response(blob, media_type=SAFETENSORS_MEDIA_TYPE, headers=headers)

    @app.post("/tokenize", response_class=Response, openapi_extra=_openapi_body(TokenizeRequest))
    async def tokenize(request: Request) -> Response:
        """Split texts into tokens: ``{"tokens": [[...], ...]}``."""
        engine = engine_of(request)
        body = await parse(request, TokenizeRequest)
        tokens = await engine.tokenize(body.texts, body.add_special_tokens)
        return _json({"tokens": tokens}, {FINGERPRINT_HEADER: engine.loaded.fingerprint})

    @app.post("/decode", response_class=Response, openapi_extra=_openapi_body(DecodeRequest))
    async def decode(request: Request) -> Response:
        """Turn id lists back into texts: ``{"texts": [...]}``."""
        engine = engine_of(request)
        body = await parse(request, DecodeRequest)
        texts = await engine.decode(body.ids, body.skip_special_tokens, body.clean_up_tokenization_spaces)
        return _json({"texts": texts}, {FINGERPRINT_HEADER: engine.loaded.fingerprint})

    @app.get("/info", response_class=Response)
    async def info(request: Request) -> Response:
        """What is served and how: tokenizer, fingerprint, limits, batching, parallelism, versions."""
        engine = engine_of(request)
        return _json({**engine.info(), "max_body_bytes": settings.max_body_bytes,
                      "auth": settings.api_key is not None})

    @app.get("/healthz", response_class=Response)
    async def healthz() -> Response:
        """Liveness: the process answers."""
        return _json({"status": "alive"})

    @app.get("/readyz", response_class=Response)
    async def readyz(request: Request) -> Response:
        """Readiness: the tokenizer is loaded and the server is not draining (503 otherwise)."""
        engine = getattr(request.app.state, "engine", None)
        if engine is None or not engine.ready:
            reason = "draining" if engine is not None and engine.draining else "the tokenizer is not loaded"
            return error_response(ErrorKind.UNAVAILABLE, f"not ready: {reason}")
        return _json({"status": "ready"})

    @app.get("/metrics", response_class=Response)
    async def prometheus_metrics() -> Response:
        """Prometheus text format."""
        metrics.forks.set(ForkGuard.forks_after_load)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    # -- errors: one shape for all ----------------------------------------------------------------------
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> Response:
        return error_response(exc.kind, exc.message, exc.retry_after)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        kind = KIND_BY_STATUS.get(exc.status_code, ErrorKind.INVALID_REQUEST)
        return error_response(kind, f"{exc.detail}: {request.method} {request.url.path}", headers=exc.headers)

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> Response:
        logger.exception("internal error on %s %s", request.method, request.url.path)
        return error_response(ErrorKind.INTERNAL, f"internal error ({type(exc).__name__}); this is a bug, please report it")

    app.add_middleware(_EncodeFastPath, endpoint=encode)  # innermost: auth and metrics still wrap it
    if settings.api_key is not None:
        app.add_middleware(_BearerAuthMiddleware, api_key=settings.api_key.get_secret_value())
    app.state.in_flight = InFlight()
    app.add_middleware(_MetricsMiddleware, metrics=metrics, routes={r.path for r in app.routes},
                       in_flight=app.state.in_flight)  # outermost
    return app


async def _unless_client_leaves(request: Request, future: "asyncio.Future[Any]") -> Any:
    """Await the engine's ``future``; if the client disconnects first, cancel it (the batcher then drops
    the request unencoded) and raise CLIENT_GONE. Most requests finish within ``DISCONNECT_WATCH_AFTER``,
    so the watcher is only started for those still waiting then: it costs a task per request."""
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


DISCONNECT_WATCH_AFTER = 0.05  # seconds


class _DisconnectWatch:
    def __init__(self, request: Request, future: "asyncio.Future[Any]") -> None:
        self.receive = request.receive
        self.future = future
        self.task: asyncio.Task | None = None
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


class _EncodeFastPath:
    """Pure ASGI: ``POST /encode`` goes straight to its route function, skipping FastAPI's routing,
    dependency solving and exit stacks -- measured at ~45% of the event loop's time per small request.
    Same function, same error shapes; the FastAPI route stays registered for the OpenAPI schema."""

    def __init__(self, app: Any, endpoint: Callable[[Request], Any]) -> None:
        self.app = app
        self.endpoint = endpoint

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/encode" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            response = await self.endpoint(Request(scope, receive))
        except ServiceError as exc:
            response = error_response(exc.kind, exc.message, exc.retry_after)
        await response(scope, receive, send)


class _BearerAuthMiddleware:
    """Pure ASGI: every path but the probes and /metrics needs ``Authorization: Bearer <api key>``."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = error_response(ErrorKind.UNAUTHORIZED, "missing or wrong API key: send 'Authorization: Bearer <key>'")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class InFlight:
    """How many HTTP requests are being answered right now (the drain waits for zero)."""

    def __init__(self) -> None:
        self.count = 0


class _MetricsMiddleware:
    """Pure ASGI: counts requests by route and status, times them, and tracks how many are in flight."""

    def __init__(self, app: Any, metrics: Metrics, routes: set[str], in_flight: InFlight) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.in_flight = in_flight

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        status = 500
        started = time.perf_counter()

        async def send_and_record(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.in_flight.count += 1
        try:
            await self.app(scope, receive, send_and_record)
        finally:
            self.in_flight.count -= 1
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
