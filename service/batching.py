"""Micro-batching: concurrent encode requests with compatible options share one Rust encode call.

One queue, one owner. Requests wait in a FIFO; a single loop takes the head request, gathers the queued
requests that share its batch key (same truncation state, same special-token and offset choice) for a
short window or until the text/character caps are reached, and runs them as one ``encode_batch`` on the
engine's single thread. Each request is then padded and shaped on its own, so its result is exactly what
encoding it alone returns. The queue is bounded: when full, submit refuses at once (OVERLOADED).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol, Sequence

from .encoding import EncodedBatch, EncodePlan
from .errors import ErrorKind, ServiceError


@dataclass(frozen=True)
class BatchingConfig:
    enabled: bool = True
    max_wait_seconds: float = 0.0  # how long the first request of a batch waits for company
    max_batch_texts: int = 256  # texts (or pairs) per Rust call; a bigger request runs alone
    max_batch_chars: int = 512 * 1024  # characters per Rust call
    max_queued_requests: int = 1024  # beyond this, refuse with OVERLOADED
    max_queued_texts: int = 65536
    queue_timeout_seconds: float = 30.0  # a request still queued after this gets TIMEOUT

    def __post_init__(self) -> None:
        if self.max_wait_seconds < 0 or self.queue_timeout_seconds <= 0:
            raise ValueError("max_wait_seconds must be >= 0 and queue_timeout_seconds > 0")
        if min(self.max_batch_texts, self.max_batch_chars, self.max_queued_requests, self.max_queued_texts) < 1:
            raise ValueError("batch and queue caps must be >= 1")


class BatchObserver(Protocol):
    """Hooks for metrics; the engine knows nothing of Prometheus."""

    def batch_done(self, requests: int, texts: int, seconds: float) -> None: ...
    def request_rejected(self, reason: str) -> None: ...
    def request_dropped(self) -> None: ...
    def queue_changed(self, requests: int, texts: int) -> None: ...


@dataclass
class EncodeWork:
    """One request waiting to be encoded."""

    inputs: Sequence[Any]  # str or (str, str) per text
    plan: EncodePlan
    chars: int
    future: asyncio.Future
    enqueued_at: float = field(default_factory=time.monotonic)
    started: bool = False  # taken into a batch: the queue deadline no longer applies
    expiry: asyncio.TimerHandle | None = None  # fires the queue deadline


# Runs one batch on the engine thread: inputs of several requests, their plans -> per-request outcome
# (an EncodedBatch or the ServiceError for that request alone).
RunBatch = Callable[[list[EncodeWork]], Awaitable[list[EncodedBatch | BaseException]]]


class Batcher:
    """Collects :class:`EncodeWork` and feeds batches to ``run_batch``, one at a time."""

    def __init__(self, config: BatchingConfig, run_batch: RunBatch, observer: BatchObserver | None = None) -> None:
        self.config = config
        self._run_batch = run_batch
        self._observer = observer
        self._queue: deque[EncodeWork] = deque()
        self._queued_texts = 0
        self._queued_chars = 0
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        while self._queue:
            work = self._queue.popleft()
            if not work.future.done():
                work.future.set_exception(ServiceError(ErrorKind.UNAVAILABLE, "the server is shutting down"))
        self._queued_texts = self._queued_chars = 0

    # -- admission --------------------------------------------------------------------------------------
    @property
    def queued_requests(self) -> int:
        return len(self._queue)

    @property
    def queued_texts(self) -> int:
        return self._queued_texts

    def is_overloaded(self, texts: int = 0) -> bool:
        return (
            len(self._queue) >= self.config.max_queued_requests
            or self._queued_texts + texts > self.config.max_queued_texts
        )

    def submit(self, work: EncodeWork) -> "asyncio.Future[EncodedBatch]":
        """Queue ``work`` and return its future (refusing at once when the queue is full).

        Cancelling the future -- the caller has gone -- drops the work if it is not yet encoded. A request
        still queued after ``queue_timeout_seconds`` fails with TIMEOUT; once in a batch it runs to the end.
        """
        if self._task is None:
            raise ServiceError(ErrorKind.UNAVAILABLE, "the engine is not running")
        texts = len(work.inputs)
        if self.is_overloaded(texts) and self._queue:
            self._notify_rejected("queue_full")
            raise ServiceError(
                ErrorKind.OVERLOADED,
                f"the queue is full ({len(self._queue)} requests, {self._queued_texts} texts waiting); retry shortly",
                retry_after=1.0,
            )
        self._queue.append(work)
        self._queued_texts += texts
        self._queued_chars += work.chars
        work.expiry = work.future.get_loop().call_later(self.config.queue_timeout_seconds, self._expire, work)
        work.future.add_done_callback(lambda _: self._forget(work))
        self._wakeup.set()
        return work.future

    def _forget(self, work: EncodeWork) -> None:
        """A queued request that ended before its batch (caller gone, deadline passed) leaves the queue at
        once, so it neither counts against the limits nor holds its texts until the next batch."""
        if work.started:
            return
        try:
            self._queue.remove(work)
        except ValueError:  # already taken out by _take_batch
            return
        self._queued_texts -= len(work.inputs)
        self._queued_chars -= work.chars
        if work.expiry is not None:
            work.expiry.cancel()
        if work.future.cancelled():
            self._notify_dropped()

    def _expire(self, work: EncodeWork) -> None:
        if work.started or work.future.done():
            return
        self._notify_rejected("timeout")
        work.future.set_exception(ServiceError(
            ErrorKind.TIMEOUT,
            f"the request waited over {self.config.queue_timeout_seconds:g}s for the tokenizer; the server is "
            "saturated, retry later or elsewhere",
        ))

    # -- the loop ---------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self.config.enabled and self.config.max_wait_seconds > 0 and not self._caps_reached():
                await self._gather_window()
            batch = self._take_batch()
            if not batch:
                continue
            started = time.perf_counter()
            try:
                outcomes = await self._run_batch(batch)
            except BaseException as exc:  # the whole call failed: every request gets the error
                if isinstance(exc, asyncio.CancelledError):
                    for work in batch:
                        if not work.future.done():
                            work.future.set_exception(ServiceError(ErrorKind.UNAVAILABLE, "the server is shutting down"))
                    raise
                outcomes = [exc] * len(batch)
            elapsed = time.perf_counter() - started
            for work, outcome in zip(batch, outcomes):
                if work.expiry is not None:
                    work.expiry.cancel()
                if work.future.done():
                    continue
                if isinstance(outcome, BaseException):
                    work.future.set_exception(outcome)
                else:
                    work.future.set_result(outcome)
            if self._observer is not None:
                self._observer.batch_done(len(batch), sum(len(w.inputs) for w in batch), elapsed)

    async def _gather_window(self) -> None:
        deadline = self._queue[0].enqueued_at + self.config.max_wait_seconds
        while not self._caps_reached():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _caps_reached(self) -> bool:
        return (
            self._queued_texts >= self.config.max_batch_texts
            or self._queued_chars >= self.config.max_batch_chars
        )

    def _take_batch(self) -> list[EncodeWork]:
        """Pop the head request and every queued request that fits with it (same batch key, under caps)."""
        batch: list[EncodeWork] = []
        kept: deque[EncodeWork] = deque()
        texts = chars = 0
        key = None
        while self._queue:
            work = self._queue.popleft()
            if work.future.done():  # caller gone or timed out: drop before any work is done
                if work.expiry is not None:
                    work.expiry.cancel()
                if work.future.cancelled():
                    self._notify_dropped()
                continue
            fits = (
                not batch
                or (
                    self.config.enabled
                    and work.plan.batch_key == key
                    and texts + len(work.inputs) <= self.config.max_batch_texts
                    and chars + work.chars <= self.config.max_batch_chars
                )
            )
            if fits:
                if not batch:
                    key = work.plan.batch_key
                work.started = True
                batch.append(work)
                texts += len(work.inputs)
                chars += work.chars
            else:
                kept.append(work)
            if not self.config.enabled and batch:
                break
        kept.extend(self._queue)
        self._queue = kept
        self._queued_texts = sum(len(w.inputs) for w in kept)
        self._queued_chars = sum(w.chars for w in kept)
        self._notify_queue()
        return batch

    def reject(self, reason: str) -> None:
        """Count a refusal made elsewhere under this queue's limits (the engine's tokenize/decode)."""
        self._notify_rejected(reason)

    # -- observer plumbing ------------------------------------------------------------------------------
    def _notify_queue(self) -> None:
        if self._observer is not None:
            self._observer.queue_changed(len(self._queue), self._queued_texts)

    def _notify_rejected(self, reason: str) -> None:
        if self._observer is not None:
            self._observer.request_rejected(reason)

    def _notify_dropped(self) -> None:
        if self._observer is not None:
            self._observer.request_dropped()
