"""The default sync transport: ``http.client`` with keep-alive, lean because the DataLoader worker that waits on
us also feeds the GPU (a third of ``httpx.Client``'s CPU per request, measured by
``benchmarks/dataloader_compare.py`` at commit d64e1e6)."""

from __future__ import annotations

import http.client
import os
import socket

from ..addresses import UNIX_HOST, ServiceAddress, parse_service_url
from .base import IdleConnections, Origin, PooledTransport, Request, Response, StaleConnection
from .exceptions import ConnectError, ProtocolError, TransportTimeout

__all__ = ["HTTPTransport"]

_Pools = IdleConnections[http.client.HTTPConnection]


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: float | None) -> None:
        super().__init__(UNIX_HOST, timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class HTTPTransport(PooledTransport):
    """The default sync transport: stdlib ``http.client`` with keep-alive, per process, thread-safe.

    ``max_idle_connections``: idle connections kept per origin (one per thread using the client at once);
    ``keepalive_expiry``: an idle one is dropped before the server would (uvicorn: 5 s); ``verify`` (https):
    True, False or a CA bundle path. ``http+unix://`` URLs go over the Unix socket they name.
    """

    def __init__(
        self, *, max_idle_connections: int = 8, keepalive_expiry: float = 4.0, verify: bool | str = True
    ) -> None:
        super().__init__(max_idle_connections, keepalive_expiry, verify)

    def _current_pools(self) -> _Pools:
        pools: _Pools | None = self._pools
        if pools is None or pools.pid != os.getpid():
            # Fork safety: connections inherited across a fork are the parent's: two processes on one socket
            # would interleave bytes. The parent keeps its copies.
            pools = self._pools = _Pools(lambda conn: conn.close())
            self._ssl_context = None
        return pools

    def handle_request(self, request: Request) -> Response:
        address = parse_service_url(request.url)
        key = address.origin
        pools = self._current_pools()
        conn = pools.take(key, self.keepalive_expiry)
        if conn is not None:
            try:
                return self._exchange(conn, key, address.target, request, pools)
            except StaleConnection:
                pass  # the server closed it while idle; the request never ran: one fresh try
        conn = self._connect(address, request)
        try:
            return self._exchange(conn, key, address.target, request, pools)
        except StaleConnection as exc:
            raise ProtocolError(
                f"{request.url}: the server closed the connection without answering ({exc.__cause__})", url=request.url
            ) from exc.__cause__

    def _connect(self, address: ServiceAddress, request: Request) -> http.client.HTTPConnection:
        timeout = request.timeout.connect
        conn: http.client.HTTPConnection
        if address.socket_path is not None:
            conn = _UnixHTTPConnection(address.socket_path, timeout)
        elif address.scheme == "https":
            conn = http.client.HTTPSConnection(
                address.host, address.port, timeout=timeout, context=self._https_context()
            )
        else:
            conn = http.client.HTTPConnection(address.host, address.port, timeout=timeout)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise ConnectError(f"timed out after {timeout}s connecting to {request.url}", url=request.url) from exc
        except OSError as exc:
            conn.close()
            raise ConnectError(f"cannot connect to {request.url}: {exc}", url=request.url) from exc
        return conn

    def _exchange(
        self, conn: http.client.HTTPConnection, key: Origin, target: str, request: Request, pools: _Pools
    ) -> Response:
        url = request.url
        try:
            assert conn.sock is not None
            conn.sock.settimeout(request.timeout.read)
            conn.request(request.method, target, request.body, dict(request.headers))
            answer = conn.getresponse()
        except TimeoutError as exc:
            conn.close()
            raise TransportTimeout(f"no answer from {url} within {request.timeout.read}s", url=url) from exc
        except ConnectionError as exc:
            # reset, broken pipe, or closed before the status line (RemoteDisconnected)
            conn.close()
            raise StaleConnection() from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ProtocolError(f"{url}: {type(exc).__name__}: {exc}", url=url) from exc
        try:
            body = _read_body(answer)
        except TimeoutError as exc:
            conn.close()
            raise TransportTimeout(f"{url} stopped sending its answer for {request.timeout.read}s", url=url) from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ProtocolError(f"{url}: the answer was cut off ({type(exc).__name__}: {exc})", url=url) from exc
        headers = {name.lower(): value for name, value in answer.getheaders()}
        if answer.will_close:
            conn.close()
        else:
            pools.give(key, conn, self.max_idle_connections)
        return Response(answer.status, headers, body)

    def close(self) -> None:
        """Close this process's idle connections (the transport stays usable)."""
        pools = self._pools
        if pools is not None and pools.pid == os.getpid():
            pools.close()
        self._pools = None


def _read_body(answer: http.client.HTTPResponse) -> bytes | bytearray:
    """The whole body, into a ``bytearray`` when its length is known (writable: tensors view it)."""
    length = answer.length
    if length is None or answer.chunked:
        return answer.read()
    buffer = bytearray(length)
    view = memoryview(buffer)
    got = 0
    while got < length:
        n = answer.readinto(view[got:])
        if not n:
            raise http.client.IncompleteRead(bytes(buffer[:got]), length - got)
        got += n
    return buffer
