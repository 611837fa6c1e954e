"""``AsyncTokenizerClient``: the asyncio twin of :class:`~service.client.TokenizerClient`, in a module of its own so
that the sync client, what DataLoader workers use, never imports asyncio.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from ..transport.base import AsyncTransport, SyncTransport
from ..transport.exceptions import TransportError
from ..transport.streams import AsyncHTTPTransport
from .answers import finish, retried_rejection
from .base import ClientBase, launched
from .operations import Call
from .retrying import Attempts
from .sync_client import TokenizerClient

T = TypeVar("T")
P = ParamSpec("P")


def _twin(
    method: Callable[Concatenate[TokenizerClient, P], T],
) -> Callable[Concatenate[AsyncTokenizerClient, P], Coroutine[Any, Any, T]]:
    """The coroutine twin of a :class:`TokenizerClient` method: its signature, docstring and body, run on this client,
    whose ``_send`` (and ``_send_all``), the body's last step, are coroutines, awaited."""

    @functools.wraps(method)
    async def twin(self: AsyncTokenizerClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        sent = method(self, *args, **kwargs)  # type: ignore[arg-type]  # (the body ends in an awaitable here)
        return cast(T, await cast(Awaitable[Any], sent))

    return twin


class AsyncTokenizerClient(ClientBase[AsyncTransport]):
    """The asyncio twin of :class:`TokenizerClient`: same arguments, same methods as coroutines (``await client(texts,
    ...)``), ``aclose()`` and ``async with``. The default transport is :class:`AsyncHTTPTransport` (lean asyncio
    streams; one connection pool per process and event loop); ``transport=AsyncHTTPXTransport()`` uses
    ``httpx.AsyncClient`` instead."""

    def _default_transport(self) -> AsyncTransport:
        return AsyncHTTPTransport()

    async def _send(self, call: Call[T]) -> T:
        attempts = Attempts(self._endpoints, self.retry, call.what)
        try:
            while True:
                endpoint, wait = attempts.next()
                if wait > 0:
                    await asyncio.sleep(wait)
                request = self._request(call, endpoint.url)
                try:
                    response = await self._transport.handle_async_request(request)
                except TransportError as exc:
                    attempts.failed(endpoint, exc)
                    continue
                busy = retried_rejection(response, request.url, call.method)
                if busy is not None:
                    attempts.failed(endpoint, busy, busy.retry_after)
                    continue
                attempts.succeeded(endpoint)
                return finish(call, response, request.url, self.expected_fingerprint)
        finally:
            attempts.close()  # an error that is not retried (or a KeyboardInterrupt) leaves no call counted

    async def _send_all(self, calls: Sequence[Call[Any]], combine: Callable[[list[Any]], T]) -> T:
        return combine([await self._send(call) for call in calls])

    encode = _twin(TokenizerClient.encode)
    __call__ = encode
    lengths = _twin(TokenizerClient.lengths)
    encode_ragged = _twin(TokenizerClient.encode_ragged)
    decode = _twin(TokenizerClient.decode)
    batch_decode = _twin(TokenizerClient.batch_decode)
    tokenize = _twin(TokenizerClient.tokenize)
    # (transformers' signature: **kwargs beside a named self, which a ParamSpec cannot carry)
    apply_chat_template = _twin(cast(Any, TokenizerClient.apply_chat_template))
    chat_encode_ragged = _twin(TokenizerClient.chat_encode_ragged)
    info = _twin(TokenizerClient.info)

    @classmethod
    def launch(cls, model: str | os.PathLike[str] | None = None, **options: Any) -> Launching:
        """As :meth:`TokenizerClient.launch`: ``client = await AsyncTokenizerClient.launch(...)``, or
        ``async with AsyncTokenizerClient.launch(...) as client:`` (start-up runs off the event loop)."""

        def start() -> AsyncTokenizerClient:
            from ..launch.transport import AsyncLaunchedTransport

            return launched(cls, model, options, AsyncLaunchedTransport)

        return Launching(start)

    async def aclose(self) -> None:
        """Close this process's connections on the running event loop."""
        await self._transport.aclose()

    async def shutdown(self) -> None:
        """As :meth:`TokenizerClient.shutdown` (letting go in a thread: the last one waits for the server to stop)."""
        await self.aclose()
        release = getattr(self._transport, "release", None)
        if release is not None:
            await asyncio.to_thread(release)

    async def __aenter__(self) -> AsyncTokenizerClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.shutdown()

    def as_sync(self) -> TokenizerClient:
        """The sync twin: the same settings, a sync transport to the same place (this one if it is sync too, as a
        MockTransport is; a launched transport's twin, which owns nothing)."""
        twin = getattr(self._transport, "sync_twin", None)
        transport = (
            twin() if twin is not None else self._transport if isinstance(self._transport, SyncTransport) else None
        )
        return TokenizerClient(**self._settings(), transport=transport)


class Launching:
    """What ``AsyncTokenizerClient.launch`` returns: ``await`` it for the client, or use it as ``async with``
    (the service is let go of at the end of the block)."""

    def __init__(self, start: Callable[[], AsyncTokenizerClient]) -> None:
        self._start = start
        self._client: AsyncTokenizerClient | None = None

    async def _launched(self) -> AsyncTokenizerClient:
        if self._client is None:
            self._client = await asyncio.to_thread(self._start)  # start-up blocks: off the event loop
        return self._client

    def __await__(self) -> Generator[Any, None, AsyncTokenizerClient]:
        return self._launched().__await__()

    async def __aenter__(self) -> AsyncTokenizerClient:
        return await self._launched()

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._client is not None:
            await self._client.__aexit__(*exc_info)
