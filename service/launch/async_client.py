"""The asyncio twin of :mod:`.client`: the client ``AsyncTokenizerClient.launch`` returns, and the awaitable
(and async context manager) that launches it off the event loop."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Generator
from typing import Any

from ..client.async_client import AsyncTokenizerClient
from ..client.clients import TokenizerClient
from ..client.exceptions import ConnectError
from ..client.transports.base import AsyncTransport, Request, Response
from ..client.transports.streams import AsyncHTTPTransport
from .client import START_TIMEOUT, Launched, LaunchedTokenizerClient, launch_client
from .supervisor import LaunchedService, Share, release

__all__ = ["LaunchedAsyncTokenizerClient", "AsyncRecoveringTransport", "Launching", "launch_async"]


class AsyncRecoveringTransport:
    """The asyncio twin of :class:`RecoveringTransport` (recovery runs in a thread: it may start a server)."""

    def __init__(self, inner: AsyncTransport, service: LaunchedService) -> None:
        self.inner = inner
        self.service = service

    async def handle_async_request(self, request: Request) -> Response:
        try:
            return await self.inner.handle_async_request(request)
        except ConnectError:
            replica = self.service.replica_at(request.url)
            if self.service.others_running(replica):
                self.service.recover_in_background(replica)
                raise
            await asyncio.to_thread(self.service.recover, replica)
            return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class LaunchedAsyncTokenizerClient(Launched, AsyncTokenizerClient):
    """The asyncio twin of :class:`LaunchedTokenizerClient`: ``await client.shutdown()``, ``async with``."""

    def __init__(
        self, service: LaunchedService, *, share: Share | None, transport: AsyncTransport | None = None, **options: Any
    ) -> None:
        inner = transport if transport is not None else AsyncHTTPTransport()
        transport = AsyncRecoveringTransport(inner, service)
        super().__init__(list(service.urls), expected_fingerprint=service.fingerprint, transport=transport, **options)
        self._bind(service, share)

    async def shutdown(self) -> None:
        """As :meth:`LaunchedTokenizerClient.shutdown` (in a thread: the last one waits for the server to stop)."""
        if self._share is not None:
            await asyncio.to_thread(release, self._share)

    async def __aexit__(self, *exc_info: Any) -> None:
        await super().__aexit__(*exc_info)
        await self.shutdown()

    def _sync_client(self) -> TokenizerClient:
        settings = self._settings()
        del settings["url"], settings["expected_fingerprint"]
        return LaunchedTokenizerClient(self.service, share=None, **settings)


class Launching:
    """What ``AsyncTokenizerClient.launch`` returns: ``await`` it for the client, or use it as ``async with``
    (the service is let go of at the end of the block)."""

    def __init__(self, start: Callable[[], LaunchedAsyncTokenizerClient]) -> None:
        self._start = start
        self._client: LaunchedAsyncTokenizerClient | None = None

    async def _launched(self) -> LaunchedAsyncTokenizerClient:
        if self._client is None:
            self._client = await asyncio.to_thread(self._start)  # start-up blocks: off the event loop
        return self._client

    def __await__(self) -> Generator[Any, None, LaunchedAsyncTokenizerClient]:
        return self._launched().__await__()

    async def __aenter__(self) -> LaunchedAsyncTokenizerClient:
        return await self._launched()

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._client is not None:
            await self._client.__aexit__(*exc_info)


def launch_async(
    model: str | os.PathLike[str] | None = None,
    *,
    start_timeout: float = START_TIMEOUT,
    python: str | None = None,
    replicas: int | str = 1,
    **options: Any,
) -> Launching:
    """``AsyncTokenizerClient.launch``: as :func:`launch`, awaitable."""
    return Launching(
        lambda: launch_client(LaunchedAsyncTokenizerClient, model, start_timeout, python, replicas, options)
    )
