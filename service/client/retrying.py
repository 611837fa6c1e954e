"""Which server to try next, and when: endpoint choice, failover, backoff with full jitter, Retry-After. No I/O: a
client asks an :class:`Attempts` (one per call) for the next endpoint and the wait before it, reports each failure
back, and gets :class:`RetriesExhausted` when the budget is spent; the sync and async clients differ only in how they
sleep and send.

- A call goes to the URL with the fewest calls outstanding in this process (not round-robin: a replica busy with a
  long batch is passed over); ties go round-robin from a random start in each process, so DataLoader workers do not
  all begin on one replica and calls made one at a time still spread evenly.
- A failed endpoint cools down for ``Retry-After`` seconds when the server said so (429/503), else for a jittered
  backoff (:meth:`RetryPolicy.backoff`) that resets on its first success. The next try goes at once to an endpoint
  not cooling down (failover); when all are, the client waits for the first one due.
- Until one URL of the client has answered once (in this process, or the one it was forked or pickled from), a URL
  that fails to connect is most likely wrong (a typo, the wrong port, ``https`` against plain HTTP): it is not
  retried, and when every URL has so failed the call raises :class:`ServiceUnreachable` at once, naming each URL and
  why. After that, connection errors are an outage and are retried.
- A call gives up as its :class:`RetryPolicy` says, raising one :class:`RetriesExhausted` naming the URL(s), the
  number of tries and the last cause.
"""

from __future__ import annotations

import os
import pickle
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..transport.exceptions import ConnectError, RetriesExhausted, ServerBusy, ServiceUnreachable, TokenizerServiceError

__all__ = ["RetryPolicy", "RetryLog", "Endpoints", "Attempts"]


