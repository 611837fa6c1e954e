"""The render thread (:class:`ChatRenderer`), through which the engine renders and marks masks. The chat
package's top layer: no sibling imports it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..encoding import EncodedBatch
from ..errors import ErrorKind, ServiceError
from .limits import RenderWatch, _RenderCancelled
from .masks import add_assistant_masks
from .rendering import RenderedChats, render_chats
from .templates import PreparedChats


def _without_frames(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, a ServiceError it raises coming out as a copy without traceback: the original's holds the
    render's frames, and every rendering so far, past the budget's release (measured: ~100 MB per render bomb)."""
    error = None
    try:
        return fn(*args)
    except ServiceError as exc:
        error = exc.detached()
    raise error


class ChatRenderer:
    """Renders (and marks masks) off the event loop, one request after another. ``astart()`` inside the running
    loop, ``astop()`` when done. Cancelling a caller withdraws its render, or stops it at its next check."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._submitted: set[Future[Any]] = set()

    async def astart(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chat-render")

    async def astop(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    @property
    def waiting(self) -> int:
        """Submitted, not started, not withdrawn."""
        with self._lock:
            return sum(not future.running() and not future.done() for future in self._submitted)

    async def render(self, prepared: PreparedChats, watch: RenderWatch | None = None) -> RenderedChats:
        watch = watch or RenderWatch()
        try:
            rendered: RenderedChats = await self._run(render_chats, prepared, watch)
        except asyncio.CancelledError:
            watch.cancel()
            raise
        return rendered

    async def add_masks(self, encoded: EncodedBatch, rendered: RenderedChats) -> EncodedBatch:
        if rendered.spans is None and "offset_mapping" not in encoded.data:
            return encoded
        masked: EncodedBatch = await self._run(add_assistant_masks, encoded, rendered)
        return masked

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._executor is None:
            raise ServiceError(ErrorKind.UNAVAILABLE, "the chat renderer is not running")
        future = self._executor.submit(_without_frames, fn, *args)
        with self._lock:
            self._submitted.add(future)
        future.add_done_callback(self._forget)
        try:
            return await asyncio.wrap_future(future)  # cancelling this withdraws a render not yet started
        except _RenderCancelled:  # (only when the caller has gone, so nobody reads this)
            raise asyncio.CancelledError from None

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._submitted.discard(future)
