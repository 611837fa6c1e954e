"""Admission and micro-batching: every job for the tokenizer waits in one bounded queue, and one loop hands
the head job with the queued jobs sharing its batch key (the same Rust call), up to the caps, to ``run_batch``;
a job without a key, or ``alone``, runs alone. The batcher knows nothing of what a job does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import ErrorKind, ServiceError
from .memory import MemoryBudget, Reservation


@dataclass(frozen=True)
class BatchingConfig:
    enabled: bool = True
    max_wait_seconds: float = 0.0  # how long the first job of a batch waits for company
    max_batch_texts: int = 256  # texts (or pairs) per Rust call; a bigger job runs alone
    max_batch_chars: int = 512 * 1024  # characters per Rust call
    max_queued_requests: int = 1024  # beyond this, refuse with OVERLOADED
    max_queued_texts: int = 65536
    queue_timeout_seconds: float = 30.0  # a job still queued after this gets TIMEOUT

    def __post_init__(self) -> None:
        if self.max_wait_seconds < 0 or self.queue_timeout_seconds <= 0:
            raise ValueError("max_wait_seconds must be >= 0 and queue_timeout_seconds > 0")
        if min(self.max_batch_texts, self.max_batch_chars, self.max_queued_requests, self.max_queued_texts) < 1:
            raise ValueError("batch and queue caps must be >= 1")


#: The defaults, as one value (the server's settings read theirs from it).
DEFAULT_BATCHING = BatchingConfig()


class BatchObserver(Protocol):
    """Hooks for metrics (the engine knows nothing of Prometheus)."""

    def batch_done(self, requests: int, texts: int, seconds: float) -> None: ...
    def request_rejected(self, reason: str) -> None: ...
    def request_dropped(self) -> None: ...
    def queue_changed(self, requests: int, texts: int) -> None: ...
    def memory_changed(self, in_use: int) -> None: ...


@dataclass(eq=False)
class Job:
    """One request waiting for the tokenizer thread. ``cost`` bounds the bytes it holds until answered: admission
    resizes the caller's ``reservation`` to it, or reserves it for the job (released when the future is done)."""

    payload: Any
    texts: int
    chars: int
    batch_key: Hashable | None
    future: asyncio.Future[Any]
    cost: int = 0
    reservation: Reservation | None = None
    what: str = "this request"  # for the budget's error messages
    alone: bool = False
    enqueued_at: float = field(default_factory=time.monotonic)
    started: bool = False  # taken into a batch: the queue deadline no longer applies
    expiry: asyncio.TimerHandle | None = None  # fires the queue deadline


