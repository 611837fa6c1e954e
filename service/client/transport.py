"""How bytes reach the server: one request in, one response out, errors translated at this boundary.

A transport knows nothing of retries, endpoints or the service's JSON; the clients do that. Any object
with ``handle_request(Request) -> Response`` (sync) or ``async handle_async_request(Request) -> Response``
(async) and ``close()``/``aclose()`` can be passed as ``transport=``; :class:`MockTransport` turns a
function into one for tests. A transport raises only :class:`~service.client.exceptions.TransportError`
subclasses.

Fork safety: a transport holds configuration only until its first request *in a process*; connections
are created lazily and remembered together with the PID that created them. In a forked DataLoader
worker the PID differs, so the worker opens its own connections and never writes to a socket it shares
with its parent. Pickling drops the connections (spawned workers start empty).

The defaults are lean because client CPU matters (the DataLoader worker that waits on us also feeds the
GPU): :class:`HTTPTransport` (stdlib ``http.client`` keep-alive) uses about a third of the CPU per request
of ``httpx.Client``, and :class:`AsyncHTTPTransport` (asyncio streams) under a fifth of
``httpx.AsyncClient``'s (``benchmarks/dataloader_compare.py`` measures both). :class:`HTTPXTransport` and
:class:`AsyncHTTPXTransport` wrap httpx (imported only when used) for what the lean ones do not do
(proxies, HTTP/2, custom auth flows).
"""

from __future__ import annotations

import http.client
import inspect
import os
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Awaitable, Callable, Mapping, Union
from urllib.parse import urlsplit

from .exceptions import ConnectError, ProtocolError, TransportError, TransportTimeout

__all__ = [
    "Timeout",
    "Request",
    "Response",
    "HTTPTransport",
    "HTTPXTransport",
    "AsyncHTTPTransport",
    "AsyncHTTPXTransport",
    "MockTransport",
]


@dataclass(frozen=True)
class Timeout:
    """Seconds to wait for a connection, and for each read of the answer (None: wait forever)."""

    connect: float | None = 5.0
    read: float | None = 60.0

    @classmethod
    def of(cls, value: "Timeout | float | None") -> "Timeout":
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


