"""How bytes reach the server, as httpx's transports: a typed base (:mod:`.base`), the lean defaults (:mod:`.stdlib`
sync, :mod:`.streams` async), httpx-backed ones (:mod:`.httpx`) and :mod:`.mock` for tests. A transport knows
nothing of retries, endpoints or the service's JSON; anything implementing :mod:`.base`'s protocols can be passed
as ``transport=``."""

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

# Imported when first asked for: asyncio costs a sync DataLoader worker ~30 ms of import; httpx is optional.
_LAZY = {"AsyncHTTPTransport": "streams", "HTTPXTransport": "httpx", "AsyncHTTPXTransport": "httpx"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
