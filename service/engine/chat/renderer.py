"""The async path: the render thread (:class:`ChatRenderer`), one dedicated thread that renders and marks masks
off the event loop, one request after another, withdrawing or stopping a render whose caller has gone (the
engine's ``_chat`` renders through it, encodes with its batched encode, then marks masks through it). The top
layer of the chat package: nothing in it imports this module."""

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
    """``fn(*args)``; a ServiceError it raises comes out as a copy without a traceback. (The original's
    traceback holds the render's frames, and with them every rendering made so far: kept with the future, or
    until the garbage collector breaks its cycles, it would hold memory a refused render gave back to the
    budget -- measured: ~100 MB per refused render bomb.)"""
    error = None
    try:
        return fn(*args)
    except ServiceError as exc:
        error = exc.detached()
    raise error


class ChatRenderer:
    """The render thread: renders (and marks masks) off the event loop, one request after another.

    ``astart()`` inside the running loop, ``astop()`` when done. Cancelling an awaiting caller withdraws its
    render if it has not started, and stops it at its next check if it has (:class:`RenderWatch`). Nothing run
    here calls into the Rust tokenizer (the package docstring)."""

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
        """Renders (and mask markings) waiting for the render thread: submitted, not started, not withdrawn."""
        with self._lock:
            return sum(not future.running() and not future.done() for future in self._submitted)

    async def render(self, prepared: PreparedChats, watch: RenderWatch | None = None) -> RenderedChats:
        """:func:`render_chats` on the render thread."""
        watch = watch or RenderWatch()
        try:
            rendered: RenderedChats = await self._run(render_chats, prepared, watch)
        except asyncio.CancelledError:
            watch.cancel()
            raise
        return rendered

    async def add_masks(self, encoded: EncodedBatch, rendered: RenderedChats) -> EncodedBatch:
        """:func:`add_assistant_masks` on the render thread (numpy over every token of the batch)."""
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
