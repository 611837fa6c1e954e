"""Transports over httpx (the ``httpx`` extra), for what the lean default transports do not do: proxies,
HTTP/2, custom auth flows. Importing this module imports httpx; ``service.client`` imports it only when one
of these classes is first asked for.

An ``http+unix://`` URL is sent through an httpx client of its own whose transport is bound to that socket
(``httpx.HTTPTransport(uds=...)``), with the URL rewritten to ``http://localhost/<route>``.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Any

import httpx

from ..wire import UNIX_HOST
from .base import Request, Response, Timeout, address_of
from .exceptions import ConnectError, ProtocolError, TransportError, TransportTimeout

__all__ = ["HTTPXTransport", "AsyncHTTPXTransport"]


def _translate_httpx_error(exc: Exception, url: str) -> TransportError:
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return ConnectError(f"cannot connect to {url}: {exc or type(exc).__name__}", url=url)
    if isinstance(exc, httpx.TimeoutException):
        return TransportTimeout(f"no answer from {url} in time ({type(exc).__name__})", url=url)
    return ProtocolError(f"{url}: {type(exc).__name__}: {exc}", url=url)


def _httpx_timeout(timeout: Timeout) -> httpx.Timeout:
    return httpx.Timeout(timeout.read, connect=timeout.connect, pool=timeout.connect)


def _route(request: Request) -> tuple[str | None, str]:
    """(the Unix socket to go through or None, the URL to give httpx)."""
    address = address_of(request)
    if address.socket_path is None:
        return None, request.url
    return address.socket_path, f"http://{UNIX_HOST}{address.target}"


def _client_options(client_options: dict[str, Any], socket_path: str | None, transport_class: Any) -> dict[str, Any]:
    """The options of the httpx client for ``socket_path``: as given for TCP; for a socket, those of the
    transport (``verify``, ``limits``, ``http2``...) go to a ``transport_class(uds=socket_path)``."""
    if socket_path is None:
        return client_options
    if "transport" in client_options or "mounts" in client_options:
        raise ValueError("an httpx transport= or mounts= of your own cannot reach a Unix socket (http+unix:// URL)")
    accepted = set(inspect.signature(transport_class).parameters) - {"uds"}
    for_transport = {name: value for name, value in client_options.items() if name in accepted}
    rest = {name: value for name, value in client_options.items() if name not in accepted}
    return {**rest, "transport": transport_class(uds=socket_path, **for_transport)}


class HTTPXTransport:
    """A sync transport over ``httpx.Client`` (created lazily, once per process and per Unix socket).
    Keyword arguments go to ``httpx.Client`` (``verify=``, ``limits=``, ``http2=``...)."""

    def __init__(self, **client_options: Any) -> None:
        self.client_options = client_options
        self._clients: dict[str | None, Any] = {}
        self._pid: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_clients": {}, "_pid": None}

    def _current_client(self, socket_path: str | None) -> Any:
        if self._pid != os.getpid():
            self._clients, self._pid = {}, os.getpid()  # another process's clients are never used here
        client = self._clients.get(socket_path)
        if client is None:
            options = _client_options(self.client_options, socket_path, httpx.HTTPTransport)
            client = self._clients[socket_path] = httpx.Client(**options)
        return client

    def handle_request(self, request: Request) -> Response:
        socket_path, url = _route(request)
        client = self._current_client(socket_path)
        try:
            answer = client.request(
                request.method,
                url,
                content=request.body,
                headers=request.headers,
                timeout=_httpx_timeout(request.timeout),
            )
        except httpx.TransportError as exc:
            raise _translate_httpx_error(exc, request.url) from exc
        return Response(answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.content)

    def close(self) -> None:
        clients, self._clients = self._clients, {}
        if self._pid == os.getpid():
            for client in clients.values():
                client.close()


class AsyncHTTPXTransport:
    """An async transport over ``httpx.AsyncClient``, created lazily per process, event loop *and* Unix
    socket (an async connection pool belongs to the loop it was made on)."""

    def __init__(self, **client_options: Any) -> None:
        self.client_options = client_options
        self._clients: dict[str | None, Any] = {}
        self._pid: int | None = None
        self._loop: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_clients": {}, "_pid": None, "_loop": None}

    def _owned_here(self) -> bool:
        return self._pid == os.getpid() and self._loop is asyncio.get_running_loop()

    def _current_client(self, socket_path: str | None) -> Any:
        if not self._owned_here():
            # Clients of another process or loop cannot be closed from here; they are left to the GC.
            self._clients = {}
            self._pid, self._loop = os.getpid(), asyncio.get_running_loop()
        client = self._clients.get(socket_path)
        if client is None:
            options = _client_options(self.client_options, socket_path, httpx.AsyncHTTPTransport)
            client = self._clients[socket_path] = httpx.AsyncClient(**options)
        return client

    async def handle_async_request(self, request: Request) -> Response:
        socket_path, url = _route(request)
        client = self._current_client(socket_path)
        try:
            answer = await client.request(
                request.method,
                url,
                content=request.body,
                headers=request.headers,
                timeout=_httpx_timeout(request.timeout),
            )
        except httpx.TransportError as exc:
            raise _translate_httpx_error(exc, request.url) from exc
        return Response(answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.content)

    async def aclose(self) -> None:
        clients, self._clients = self._clients, {}
        if clients and self._owned_here():
            for client in clients.values():
                await client.aclose()