class RetryLog:
    """The visible long retry (a job's ``--retry-deadline``): a failing service said as it happens -- at once when it
    cannot be reached (which URL, and how), after ``every`` seconds when it only says it is busy -- then a line every
    ``every`` seconds counting down, and a line when it answers again. One per client, shared by its calls in flight:
    an outage is told once, not per call. Lines begin with ``prefix`` and name ``flag``, the setting that bounds the
    retrying. Pickled without its ``log`` (a copy in a worker says nothing)."""

    def __init__(
        self,
        log: Callable[[str], None],
        *,
        prefix: str,
        flag: str,
        every: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log: Callable[[str], None] | None = log
        self.prefix, self.flag, self.every, self.clock = prefix, flag, every, clock
        self.since: float | None = None  # when the current outage began: the first try that failed in it
        self._last_line = float("-inf")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name, instead in (("log", None), ("clock", time.monotonic)):
            try:
                pickle.dumps(state[name])
            except (pickle.PicklingError, AttributeError, TypeError):
                state[name] = instead
        return state

    def failed(self, url: str, error: BaseException, started: float, deadline: float) -> None:
        """A try sent at ``started`` to ``url`` failed with ``error``; its call gives up ``deadline`` seconds after
        its first try."""
        now = self.clock()
        if self.since is None:
            self.since, self._last_line = started, float("-inf")
        waited = now - self.since
        busy = isinstance(error, ServerBusy)
        if self.log is not None and now - self._last_line >= self.every and (not busy or waited >= self.every):
            self._last_line = now
            state = "still fails" if waited >= self.every else "fails"
            left = max(0.0, deadline - waited)
            cause = f"{type(error).__name__}: {error}"
            self.log(
                f"{self.prefix}: the service at {url} {state} ({cause}); retrying for {left:.0f} s more ({self.flag})"
            )

    def answered(self) -> None:
        if self.since is not None:
            if self.log is not None and self._last_line > float("-inf"):
                self.log(f"{self.prefix}: the service answers again after {self.clock() - self.since:.0f} s")
            self.since = None

    def gave_up(self, urls: Sequence[str], deadline: float, cause: str) -> str:
        waited = self.clock() - (self.since if self.since is not None else self.clock())
        return (
            f"the service at {', '.join(urls)} failed after retrying for {waited:.0f} s ({self.flag} {deadline:g}); "
            f"last error: {cause}"
        )


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a call tries before it gives up: ``max_attempts`` tries, the first included (1: never retry), none
    starting later than ``deadline`` seconds after the first. ``backoff_initial`` and ``backoff_max`` shape the
    jittered exponential wait after a connection error; ``max_retry_after`` caps how long a server's ``Retry-After``
    is honoured. ``log``: a :class:`RetryLog` that says the retrying as it goes (a job's long deadline), else it is
    silent. The defaults ride out a rolling restart of a replica (tens of seconds) but fail a dead deployment within
    about a minute, so a training job does not hang.
    """

    max_attempts: int = 10
    deadline: float = 60.0
    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    max_retry_after: float = 30.0
    log: RetryLog | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {self.max_attempts}")
        if self.deadline < 0 or self.backoff_initial < 0 or self.backoff_max < 0 or self.max_retry_after < 0:
            raise ValueError("deadline, backoff_initial, backoff_max and max_retry_after must not be negative")

    def backoff(self, consecutive_failures: int) -> float:
        """Full jitter: uniform in [0, min(backoff_max, backoff_initial * 2**(failures-1))]."""
        ceiling = min(self.backoff_max, self.backoff_initial * (2 ** min(consecutive_failures - 1, 62)))
        return random.uniform(0.0, ceiling)


@dataclass
class _EndpointState:
    url: str
    failures: int = 0  # consecutive
    available_at: float = 0.0  # monotonic time before which we prefer not to send here
    unreachable: ConnectError | None = None  # why it could not connect, before any URL ever answered
    outstanding: int = 0  # calls of this process sent here and not yet answered


class Endpoints:
    """The base URLs of one client with their health and load, per process (rebuilt after a fork or
    unpickling), shared by the threads of the process under one lock."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = tuple(urls)
        self._pid: int | None = None
        self._states: list[_EndpointState] = []
        self._next = 0
        self._lock = threading.Lock()
        #: Whether any URL has answered (any HTTP status) once. Kept across forks and pickling: a DataLoader
        #: worker of a process that reached the service meets an outage, not a wrong URL.
        self.answered = False

    def __getstate__(self) -> dict[str, Any]:
        return {"urls": self.urls, "answered": self.answered}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.urls, self.answered = state["urls"], state["answered"]
        self._pid, self._states, self._next, self._lock = None, [], 0, threading.Lock()

    def _current(self) -> list[_EndpointState]:
        if self._pid != os.getpid():
            # a fresh process (forked: another thread may have held the lock at the fork; its counts are the parent's)
            self._lock = threading.Lock()
            self._pid = os.getpid()
            self._states = [_EndpointState(url) for url in self.urls]
            self._next = random.randrange(len(self.urls))  # each process starts somewhere else
        return self._states

    def choose(self, avoid: _EndpointState | None = None) -> tuple[_EndpointState, float]:
        """The endpoint with the fewest outstanding calls among those not cooling down (ties in rotation;
        preferring one other than ``avoid``), counted as outstanding from now on, and how long to wait before
        using it (0 unless every endpoint is cooling down). Each choice is given back by :meth:`done`."""
        states = self._current()
        with self._lock:
            state, wait = self._pick(states, avoid)
            state.outstanding += 1
        return state, wait

    def _pick(self, states: list[_EndpointState], avoid: _EndpointState | None) -> tuple[_EndpointState, float]:
        now = time.monotonic()
        start = self._next
        self._next = (start + 1) % len(states)
        rotated = states[start:] + states[:start]
        usable = [state for state in rotated if state.unreachable is None or self.answered]
        ready = [state for state in usable if state.available_at <= now]
        if ready:
            others = [state for state in ready if state is not avoid] or ready
            return min(others, key=lambda s: s.outstanding), 0.0  # the first of the least loaded: ties rotate
        soonest = min(usable or states, key=lambda s: s.available_at)
        return soonest, max(0.0, soonest.available_at - now)

    def done(self, state: _EndpointState) -> None:
        """A call chosen for ``state`` is over (answered, failed or abandoned)."""
        with self._lock:
            if state.outstanding > 0 and self._pid == os.getpid():
                state.outstanding -= 1

    def succeeded(self, state: _EndpointState) -> None:
        with self._lock:
            state.failures = 0
            state.available_at = 0.0
        self.answered = True

    def unreachable(self) -> list[_EndpointState] | None:
        """Every endpoint, when no URL has ever answered and each failed to connect; else None."""
        states = self._current()
        if self.answered or any(state.unreachable is None for state in states):
            return None
        return states

    def failed(
        self, state: _EndpointState, policy: RetryPolicy, retry_after: float | None, error: BaseException | None = None
    ) -> None:
        with self._lock:
            if isinstance(error, ConnectError) and not self.answered:
                state.unreachable = error
            state.failures += 1
            if retry_after is not None:
                pause = min(max(retry_after, 0.0), policy.max_retry_after)
            else:
                pause = policy.backoff(state.failures)
            state.available_at = time.monotonic() + pause


class Attempts:
    """The tries of one call: ``next()`` -> (endpoint, wait), then ``failed(...)`` or ``succeeded(...)``;
    ``close()`` once the call is over (it gives back the try still counted as outstanding, if any)."""

    def __init__(self, endpoints: Endpoints, policy: RetryPolicy, what: str) -> None:
        self.endpoints = endpoints
        self.policy = policy
        self.what = what  # "POST /encode", for messages
        self.started = time.monotonic()
        self.count = 0
        self.tried: list[str] = []
        self.last_error: BaseException | None = None
        self._last: _EndpointState | None = None
        self._outstanding: _EndpointState | None = None  # the try counted on its endpoint now

    def next(self) -> tuple[_EndpointState, float]:
        """The endpoint for the next try and the seconds to sleep first; raises RetriesExhausted."""
        self.close()
        unreachable = self.endpoints.unreachable()
        if unreachable is not None:
            raise self._unreachable(unreachable)
        if self.count >= self.policy.max_attempts:
            raise self._exhausted(f"after {self.count} tries")
        state, wait = self.endpoints.choose(avoid=self._last)
        self._outstanding = state
        if self.count > 0:
            elapsed = time.monotonic() - self.started
            if elapsed + wait > self.policy.deadline:
                self.close()
                raise self._exhausted(
                    f"after {self.count} tries in {elapsed:.1f}s (deadline {self.policy.deadline:g}s)"
                )
        self.count += 1
        if state.url not in self.tried:
            self.tried.append(state.url)
        self._last = state
        return state, wait

    def failed(self, state: _EndpointState, error: TokenizerServiceError, retry_after: float | None = None) -> None:
        self.close()
        self.last_error = error
        self.endpoints.failed(state, self.policy, retry_after, error)
        if self.policy.log is not None and (self.endpoints.answered or not isinstance(error, ConnectError)):
            self.policy.log.failed(state.url, error, self.started, self.policy.deadline)

    def succeeded(self, state: _EndpointState) -> None:
        self.close()
        self.endpoints.succeeded(state)
        if self.policy.log is not None:
            self.policy.log.answered()

    def close(self) -> None:
        """The current try is over: its endpoint has one call fewer outstanding. Idempotent."""
        state, self._outstanding = self._outstanding, None
        if state is not None:
            self.endpoints.done(state)

    def _unreachable(self, states: list[_EndpointState]) -> ServiceUnreachable:
        urls = ", ".join(state.url for state in states)
        causes = "; ".join(f"{type(state.unreachable).__name__}: {state.unreachable}" for state in states)
        who = f"none of {urls} has ever" if len(states) > 1 else f"{urls} has never"
        message = f"{self.what}: {who} answered, not retried (check the scheme, host and port): {causes}"
        last = self.last_error
        error = ServiceUnreachable(message, urls=[state.url for state in states], attempts=self.count, last_error=last)
        error.__cause__ = last
        return error

    def _exhausted(self, how: str) -> RetriesExhausted:
        urls = self.tried or list(self.endpoints.urls)
        last = self.last_error
        cause = f"{type(last).__name__}: {last}" if last is not None else "none"
        message = f"{self.what} failed {how} on {', '.join(urls)}; last error: {cause}"
        if self.policy.log is not None:
            message = self.policy.log.gave_up(urls, self.policy.deadline, cause)
        error = RetriesExhausted(message, urls=urls, attempts=self.count, last_error=last)
        error.__cause__ = last
        return error
