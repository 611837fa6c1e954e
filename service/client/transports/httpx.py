"""Transports over httpx (the ``httpx`` extra), for what the lean default transports do not do: proxies,
HTTP/2, custom auth flows. Importing this module imports httpx; ``service.client`` imports it only when one
of these classes is first asked for.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx

from ..exceptions import ConnectError, ProtocolError, TransportError, TransportTimeout
from .base import Request, Response, Timeout

__all__ = ["HTTPXTransport", "AsyncHTTPXTransport"]


def _translate_httpx_error(exc: Exception, url: str) -> TransportError:
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        return ConnectError(f"cannot connect to {url}: {exc or type(exc).__name__}", url=url)
    if isinstance(exc, httpx.TimeoutException):
        return TransportTimeout(f"no answer from {url} in time ({type(exc).__name__})", url=url)
    return ProtocolError(f"{url}: {type(exc).__name__}: {exc}", url=url)


def _httpx_timeout(timeout: Timeout) -> httpx.Timeout:
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
            self._client = httpx.Client(**self.client_options)
            self._pid = os.getpid()
        return self._client

    def handle_request(self, request: Request) -> Response:
        client = self._current_client()
        try:
            answer = client.request(
                request.method,
                request.url,
                content=request.body,
                headers=request.headers,
                timeout=_httpx_timeout(request.timeout),
            )
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
        return self._pid == os.getpid() and self._loop is asyncio.get_running_loop()

    def _current_client(self) -> Any:
        if self._client is None or not self._owned_here():
            # A client from another process or loop cannot be closed from here; it is left to the GC.
            self._client = httpx.AsyncClient(**self.client_options)
            self._pid, self._loop = os.getpid(), asyncio.get_running_loop()
        return self._client

    async def handle_async_request(self, request: Request) -> Response:
        client = self._current_client()
        try:
            answer = await client.request(
                request.method,
                request.url,
                content=request.body,
                headers=request.headers,
                timeout=_httpx_timeout(request.timeout),
            )
        except httpx.TransportError as exc:
            raise _translate_httpx_error(exc, request.url) from exc
        return Response(answer.status_code, {k.lower(): v for k, v in answer.headers.items()}, answer.content)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owned_here():
            await client.aclose()
        self._loop = None
