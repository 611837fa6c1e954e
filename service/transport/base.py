"""What every transport speaks: one :class:`Request` in, one :class:`Response` out, the sync and async protocols,
and what the lean transports share. Errors below HTTP are raised only as
:class:`~service.transport.exceptions.TransportError` subclasses, translated at this boundary."""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

__all__ = ["Timeout", "Request", "Response", "SyncTransport", "AsyncTransport", "Transport"]


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
    """One HTTP answer; header names lower-case. ``body`` may be a ``bytearray`` (writable: tensors view it)."""

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


class StaleConnection(Exception):
    """A reused keep-alive connection was closed before any answer: retry once on a new one."""


Conn = TypeVar("Conn")
Origin = tuple[str, str, int]  # ServiceAddress.origin


class IdleConnections(Generic[Conn]):
    """Idle connections of one process (and ``loop``, async) per origin, newest first: taken while ``usable`` and
    younger than the expiry, else ``close``d."""

    def __init__(
        self, close: Callable[[Conn], object], usable: Callable[[Conn], bool] | None = None, loop: Any = None
    ) -> None:
        self.pid = os.getpid()
        self.loop = loop
        self.lock = threading.Lock()  # the sync client may be used from several threads
        self.idle: dict[Origin, list[tuple[Conn, float]]] = {}
        self._close = close
        self._usable = usable

    def take(self, key: Origin, expiry: float) -> Conn | None:
        with self.lock:
            stack = self.idle.get(key)
            while stack:
                conn, since = stack.pop()
                if time.monotonic() - since < expiry and (self._usable is None or self._usable(conn)):
                    return conn
                self._close(conn)  # idle longer than servers keep it open, or closed: do not even try it
        return None

    def give(self, key: Origin, conn: Conn, limit: int) -> None:
        with self.lock:
            stack = self.idle.setdefault(key, [])
            if len(stack) < limit:
                stack.append((conn, time.monotonic()))
                return
        self._close(conn)

    def close(self) -> None:
        with self.lock:
            stacks, self.idle = list(self.idle.values()), {}
        for stack in stacks:
            for conn, _ in stack:
                self._close(conn)


class PooledTransport:
    """The lean transports' options, a TLS context made once, and nothing of either when pickled (a spawned
    DataLoader worker starts empty)."""

    def __init__(self, max_idle_connections: int, keepalive_expiry: float, verify: bool | str) -> None:
        self.max_idle_connections = max_idle_connections
        self.keepalive_expiry = keepalive_expiry
        self.verify = verify  # True (system CAs), False (no verification) or a CA bundle path
        self._pools: Any = None
        self._ssl_context: ssl.SSLContext | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pools": None, "_ssl_context": None}

    def _https_context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            verify = self.verify
            self._ssl_context = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
            if verify is False:
                self._ssl_context.check_hostname = False
                self._ssl_context.verify_mode = ssl.CERT_NONE
        return self._ssl_context
