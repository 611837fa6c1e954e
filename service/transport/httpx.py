"""Transports over httpx (the ``httpx`` extra), for what the lean ones do not do: proxies, HTTP/2, custom auth.
An ``http+unix://`` URL goes through an httpx client of its own bound to that socket (``uds=``), as
``http://localhost/<route>``."""

from __future__ import annotations

import asyncio
import inspect
import os
from typing import Any

import httpx

from ..addresses import UNIX_HOST, parse_service_url
from .base import Request, Response
from .exceptions import ConnectError, ProtocolError, TransportError, TransportTimeout

__all__ = ["HTTPXTransport", "AsyncHTTPXTransport"]


def _translate_httpx_error(exc: Exception, url: str) -> TransportError:
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return ConnectError(f"cannot connect to {url}: {exc or type(exc).__name__}", url=url)
    if isinstance(exc, httpx.TimeoutException):
        return TransportTimeout(f"no answer from {url} in time ({type(exc).__name__})", url=url)
    return ProtocolError(f"{url}: {type(exc).__name__}: {exc}", url=url)


def _route(request: Request) -> tuple[str | None, str]:
    """(the Unix socket or None, the URL to give httpx)."""
    address = parse_service_url(request.url)
    if address.socket_path is None:
        return None, request.url
    return address.socket_path, f"http://{UNIX_HOST}{address.target}"


def _send_options(request: Request) -> dict[str, Any]:
    timeout = httpx.Timeout(request.timeout.read, connect=request.timeout.connect, pool=request.timeout.connect)
    return {"content": request.body, "headers": request.headers, "timeout": timeout}


def _response(answer: httpx.Response) -> Response:
    return Response(answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.content)


class _ClientsPerSocket:
    """One transport's httpx clients, made lazily, one per Unix socket (None: TCP), used only by the process (and,
    async, the event loop: a pool belongs to its loop) that made them; another's are left to the GC."""

    def __init__(self, client_class: Any, transport_class: Any, **client_options: Any) -> None:
        self.client_options = client_options
        self._classes = (client_class, transport_class)
        self._clients: dict[str | None, Any] = {}
        self._owner: Any = None  # the process id, or (process id, event loop), the clients belong to

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_clients": {}, "_owner": None}

    def _client(self, socket_path: str | None, owner: Any) -> Any:
        if self._owner != owner:
            self._clients, self._owner = {}, owner
        client = self._clients.get(socket_path)
        if client is None:
            client_class, transport_class = self._classes
            options = self.client_options
            if socket_path is not None:  # the transport's options (verify, limits...) go to one on the socket
                if "transport" in options or "mounts" in options:
                    raise ValueError(
                        "an httpx transport= or mounts= of your own cannot reach a Unix socket (http+unix:// URL)"
                    )
                accepted = set(inspect.signature(transport_class).parameters) - {"uds"}
                for_transport = {name: value for name, value in options.items() if name in accepted}
                rest = {name: value for name, value in options.items() if name not in accepted}
                options = {**rest, "transport": transport_class(uds=socket_path, **for_transport)}
            client = self._clients[socket_path] = client_class(**options)
        return client

    def _take_own_clients(self, owner: Any) -> list[Any]:
        clients, self._clients = self._clients, {}
        return list(clients.values()) if self._owner == owner else []


class HTTPXTransport(_ClientsPerSocket):
    """A sync transport over ``httpx.Client`` (one per process and Unix socket, made lazily), which takes the
    keyword arguments (``verify=``, ``limits=``, ``http2=``...)."""

    def __init__(self, **client_options: Any) -> None:
        super().__init__(httpx.Client, httpx.HTTPTransport, **client_options)

    def handle_request(self, request: Request) -> Response:
        socket_path, url = _route(request)
        try:
            answer = self._client(socket_path, os.getpid()).request(request.method, url, **_send_options(request))
        except httpx.TransportError as exc:
            raise _translate_httpx_error(exc, request.url) from exc
        return _response(answer)

    def close(self) -> None:
        for client in self._take_own_clients(os.getpid()):
            client.close()


class AsyncHTTPXTransport(_ClientsPerSocket):
    """An async transport over ``httpx.AsyncClient``, one per process, event loop *and* Unix socket."""

    def __init__(self, **client_options: Any) -> None:
        super().__init__(httpx.AsyncClient, httpx.AsyncHTTPTransport, **client_options)

    async def handle_async_request(self, request: Request) -> Response:
        socket_path, url = _route(request)
        client = self._client(socket_path, (os.getpid(), asyncio.get_running_loop()))
        try:
            answer = await client.request(request.method, url, **_send_options(request))
        except httpx.TransportError as exc:
            raise _translate_httpx_error(exc, request.url) from exc
        return _response(answer)

    async def aclose(self) -> None:
        for client in self._take_own_clients((os.getpid(), asyncio.get_running_loop())):
            await client.aclose()
