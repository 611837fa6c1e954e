"""The default async transport: a lean HTTP/1.1 keep-alive client on asyncio streams (:class:`AsyncHTTPTransport`)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable
from typing import TypeVar

from ..addresses import ServiceAddress, parse_service_url
from .base import IdleConnections, Origin, PooledTransport, Request, Response, StaleConnection
from .exceptions import ConnectError, ProtocolError, TransportTimeout

__all__ = ["AsyncHTTPTransport"]

T = TypeVar("T")

if sys.version_info >= (3, 11):

    async def _within(awaitable: Awaitable[T], seconds: float) -> T:
        """``asyncio.wait_for`` without the Task it makes per call before Python 3.12: a quarter of this
        transport's client CPU per request on asyncio's own loop (3.11, 2 cores, 2026-12-06: 0.195 -> 0.144 ms at
        64 concurrent requests, 0.293 -> 0.220 ms at one; under uvloop the same within noise)."""
        async with asyncio.timeout(seconds):
            return await awaitable

else:  # pragma: no cover - Python 3.10
    _within = asyncio.wait_for

_Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
_AsyncPools = IdleConnections[_Connection]


class AsyncHTTPTransport(PooledTransport):
    """The default async transport: a lean HTTP/1.1 keep-alive client on asyncio streams, one pool per process and
    event loop, a fifth of ``httpx.AsyncClient``'s client CPU per request at 32-way concurrency (measured by
    ``benchmarks/dataloader_compare.py`` at commit d64e1e6). It speaks what the service speaks (Content-Length or
    chunked bodies, no redirects or proxies). Arguments and ``http+unix://`` URLs as :class:`HTTPTransport`'s."""

    def __init__(
        self, *, max_idle_connections: int = 64, keepalive_expiry: float = 4.0, verify: bool | str = True
    ) -> None:
        super().__init__(max_idle_connections, keepalive_expiry, verify)

    def _current_pools(self) -> _AsyncPools:
        loop = asyncio.get_running_loop()
        pools: _AsyncPools | None = self._pools
        if pools is None or pools.pid != os.getpid() or pools.loop is not loop:
            # Streams belong to the loop (and process) that opened them; those of another are abandoned.
            pools = self._pools = _AsyncPools(
                lambda conn: conn[1].close(), lambda conn: not conn[0].at_eof() and not conn[1].is_closing(), loop
            )
        return pools

    async def handle_async_request(self, request: Request) -> Response:
        address = parse_service_url(request.url)
        key = address.origin
        pools = self._current_pools()
        head = _request_head(request, address)
        conn = pools.take(key, self.keepalive_expiry)
        if conn is not None:
            try:
                return await self._exchange(conn, key, head, request, pools)
            except StaleConnection:
                pass  # closed by the server while idle; the request never ran: one fresh try
        try:
            conn = await _within(self._open(address), request.timeout.connect)
        except asyncio.TimeoutError as exc:
            raise ConnectError(
                f"timed out after {request.timeout.connect}s connecting to {request.url}", url=request.url
            ) from exc
        except ConnectionRefusedError as exc:  # asyncio says only "Connect call failed (host, port)"
            raise ConnectError(f"cannot connect to {request.url}: connection refused", url=request.url) from exc
        except OSError as exc:
            raise ConnectError(f"cannot connect to {request.url}: {exc}", url=request.url) from exc
        try:
            return await self._exchange(conn, key, head, request, pools)
        except StaleConnection as exc:
            raise ProtocolError(
                f"{request.url}: the server closed the connection without answering ({exc.__cause__})", url=request.url
            ) from exc.__cause__

    async def _open(self, address: ServiceAddress) -> _Connection:
        if address.socket_path is not None:
            return await asyncio.open_unix_connection(address.socket_path)
        tls = self._https_context() if address.scheme == "https" else None
        return await asyncio.open_connection(address.host, address.port, ssl=tls)

    async def _exchange(
        self, conn: _Connection, key: Origin, head: bytes, request: Request, pools: _AsyncPools
    ) -> Response:
        reader, writer = conn
        url = request.url
        keep = False
        try:
            writer.write(head + request.body if request.body else head)
            status, headers, body = await _within(_read_response(reader), request.timeout.read)
            keep = headers.get("connection", "").lower() != "close"
        except asyncio.TimeoutError as exc:
            raise TransportTimeout(f"no answer from {url} within {request.timeout.read}s", url=url) from exc
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            raise ProtocolError(f"{url}: {type(exc).__name__}: {exc}", url=url) from exc
        finally:
            if not keep:  # an error, a cancellation, or the server's wish: the connection's state is unknown
                writer.close()
        if keep:
            pools.give(key, conn, self.max_idle_connections)
        return Response(status, headers, body)

    async def aclose(self) -> None:
        """Close this process's idle connections on the running loop."""
        pools = self._pools
        if pools is not None and pools.pid == os.getpid() and pools.loop is asyncio.get_running_loop():
            pools.close()
        self._pools = None


def _request_head(request: Request, address: ServiceAddress) -> bytes:
    host, port = address.host, address.port
    if address.socket_path is not None:
        authority = host
    else:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # IPv6 literals in brackets
    lines = [f"{request.method} {address.target} HTTP/1.1", f"Host: {authority}"]
    lines.extend(f"{name}: {value}" for name, value in request.headers.items())
    if request.body is not None:
        lines.append(f"Content-Length: {len(request.body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:  # closed before a single byte: the server dropped an idle connection
            raise StaleConnection() from exc
        raise
    except ConnectionError as exc:
        raise StaleConnection() from exc
    status_line, *header_lines = head[:-4].decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"bad status line {status_line!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers from our server: the final CRLF
                break
            chunks.append(await reader.readexactly(size + 2))
        body = b"".join(chunk[:-2] for chunk in chunks)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif status in (204, 304) or 100 <= status < 200:
        body = b""
    else:
        body = await reader.read()  # delimited by the connection's end
        headers["connection"] = "close"
    return status, headers, body
