"""How bytes reach the server, shaped like httpx's transports: a typed base (:mod:`.base`), the lean
defaults (:mod:`.stdlib` for the sync client, :mod:`.streams` for the async one), httpx-backed ones
(:mod:`.httpx`, imported only when first asked for) and :mod:`.mock` for tests.

A transport knows nothing of retries, endpoints or the service's JSON; the clients do that. Anything with
``handle_request(Request) -> Response`` and ``close()`` (sync) or ``async handle_async_request`` and
``aclose()`` (async) can be passed as ``transport=``.
"""

from __future__ import annotations

from typing import Any

from .base import AsyncTransport, Request, Response, SyncTransport, Timeout, Transport
from .mock import MockTransport
from .stdlib import HTTPTransport
from .streams import AsyncHTTPTransport

__all__ = [
    "Timeout",
    "Request",
    "Response",
    "SyncTransport",
    "AsyncTransport",
    "Transport",
    "HTTPTransport",
    "AsyncHTTPTransport",
    "HTTPXTransport",
    "AsyncHTTPXTransport",
    "MockTransport",
]

_HTTPX_CLASSES = ("HTTPXTransport", "AsyncHTTPXTransport")


def __getattr__(name: str) -> Any:
    # httpx is an optional extra, and importing it costs the training process: only when asked for.
    if name in _HTTPX_CLASSES:
        from . import httpx as httpx_transports

        return getattr(httpx_transports, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
