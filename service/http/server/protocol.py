"""HTTP/1.1 limits in front of the app: uvicorn's httptools protocol (why this one:
docs/explanations/how-it-works.md) with what it lacks, per connection (the limits: docs/explanations/limits.md):

- the header block bounded (431 and close beyond ``max_header_bytes``);
- read deadlines (408 and close): headers within ``header_timeout`` of the first byte, the body within
  ``body_timeout`` of the headers (time the server itself paused reading does not count); a client that takes in
  nothing of its answer for ``body_timeout`` is cut;
- every close after an answer lingers: half-close, then read and drop what the client still sends for up to
  ``LINGER_SECONDS``, so a client still sending (an 8 MB header block) reads its 431, not a reset;
- beyond ``max_connections``, a new connection is closed at once, and logged;
- a malformed request (or bytes past a Content-Length) gets its 400 only after the answers pipelined before it;
- an ``Upgrade`` (``h2c``) is ignored, as RFC 9110 7.8 allows: the body is read as usual;
- a lossless drain (:meth:`ConnectionGuard.drain_connections`): a connection closes after its last answer (with
  ``Connection: close``), never under a request that has begun to arrive, nor while idle (its client may be
  sending; a silent one closes at the keep-alive timeout).

Deadlines cost two clock reads per request; a sweep every ``SWEEP_SECONDS`` checks them. The uvicorn internals
used are listed in :mod:`service.http.server`.
"""

from __future__ import annotations

import asyncio
import http
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from ..errors import HttpErrorKind
from ..responses import STATUS_BY_KIND, error_body

logger = logging.getLogger(__name__)

#: How long a closing connection with request bytes unread waits for the client's end before it is cut.
LINGER_SECONDS = 2.0
#: How often deadlines are checked.
SWEEP_SECONDS = 0.5
#: At most one "connection refused" log line per this many seconds (with the count since the last one).
REFUSAL_LOG_SECONDS = 10.0


class DrainState(Protocol):
    """Who owns the draining state (:class:`service.http.runtime.Runtime`); the guard only asks it."""

    @property
    def draining(self) -> bool: ...