@lru_cache(maxsize=256)
def _split_url(url: str) -> tuple[str, str, int, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return parts.scheme, parts.hostname, port, target


class _StaleConnection(Exception):
    """A reused keep-alive connection turned out closed before any answer: retry once on a new one."""


class _Pools:
    """Idle connections of one process, per origin, most recently used first."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.idle: dict[tuple[str, str, int], list[tuple[http.client.HTTPConnection, float]]] = {}

    def take(self, key: tuple[str, str, int], expiry: float) -> http.client.HTTPConnection | None:
        with self.lock:
            stack = self.idle.get(key)
            while stack:
                conn, since = stack.pop()
                if time.monotonic() - since < expiry:
                    return conn
                conn.close()  # idle longer than servers keep it open: do not even try it
        return None

    def give(self, key: tuple[str, str, int], conn: http.client.HTTPConnection, limit: int) -> None:
        with self.lock:
            stack = self.idle.setdefault(key, [])
            if len(stack) < limit:
                stack.append((conn, time.monotonic()))
                return
        conn.close()

    def close(self) -> None:
        with self.lock:
            stacks, self.idle = list(self.idle.values()), {}
        for stack in stacks:
            for conn, _ in stack:
                conn.close()


class HTTPTransport:
    """The default sync transport: stdlib ``http.client`` with keep-alive, per process, thread-safe.

    ``max_idle_connections`` bounds the idle connections kept per origin (one per thread that uses the
    client at once is enough); ``keepalive_expiry`` drops an idle connection before the server would
    (uvicorn closes idle ones after 5 s). ``verify`` is for https: True, False or a CA bundle path.
    """

    def __init__(self, *, max_idle_connections: int = 8, keepalive_expiry: float = 4.0,
                 verify: bool | str = True) -> None:
        self.max_idle_connections = max_idle_connections
        self.keepalive_expiry = keepalive_expiry
        self.verify = verify
        self._pools: _Pools | None = None
        self._ssl_context: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pools": None, "_ssl_context": None}

    def _current_pools(self) -> _Pools:
        pools = self._pools
        if pools is None or pools.pid != os.getpid():
            # First use in this process. Connections inherited across a fork belong to the parent: never
            # use them (two processes on one socket interleave bytes); the parent keeps its own copies.
            pools = self._pools = _Pools()
            self._ssl_context = None
        return pools

    def handle_request(self, request: Request) -> Response:
        scheme, host, port, target = _split_url(request.url)
        key = (scheme, host, port)
        pools = self._current_pools()
        conn = pools.take(key, self.keepalive_expiry)
        if conn is not None:
            try:
                return self._exchange(conn, key, target, request, pools)
            except _StaleConnection:
                pass  # the server closed it while idle; the request never ran: one fresh try
        conn = self._connect(scheme, host, port, request)
        try:
            return self._exchange(conn, key, target, request, pools)
        except _StaleConnection as exc:
            raise ProtocolError(f"{request.url}: the server closed the connection without answering "
                                f"({exc.__cause__})", url=request.url) from exc.__cause__

    def _connect(self, scheme: str, host: str, port: int, request: Request) -> http.client.HTTPConnection:
        timeout = request.timeout.connect
        if scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=timeout, context=self._https_context())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise ConnectError(f"timed out after {timeout}s connecting to {request.url}", url=request.url) from exc
        except OSError as exc:
            conn.close()
            raise ConnectError(f"cannot connect to {request.url}: {exc}", url=request.url) from exc
        return conn

    def _https_context(self) -> Any:
        if self._ssl_context is None:
            self._ssl_context = _ssl_context(self.verify)
        return self._ssl_context

    def _exchange(self, conn: http.client.HTTPConnection, key: tuple[str, str, int], target: str,
                  request: Request, pools: _Pools) -> Response:
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
            raise _StaleConnection() from exc
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
        """Close this process's idle connections (the transport stays usable: it reconnects)."""
        pools = self._pools
        if pools is not None and pools.pid == os.getpid():
            pools.close()
        self._pools = None


def _read_body(answer: http.client.HTTPResponse) -> bytes | bytearray:
    """The whole body; into a ``bytearray`` when the length is known (writable, so tensors can view it)."""
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


# -- asyncio -------------------------------------------------------------------------------------------


class _AsyncPools:
    """Idle connections of one process and event loop, per origin."""

    def __init__(self, loop: Any) -> None:
        self.pid = os.getpid()
        self.loop = loop
        self.idle: dict[tuple[str, str, int], list[tuple[Any, Any, float]]] = {}

    def take(self, key: tuple[str, str, int], expiry: float) -> tuple[Any, Any] | None:
        stack = self.idle.get(key)
        while stack:
            reader, writer, since = stack.pop()
            if time.monotonic() - since < expiry and not reader.at_eof() and not writer.is_closing():
                return reader, writer
            writer.close()
        return None

    def give(self, key: tuple[str, str, int], reader: Any, writer: Any, limit: int) -> None:
        stack = self.idle.setdefault(key, [])
        if len(stack) < limit:
            stack.append((reader, writer, time.monotonic()))
        else:
            writer.close()

    def close(self) -> None:
        stacks, self.idle = list(self.idle.values()), {}
        for stack in stacks:
            for _, writer, _ in stack:
                writer.close()


class AsyncHTTPTransport:
    """The default async transport: a lean HTTP/1.1 keep-alive client on asyncio streams, one pool per
    process and event loop. About a fifth of the client CPU per request of ``httpx.AsyncClient`` under
    32-way concurrency (``benchmarks/dataloader_compare.py``); it speaks only what the service speaks
    (Content-Length or chunked bodies, no redirects, no proxies). Arguments as :class:`HTTPTransport`."""

    def __init__(self, *, max_idle_connections: int = 64, keepalive_expiry: float = 4.0,
                 verify: bool | str = True) -> None:
        self.max_idle_connections = max_idle_connections
        self.keepalive_expiry = keepalive_expiry
        self.verify = verify
        self._pools: _AsyncPools | None = None
        self._ssl_context: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_pools": None, "_ssl_context": None}

    def _https_context(self) -> Any:
        if self._ssl_context is None:
            self._ssl_context = _ssl_context(self.verify)
        return self._ssl_context

    def _current_pools(self) -> _AsyncPools:
        import asyncio

        loop = asyncio.get_running_loop()
        pools = self._pools
        if pools is None or pools.pid != os.getpid() or pools.loop is not loop:
            # Streams belong to the loop (and process) that opened them; those of another are abandoned.
            pools = self._pools = _AsyncPools(loop)
        return pools

    async def handle_async_request(self, request: Request) -> Response:
        import asyncio

        scheme, host, port, target = _split_url(request.url)
        key = (scheme, host, port)
        pools = self._current_pools()
        head = _request_head(request, host, port, target)
        conn = pools.take(key, self.keepalive_expiry)
        if conn is not None:
            try:
                return await self._exchange(conn, key, head, request, pools)
            except _StaleConnection:
                pass  # closed by the server while idle; the request never ran: one fresh try
        try:
            conn = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=self._https_context() if scheme == "https" else None),
                request.timeout.connect)
        except asyncio.TimeoutError as exc:
            raise ConnectError(f"timed out after {request.timeout.connect}s connecting to {request.url}",
                               url=request.url) from exc
        except OSError as exc:
            raise ConnectError(f"cannot connect to {request.url}: {exc}", url=request.url) from exc
        try:
            return await self._exchange(conn, key, head, request, pools)
        except _StaleConnection as exc:
            raise ProtocolError(f"{request.url}: the server closed the connection without answering "
                                f"({exc.__cause__})", url=request.url) from exc.__cause__

    async def _exchange(self, conn: tuple[Any, Any], key: tuple[str, str, int], head: bytes, request: Request,
                        pools: _AsyncPools) -> Response:
        import asyncio

        reader, writer = conn
        url = request.url
        keep = False
        try:
            writer.write(head + request.body if request.body else head)
            status, headers, body = await asyncio.wait_for(_read_response(reader), request.timeout.read)
            keep = headers.get("connection", "").lower() != "close"
        except asyncio.TimeoutError as exc:
            raise TransportTimeout(f"no answer from {url} within {request.timeout.read}s", url=url) from exc
        except _StaleConnection:
            raise
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            raise ProtocolError(f"{url}: {type(exc).__name__}: {exc}", url=url) from exc
        finally:
            if not keep:  # an error, a cancellation, or the server's wish: the connection's state is unknown
                writer.close()
        if keep:
            pools.give(key, reader, writer, self.max_idle_connections)
        return Response(status, headers, body)

    async def aclose(self) -> None:
        """Close this process's idle connections on the running loop."""
        import asyncio

        pools = self._pools
        if pools is not None and pools.pid == os.getpid() and pools.loop is asyncio.get_running_loop():
            pools.close()
        self._pools = None


