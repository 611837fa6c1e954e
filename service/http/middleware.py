"""Middleware: bearer auth, request metrics, reservations released once the answer is sent, the last line
against unexpected errors. Pure ASGI (not ``BaseHTTPMiddleware``): each runs on every request.
"""

from __future__ import annotations

import hmac
import logging
import time
import traceback
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ..engine.errors import ErrorKind
from ..engine.memory import Reservation
from ..wire import AUTH_SCHEME, HEALTH_PATH, METRICS_PATH, READY_PATH
from . import api_docs, playground
from .errors import HttpErrorKind
from .responses import error_response
from .runtime import Runtime

logger = logging.getLogger(__name__)

# Reachable without the API key: the probes (the kubelet has no key), Prometheus' scrape, and the playground and
# API docs pages with their assets and the schema (a browser opening a page cannot send it; their API calls do).
OPEN_PATHS = frozenset({HEALTH_PATH, READY_PATH, METRICS_PATH, *playground.OPEN_PATHS, *api_docs.OPEN_PATHS})
_RESERVATIONS = "tokenizer_service.reservations"


def hold_until_sent(scope: Scope, reservation: Reservation) -> None:
    """Keep ``reservation`` until this request's answer has been sent (:class:`ReleaseAfterSend`)."""
    scope[_RESERVATIONS].append(reservation)


class ReleaseAfterSend:
    """Releases a request's reservations once its answer is handed to the server (result and body freed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        held: list[Reservation] = []
        scope[_RESERVATIONS] = held
        try:
            await self.app(scope, receive, send)
        finally:
            for reservation in held:
                reservation.release()


class CatchAll:
    """An unexpected error becomes a 500 in the one error shape, logged with its type and stack only -- never its
    message, which may quote the request (pydantic's do) -- and not re-raised (the server would log the message)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def send_and_track(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_and_track)
        except Exception as exc:
            stack = "".join(traceback.format_tb(exc.__traceback__))
            logger.error(
                "internal error (%s) on %s %s; stack:\n%s",
                type(exc).__name__,
                scope.get("method"),
                scope.get("path"),
                stack,
            )
            if started or scope["type"] != "http":
                raise
            response = error_response(
                ErrorKind.INTERNAL, f"internal error ({type(exc).__name__}); this is a bug, please report it"
            )
            await response(scope, receive, send)


class BearerAuth:
    """Every path but :data:`OPEN_PATHS` needs ``Authorization: Bearer <api key>`` (compared in constant time)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.expected = api_key.encode()
        self.scheme = AUTH_SCHEME.lower().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            # the scheme is case-insensitive (RFC 9110 11.1), the key is not
            scheme, _, key = dict(scope["headers"]).get(b"authorization", b"").strip().partition(b" ")
            if not (hmac.compare_digest(key.strip(), self.expected) and scheme.lower() == self.scheme):
                response = error_response(
                    HttpErrorKind.UNAUTHORIZED, f"missing or wrong API key: send 'Authorization: {AUTH_SCHEME} <key>'"
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class RequestMetrics:
    """Counts and times requests by route and status, and keeps the runtime's in-flight count (what the drain
    waits on). Outermost, so every answer is counted."""

    def __init__(self, app: ASGIApp, runtime: Runtime, routes: set[str]) -> None:
        self.app = app
        self.runtime = runtime
        self.metrics = runtime.metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        status = 500
        started = time.perf_counter()

        async def send_and_record(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.runtime.in_flight += 1
        try:
            await self.app(scope, receive, send_and_record)
        finally:
            self.runtime.in_flight -= 1
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - started)