@dataclass(kw_only=True, eq=False)
class ConnectionGuard:
    """One server's connection limits, open connections and deadline sweep. It asks ``drain_state`` (the runtime)
    whether the server is draining; without one it never drains (the protocol benchmark)."""

    max_header_bytes: int
    header_timeout: float
    body_timeout: float
    max_connections: int
    keep_alive: float
    drain_state: DrainState | None = None
    connections: set[GuardedHttpToolsProtocol] = field(default_factory=set, init=False)
    _refused_unlogged: int = field(default=0, init=False)
    _last_refusal_log: float = field(default=0.0, init=False)
    _sweeper: asyncio.TimerHandle | None = field(default=None, init=False)

    def protocol_class(self) -> type[GuardedHttpToolsProtocol]:
        """The protocol class to give uvicorn (``Config(http=...)``), bound to this guard."""
        return type("BoundGuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"guard": self})

    # -- connections ------------------------------------------------------------------------------------
    def admit(self, protocol: GuardedHttpToolsProtocol, loop: asyncio.AbstractEventLoop) -> bool:
        if len(self.connections) >= self.max_connections:
            self._refused_unlogged += 1
            now = time.monotonic()
            if now - self._last_refusal_log >= REFUSAL_LOG_SECONDS:
                logger.warning(
                    "refused %d connection(s): %d open, the most allowed (--max-connections %d)",
                    self._refused_unlogged,
                    len(self.connections),
                    self.max_connections,
                )
                self._refused_unlogged = 0
                self._last_refusal_log = now
            return False
        self.connections.add(protocol)
        if self._sweeper is None:
            self._sweeper = loop.call_later(SWEEP_SECONDS, self._sweep, loop)
        return True

    def forget(self, protocol: GuardedHttpToolsProtocol) -> None:
        self.connections.discard(protocol)

    @property
    def draining(self) -> bool:
        return self.drain_state is not None and self.drain_state.draining

    def drain_connections(self) -> None:
        """The drain has begun: every connection open now closes after its answer (later ones after their first:
        ``on_headers_complete`` asks :attr:`draining`)."""
        for protocol in list(self.connections):
            protocol.drain()

    def close_idle(self) -> None:
        """Close every connection between requests now (a private server's drain); the others after their answer."""
        for protocol in list(self.connections):
            protocol.close_if_idle()

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        for protocol in list(self.connections):
            deadline = protocol.deadline
            if deadline is not None and now > deadline:
                protocol.deadline_passed(now)
            deadline = protocol.write_deadline
            if deadline is not None and now > deadline:
                protocol.write_stalled()
        self._sweeper = loop.call_later(SWEEP_SECONDS, self._sweep, loop) if self.connections else None


def _raw_error(kind: HttpErrorKind, message: str) -> bytes:
    status = STATUS_BY_KIND[kind]
    body = error_body(kind, message)
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _Refused(Exception):
    """Stops the parser on a connection a callback just answered and closed."""


def _headers_too_large(limit: int) -> str:
    return f"the request line and headers exceed {limit} bytes (--max-header-bytes); send fewer or smaller headers"


class _LingeringTransport:
    """A closing connection's transport for its last cycle: ``close()`` lingers (:meth:`close_lingering`)."""

    def __init__(self, protocol: GuardedHttpToolsProtocol) -> None:
        self._protocol = protocol
        self._transport = protocol.transport

    def close(self) -> None:
        self._protocol.close_lingering()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`ConnectionGuard` (see the module doc)."""

    guard: ConnectionGuard  # set by ConnectionGuard.protocol_class

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline: float | None = None  # reading: the headers, or the body, must arrive by then
        self.write_deadline: float | None = None  # writing: a stalled answer must move again by then
        self._in_headers = False
        self._header_bytes_seen = 0
        self._partial_header_bytes = 0
        self._deferred_error: bytes | None = None
        self._refused = False
        self._lingering = False
        self._raw_body_left = 0  # body bytes of an ignored Upgrade request, read past the parser
        self._feeding = 0  # bytes of the read being parsed

    # -- connection -------------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if not self.guard.admit(self, asyncio.get_running_loop()):
            self._refused = True
            self.transport = transport
            transport.abort()  # refused: nothing was read, nothing is owed
            return
        super().connection_made(transport)
        if self.guard.draining:
            self._close_if_silent()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self.guard.forget(self)
        self.deadline = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused or self._lingering or self._deferred_error is not None:
            return  # closing: what follows a closing answer is never served
        if self._raw_body_left:
            data = self._take_raw_body(data)
            if not data:
                return
        self._unset_keepalive_if_required()
        self._feeding = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if not (self.transport.is_closing() or self._lingering):  # (else: refused by a callback, answered)
                self._malformed()
            return
        except httptools.HttpParserUpgrade as upgrade:
            self._ignore_upgrade(data[upgrade.args[0] :] if upgrade.args else b"")
            return
        if self._in_headers:
            self._check_header_size(len(data))

    # -- parser callbacks -------------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_headers = True
        self._header_bytes_seen = self._partial_header_bytes = 0
        self.deadline = time.monotonic() + self.guard.header_timeout

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self.deadline = time.monotonic() + self.guard.body_timeout
        limit = self.guard.max_header_bytes
        # (a header block that arrived in reads no larger than the limit was counted as it came)
        if self._feeding + self._header_bytes_seen + self._partial_header_bytes > limit and (
            self._header_size() > limit
        ):
            self._refuse_now(HttpErrorKind.HEADERS_TOO_LARGE, _headers_too_large(limit))
            raise _Refused  # stops the parser: nothing more is read on this connection
        super().on_headers_complete()
        if self.guard.draining:
            self._close_after(self.cycle)

    def on_message_complete(self) -> None:
        self.deadline = None  # the request is in: no read deadline until the next one begins
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._lingering:
            return  # that answer closed the connection: nothing queued behind it is served
        if self._deferred_error is not None and not self.pipeline:
            self._send_and_close(self._deferred_error)
            return
        super().on_response_complete()

    # -- limits -----------------------------------------------------------------------------------------
    def _check_header_size(self, received: int) -> None:
        """Headers still incomplete after a read: completed parts count exactly, the part being parsed by the bytes
        read since the parser last completed one."""
        seen = self._header_size()
        if seen != self._header_bytes_seen:
            self._header_bytes_seen = seen
            self._partial_header_bytes = 0
        else:
            self._partial_header_bytes += received
        limit = self.guard.max_header_bytes
        if seen + self._partial_header_bytes > limit:
            self._refuse_now(HttpErrorKind.HEADERS_TOO_LARGE, _headers_too_large(limit))

    def _header_size(self) -> int:
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def deadline_passed(self, now: float) -> None:
        if self.transport.is_closing():
            self.deadline = None
            return
        if self.cycle is None and not self._in_headers:  # draining, and silent since it was accepted
            self.transport.close()
            return
        if self.flow.read_paused:  # the server stopped reading (pipelining, flow control): not the client
            self.deadline = now + self.guard.body_timeout
            return
        if self._in_headers:
            what = f"the request's headers did not arrive within {self.guard.header_timeout:g}s"
        else:
            what = f"the request's body did not arrive within {self.guard.body_timeout:g}s of its headers"
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app sees the client gone and lets go of the request
            cycle.message_event.set()
        self._refuse_now(HttpErrorKind.REQUEST_TIMEOUT, f"{what}; the connection is closed")

    def pause_writing(self) -> None:
        super().pause_writing()
        self.write_deadline = time.monotonic() + self.guard.body_timeout

    def write_stalled(self) -> None:
        """A client that has not read its answer for ``body_timeout``: cut it (its request's memory goes)."""
        self.write_deadline = None
        if self.flow.write_paused and not self.transport.is_closing():
            logger.info("closed a connection: its client read nothing of its answer for %gs", self.guard.body_timeout)
            self.transport.abort()

    def _refuse_now(self, kind: HttpErrorKind, message: str) -> None:
        """Answer ``kind`` now and close, lingering: the client may still be sending."""
        self.deadline = None
        logger.info("closed a connection: %s", message)
        self._send_and_close(_raw_error(kind, message))

    # -- pipelining and malformed requests --------------------------------------------------------------
    def _malformed(self) -> None:
        """A request the parser refuses: 400, but only after the answers to the requests before it."""
        message = _raw_error(HttpErrorKind.MALFORMED_HTTP, "malformed HTTP request; the connection is closed")
        cycle = self.cycle  # the last request parsed: it runs unless others are queued before it
        broken = cycle if cycle is not None and cycle.more_body else None
        queued = broken is not None and any(c is broken for c, _ in self.pipeline)
        if queued:  # its body was being read when the stream broke, behind others: it never starts
            self.pipeline = deque((c, a) for c, a in self.pipeline if c is not broken)
        elif broken is not None:  # running, its body being read when the stream broke
            broken.disconnected = True
            broken.message_event.set()
        # An answer owed before the 400: to the requests queued (one runs meanwhile), or to the one running.
        running = broken is None and cycle is not None and not cycle.response_complete
        pending = queued or bool(self.pipeline) or running
        self.deadline = None
        if pending:
            self._deferred_error = message  # sent by on_response_complete; what arrives meanwhile is dropped
        else:
            self._send_and_close(message)

    def _ignore_upgrade(self, rest: bytes) -> None:
        """Serve an ``Upgrade`` request as plain HTTP/1.1: the parser stopped after the headers (calling the message
        complete), so read the body past it, then parse on (httptools resumes after an upgrade)."""
        cycle = self.cycle
        headers = dict(self.headers)
        if cycle is None or b"transfer-encoding" in headers:
            self._malformed()  # a chunked body behind an Upgrade: not worth a parser of our own
            return
        length = headers.get(b"content-length", b"0")
        self._raw_body_left = int(length) if length.isdigit() else 0
        cycle.more_body = self._raw_body_left > 0  # the parser called the message complete
        if cycle.more_body:
            self.deadline = time.monotonic() + self.guard.body_timeout
        if rest:
            self.data_received(rest)

    def _take_raw_body(self, data: bytes) -> bytes:
        body, rest = data[: self._raw_body_left], data[self._raw_body_left :]
        self._raw_body_left -= len(body)
        self.on_body(body)
        if not self._raw_body_left:
            self.on_message_complete()
        return rest

    # -- closing ----------------------------------------------------------------------------------------
    def drain(self) -> None:
        """Close after the answer to the last request sent. An idle connection stays open until its next request
        (answered, then closed) or its keep-alive timeout: closing it now would race a request being sent."""
        if self._in_headers:
            return  # on_headers_complete will mark its cycle
        cycle = self.cycle
        if cycle is None:
            self._close_if_silent()
        elif not cycle.response_complete:  # the last request parsed: those queued before it keep the connection
            self._close_after(cycle)

    def _close_if_silent(self) -> None:
        """Draining, on a connection that has sent nothing: close it (the sweep does) if silent for the keep-alive
        timeout, which uvicorn applies only after an answer, so a client that never sends cannot hold the drain
        to its deadline. A first byte starts the header deadline instead."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.guard.keep_alive

    def _close_after(self, cycle: RequestResponseCycle) -> None:
        cycle.keep_alive = False  # the answer carries Connection: close, and the connection then closes
        if not isinstance(cycle.transport, _LingeringTransport):
            cycle.transport = _LingeringTransport(self)  # type: ignore[assignment]

    def close_if_idle(self) -> None:
        """Close now if between requests (otherwise, draining, it closes after its answer)."""
        if not self._in_headers and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()

    def close_lingering(self) -> None:
        """Half-close now (the answer, then EOF), read and drop what the client still sends, and cut after
        ``LINGER_SECONDS`` at most (its EOF ends it sooner)."""
        transport = self.transport
        if self._lingering or transport.is_closing():
            return
        self._lingering = True
        self.deadline = None
        if transport.can_write_eof():
            transport.write_eof()
            self.flow.resume_reading()  # reading paused (pipelining, a body unread) would leave its bytes unread
            asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)
        else:
            transport.close()

    def _send_and_close(self, data: bytes) -> None:
        if self.transport.is_closing() or self._lingering:
            return
        self.transport.write(data)
        self.close_lingering()