class Batcher:
    """Admits :class:`Job` s and feeds them to ``run_batch`` a batch at a time (one result or exception per job)."""

    def __init__(
        self,
        config: BatchingConfig,
        run_batch: Callable[[list[Job]], Awaitable[list[Any]]],
        observer: BatchObserver | None = None,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.config = config
        self._run_batch = run_batch
        self._observer = observer
        self.budget = budget or MemoryBudget(1 << 62)
        self._queue: deque[Job] = deque()
        self._queued_texts = 0
        self._queued_chars = 0
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._queue:
            job = self._queue.popleft()
            if not job.future.done():
                job.future.set_exception(ServiceError(ErrorKind.UNAVAILABLE, "the server is shutting down"))
        self._queued_texts = self._queued_chars = 0

    @property
    def queued_requests(self) -> int:
        return len(self._queue)

    @property
    def queued_texts(self) -> int:
        return self._queued_texts

    def submit(self, job: Job) -> asyncio.Future[Any]:
        """Queue ``job`` and return its future, or refuse at once: OVERLOADED when the queue is full or the budget
        has no room for ``job.cost`` now, TOO_LARGE when it never will. A job still queued at the deadline fails
        (TIMEOUT); cancelling the future drops it if not started; once in a batch it runs to the end."""
        self._check_queue(job.texts)
        try:
            if job.reservation is not None:
                job.reservation.resize(job.cost, job.what)
            else:
                reservation = self.budget.reserve(job.cost, job.what)
                job.reservation = reservation
                job.future.add_done_callback(lambda _: reservation.release())
        except ServiceError as exc:
            self._notify_rejected("memory" if exc.kind is ErrorKind.OVERLOADED else "too_large")
            raise
        self._queue.append(job)
        self._queued_texts += job.texts
        self._queued_chars += job.chars
        job.expiry = job.future.get_loop().call_later(self.config.queue_timeout_seconds, self._expire, job)
        job.future.add_done_callback(lambda _: self._forget(job))
        self._notify_queue()
        assert self._wakeup is not None  # (checked by _check_queue)
        self._wakeup.set()
        return job.future

    def reserve_intake(self, nbytes: int, what: str) -> Reservation:
        """Reserve ``nbytes`` for a body about to be read, with :meth:`submit`'s checks: an overloaded server
        refuses before reading it."""
        self._check_queue(1)
        try:
            return self.budget.reserve(nbytes, what)
        except ServiceError as exc:
            self._notify_rejected("memory" if exc.kind is ErrorKind.OVERLOADED else "too_large")
            raise

    def _check_queue(self, texts: int) -> None:
        if self._task is None or self._wakeup is None:
            raise ServiceError(ErrorKind.UNAVAILABLE, "the engine is not running")
        if self._queue and (  # an empty queue takes any one job
            len(self._queue) >= self.config.max_queued_requests
            or self._queued_texts + texts > self.config.max_queued_texts
        ):
            self._notify_rejected("queue_full")
            raise ServiceError(
                ErrorKind.OVERLOADED,
                f"the queue is full ({len(self._queue)} requests, {self._queued_texts} texts waiting); retry shortly",
                retry_after=1.0,
            )

    def _forget(self, job: Job) -> None:
        """A queued job that ended before its batch (caller gone, deadline passed) leaves the queue at once."""
        if job.started:
            return
        try:
            self._queue.remove(job)
        except ValueError:  # already taken out by _take_batch
            return
        self._queued_texts -= job.texts
        self._queued_chars -= job.chars
        if job.expiry is not None:
            job.expiry.cancel()
        if job.future.cancelled():
            self._notify_dropped()
        self._notify_queue()

    def _expire(self, job: Job) -> None:
        if job.started or job.future.done():
            return
        self._notify_rejected("timeout")
        job.future.set_exception(
            ServiceError(
                ErrorKind.TIMEOUT,
                f"the request waited over {self.config.queue_timeout_seconds:g}s for the tokenizer; the server is "
                "saturated, retry later or elsewhere",
            )
        )

    async def _loop(self) -> None:
        assert self._wakeup is not None
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
            outcomes: list[Any]
            try:
                outcomes = await self._run_batch(batch)
            except asyncio.CancelledError:
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(ServiceError(ErrorKind.UNAVAILABLE, "the server is shutting down"))
                raise
            except BaseException as exc:  # noqa: BLE001 -- the whole call failed: every job gets the error
                outcomes = [exc] * len(batch)
            if len(outcomes) != len(batch):  # a runner bug must fail every job, never leave one hanging
                error = ServiceError(ErrorKind.INTERNAL, f"the engine answered {len(outcomes)} of {len(batch)} jobs")
                outcomes = [error] * len(batch)
            elapsed = time.perf_counter() - started
            for job, outcome in zip(batch, outcomes, strict=True):
                if job.expiry is not None:
                    job.expiry.cancel()
                if job.future.done():
                    continue
                if isinstance(outcome, BaseException):
                    job.future.set_exception(outcome)
                else:
                    job.future.set_result(outcome)
            if self._observer is not None:
                self._observer.batch_done(len(batch), sum(job.texts for job in batch), elapsed)

    async def _gather_window(self) -> None:
        assert self._wakeup is not None
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
        return self._queued_texts >= self.config.max_batch_texts or self._queued_chars >= self.config.max_batch_chars

    def _take_batch(self) -> list[Job]:
        """Pop the head job and every queued job that fits with it (same batch key, under the caps)."""
        batch: list[Job] = []
        kept: deque[Job] = deque()
        texts = chars = 0
        key: Hashable | None = None
        while self._queue:
            job = self._queue.popleft()
            if job.future.done():  # caller gone or timed out: drop before any work is done
                if job.expiry is not None:
                    job.expiry.cancel()
                if job.future.cancelled():
                    self._notify_dropped()
                continue
            fits = not batch or (
                self.config.enabled
                and key is not None
                and not job.alone
                and job.batch_key == key
                and texts + job.texts <= self.config.max_batch_texts
                and chars + job.chars <= self.config.max_batch_chars
            )
            if fits:
                if not batch:
                    key = job.batch_key
                job.started = True
                batch.append(job)
                texts += job.texts
                chars += job.chars
            else:
                kept.append(job)
            if batch and (key is None or not self.config.enabled or batch[0].alone):
                break  # a job that runs alone
        kept.extend(self._queue)
        self._queue = kept
        self._queued_texts = sum(job.texts for job in kept)
        self._queued_chars = sum(job.chars for job in kept)
        self._notify_queue()
        return batch

    def _notify_queue(self) -> None:
        if self._observer is not None:
            self._observer.queue_changed(len(self._queue), self._queued_texts)

    def _notify_rejected(self, reason: str) -> None:
        if self._observer is not None:
            self._observer.request_rejected(reason)

    def _notify_dropped(self) -> None:
        if self._observer is not None:
            self._observer.request_dropped()
