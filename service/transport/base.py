"""What every transport speaks: one :class:`Request` in, one :class:`Response` out, and the two protocols a
transport implements (sync and async). Errors below HTTP are raised as
:class:`~service.transport.exceptions.TransportError` subclasses only: each transport translates its library's
errors at this boundary.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..wire import ServiceAddress, parse_service_url

__all__ = ["Timeout", "Request", "Response", "SyncTransport", "AsyncTransport", "Transport", "address_of"]


@dataclass(frozen=True)
class Timeout:
    """Seconds to wait for a connection, and for each read of the answer (None: wait forever)."""

    connect: float | None = 5.0
    read: float | None = 60.0

    @classmethod
    def of(cls, value: Timeout | float | None) -> Timeout:
        if isinstance(value, Timeout):
            return value
        if value is None:
            return cls(None, None)
        if isinstance(value, (int, float)) and value > 0:
            return cls(float(value), float(value))
        raise ValueError(f"timeout must be a positive number of seconds, None or a Timeout, not {value!r}")


@dataclass(frozen=True)
class Request:
    """One HTTP request: ``url`` is absolute; header names are as sent."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None
    timeout: Timeout = Timeout()


@dataclass
class Response:
    """One HTTP answer. Header names are lower-case. ``body`` may be a ``bytearray`` (writable: tensors
    can then be views of it without a copy)."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | bytearray = b""


@runtime_checkable
class SyncTransport(Protocol):
    """What :class:`~service.client.TokenizerClient` needs of ``transport=``."""

    def handle_request(self, request: Request) -> Response:
        """Send one request and return its whole answer, or raise a ``TransportError``."""

    def close(self) -> None:
        """Release this process's connections; the transport stays usable."""


@runtime_checkable
class AsyncTransport(Protocol):
    """What :class:`~service.client.AsyncTokenizerClient` needs of ``transport=``."""

    async def handle_async_request(self, request: Request) -> Response:
        """Send one request and return its whole answer, or raise a ``TransportError``."""

    async def aclose(self) -> None:
        """Release this process's connections on the running loop; the transport stays usable."""


Transport = SyncTransport | AsyncTransport


def address_of(request: Request) -> ServiceAddress:
    """Where ``request`` goes: scheme, host and port, or a Unix socket's path (``service.wire.parse_service_url``)."""
    return parse_service_url(request.url)


class StaleConnection(Exception):
    """A reused keep-alive connection turned out closed before any answer: retry once on a new one."""


def ssl_context(verify: bool | str) -> ssl.SSLContext:
    """A client TLS context: ``verify`` True (system CAs), False (no verification) or a CA bundle path."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