def _request_head(request: Request, host: str, port: int, target: str) -> bytes:
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # IPv6 literals in brackets
    lines = [f"{request.method} {target} HTTP/1.1", f"Host: {authority}"]
    lines.extend(f"{name}: {value}" for name, value in request.headers.items())
    if request.body is not None:
        lines.append(f"Content-Length: {len(request.body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_response(reader: Any) -> tuple[int, dict[str, str], bytes]:
    import asyncio

    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:  # closed before a single byte: the server dropped an idle connection
            raise _StaleConnection() from exc
        raise
    except ConnectionError as exc:
        raise _StaleConnection() from exc
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


def _ssl_context(verify: bool | str) -> Any:
    import ssl

    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


# -- httpx ---------------------------------------------------------------------------------------------


def _translate_httpx_error(exc: Exception, url: str) -> TransportError:
    import httpx

    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return ConnectError(f"cannot connect to {url}: {exc or type(exc).__name__}", url=url)
    if isinstance(exc, httpx.TimeoutException):
        return TransportTimeout(f"no answer from {url} in time ({type(exc).__name__})", url=url)
    return ProtocolError(f"{url}: {type(exc).__name__}: {exc}", url=url)


def _httpx_timeout(timeout: Timeout) -> Any:
    import httpx

    return httpx.Timeout(timeout.read, connect=timeout.connect, pool=timeout.connect)


class HTTPXTransport:
    """A sync transport over ``httpx.Client`` (created lazily, once per process). Keyword arguments go to
    ``httpx.Client`` (``verify=``, ``limits=``, ``http2=``...)."""

    def __init__(self, **client_options: Any) -> None:
        self.client_options = client_options
        self._client: Any = None
        self._pid: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_pid": None}

    def _current_client(self) -> Any:
        if self._client is None or self._pid != os.getpid():
            import httpx

            self._client = httpx.Client(**self.client_options)
            self._pid = os.getpid()
        return self._client

    def handle_request(self, request: Request) -> Response:
        import httpx

        client = self._current_client()
        try:
            answer = client.request(request.method, request.url, content=request.body, headers=request.headers,
                                    timeout=_httpx_timeout(request.timeout))
        except httpx.TransportError as exc:
            raise _translate_httpx_error(exc, request.url) from exc
        return Response(answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.content)

    def close(self) -> None:
        if self._client is not None and self._pid == os.getpid():
            self._client.close()
        self._client = None


class AsyncHTTPXTransport:
    """The default async transport: ``httpx.AsyncClient``, created lazily per process *and* event loop
    (an async connection pool belongs to the loop it was made on)."""

    def __init__(self, **client_options: Any) -> None:
        self.client_options = client_options
        self._client: Any = None
        self._pid: int | None = None
        self._loop: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_pid": None, "_loop": None}

    def _owned_here(self) -> bool:
        import asyncio

        return self._pid == os.getpid() and self._loop is asyncio.get_running_loop()

    def _current_client(self) -> Any:
        import asyncio

        if self._client is None or not self._owned_here():
            import httpx

            # A client from another process or loop cannot be closed from here; it is left to the GC.
            self._client = httpx.AsyncClient(**self.client_options)
            self._pid, self._loop = os.getpid(), asyncio.get_running_loop()
        return self._client

    async def handle_async_request(self, request: Request) -> Response:
        import httpx

        client = self._current_client()
        try:
            answer = await client.request(request.method, request.url, content=request.body,
                                          headers=request.headers, timeout=_httpx_timeout(request.timeout))
        except httpx.TransportError as exc:
            raise _translate_httpx_error(exc, request.url) from exc
        return Response(answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.content)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owned_here():
            await client.aclose()
        self._loop = None


Handler = Callable[[Request], Union[Response, Awaitable[Response]]]


class MockTransport:
    """A transport that calls ``handler(request)`` instead of the network, for sync and async clients.
    The handler returns a :class:`Response` (or an awaitable of one) or raises a ``TransportError``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def handle_request(self, request: Request) -> Response:
        response = self.handler(request)
        if inspect.isawaitable(response):
            raise TypeError("this MockTransport handler is async: use it with AsyncTokenizerClient")
        return response  # type: ignore[return-value]

    async def handle_async_request(self, request: Request) -> Response:
        response = self.handler(request)
        if inspect.isawaitable(response):
            response = await response
        return response  # type: ignore[return-value]

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass
