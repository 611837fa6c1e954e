"""The memory budget: what all in-flight work may hold at once (``docs/explanations/limits.md``). Every request
reserves an upper bound of what it will hold (:mod:`service.engine.bounds`) through the batcher's admission,
before allocating it, until its answer is sent: over the whole budget it is TOO_LARGE (413), not fitting now
OVERLOADED (429). Releasing a large one trims glibc's arenas off the event loop, at most once per
:data:`TRIM_INTERVAL_SECONDS` (a trim after every large answer cost the hot path ~15%, measured by the
investigation ``benchmarks.checkouts`` at commit d64e1e6)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import threading
import time
from collections.abc import Callable

from ..sizing.machine import cgroup_memory_limit
from .errors import ErrorKind, ServiceError

MIB = 1 << 20
#: The budget when the process has no cgroup memory limit (a laptop, a VM).
DEFAULT_BUDGET_WITHOUT_LIMIT = 1024 * MIB
#: Memory the process needs at rest beside the budget (interpreter, libraries, tokenizer, allocator slack).
RESTING_MEMORY = 256 * MIB
#: The budget's share of what the limit leaves beside :data:`RESTING_MEMORY`: fragmentation and socket buffers
#: are not in the bounds.
BUDGET_SHARE_OF_LIMIT = 0.75
#: Releasing a reservation at least this large trims the allocator's arenas afterwards...
TRIM_AFTER_BYTES = 32 * MIB
#: ... at once if the last trim is this long ago, else when it is (one trim for all released meanwhile).
TRIM_INTERVAL_SECONDS = 1.0


def default_memory_budget(limit: int | None = None) -> int:
    """The budget for a process under memory ``limit`` bytes (default: its cgroup's)."""
    if limit is None:
        limit = cgroup_memory_limit()
    if limit is None:
        return DEFAULT_BUDGET_WITHOUT_LIMIT
    return max(32 * MIB, int((limit - RESTING_MEMORY) * BUDGET_SHARE_OF_LIMIT))


class MemoryBudget:
    """Bytes that in-flight work may hold at once."""

    def __init__(self, capacity: int, on_change: Callable[[int], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError("the memory budget must be at least one byte")
        self.capacity = capacity
        self.in_use = 0
        self._on_change = on_change
        self._lock = threading.Lock()  # the engine thread resizes reservations too
        self._trimmer = _Trimmer()

    def reserve(self, nbytes: int, what: str) -> Reservation:
        """Reserve ``nbytes`` for ``what`` (words for the error message), or raise TOO_LARGE / OVERLOADED."""
        reservation = Reservation(self)
        reservation.resize(nbytes, what)
        return reservation

    def _take(self, nbytes: int, what: str, held: int) -> None:
        with self._lock:
            if nbytes > self.capacity:
                raise ServiceError(
                    ErrorKind.TOO_LARGE,
                    f"{what} needs up to {_mib(nbytes)} of memory, over the server's whole memory budget of "
                    f"{_mib(self.capacity)}; send fewer or shorter texts per request (or a smaller max_length)",
                )
            if nbytes - held > self.capacity - self.in_use:
                raise ServiceError(
                    ErrorKind.OVERLOADED,
                    f"{what} needs up to {_mib(nbytes)} of memory and the server's memory budget has "
                    f"{_mib(self.capacity - self.in_use)} free now; retry shortly",
                    retry_after=1.0,
                )
            self.in_use += nbytes - held
            if self._on_change is not None:
                self._on_change(self.in_use)

    def _add(self, delta: int) -> None:
        with self._lock:
            self.in_use += delta
        if self._on_change is not None:
            self._on_change(self.in_use)

    def _released(self, nbytes: int) -> None:
        self._add(-nbytes)
        if nbytes >= TRIM_AFTER_BYTES:
            self._trimmer.trim_soon()


class Reservation:
    """Part of the budget held by one request until :meth:`release` (idempotent)."""

    __slots__ = ("_budget", "nbytes")

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget: MemoryBudget | None = budget
        self.nbytes = 0

    def resize(self, nbytes: int, what: str) -> None:
        """Hold ``nbytes`` from now on; growing raises TOO_LARGE / OVERLOADED (and keeps the old size)."""
        budget = self._budget
        if budget is None:
            raise RuntimeError("the reservation was released")
        if nbytes > self.nbytes:
            budget._take(nbytes, what, self.nbytes)
        else:
            budget._add(nbytes - self.nbytes)
        self.nbytes = nbytes

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget._released(self.nbytes)


def _mib(nbytes: int) -> str:
    return f"{nbytes / MIB:,.1f} MiB"


@functools.cache
def _libc_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # musl, macOS: nothing to trim this way
        return None


class _Trimmer:
    """Runs glibc's ``malloc_trim(0)`` on a short-lived thread, at most once per ``interval``: a request made
    while it waits is served by its trim, one made while it trims gets one more trim after the interval."""

    def __init__(self, function: Callable[[int], int] | None = None, interval: float = TRIM_INTERVAL_SECONDS) -> None:
        self._function = function or _libc_malloc_trim()
        self._interval = interval
        self._lock = threading.Lock()
        self._running = False
        self._pending = False
        self._last = -math.inf  # monotonic time the last trim ended

    def trim_soon(self) -> None:
        if self._function is None:
            return
        with self._lock:
            self._pending = True
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._trim, args=(self._function,), name="malloc-trim", daemon=True).start()

    def _trim(self, function: Callable[[int], int]) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._running = False
                    return
            wait = self._last + self._interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with self._lock:
                self._pending = False  # this trim returns what was freed until now
            function(0)
            self._last = time.monotonic()
