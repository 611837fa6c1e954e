"""How bytes reach the server, shaped like httpx's transports: a typed base (:mod:`.base`), the lean
defaults (:mod:`.stdlib` for the sync client, :mod:`.streams` for the async one), httpx-backed ones
(:mod:`.httpx`, imported only when first asked for) and :mod:`.mock` for tests.

A transport knows nothing of retries, endpoints or the service's JSON; the clients do that. Anything with
``handle_request(Request) -> Response`` and ``close()`` (sync) or ``async handle_async_request`` and
``aclose()`` (async) can be passed as ``transport=``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import AsyncTransport, Request, Response, SyncTransport, Timeout, Transport
from .mock import MockTransport
from .stdlib import HTTPTransport

if TYPE_CHECKING:
    from .httpx import AsyncHTTPXTransport, HTTPXTransport
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

# Imported when first asked for: the async transport needs asyncio (~30 ms of import, which a DataLoader
# worker using the sync client should not pay) and the httpx ones need the optional httpx.
_LAZY = {"AsyncHTTPTransport": "streams", "HTTPXTransport": "httpx", "AsyncHTTPXTransport": "httpx"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
