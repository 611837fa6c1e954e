"""What a render answers to as it runs: its bounds (:class:`RenderLimits`) and the watch it checks as it goes
(:class:`RenderWatch`, charging :class:`RenderCharge`). The chat package's lowest layer: it imports no sibling."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ErrorKind, ServiceError
from ..limits import DEFAULT_LIMITS
from ..memory import Reservation


@dataclass(frozen=True)
class RenderLimits:
    """Bounds of one request's rendering, checked as it renders: ``max_chars`` per rendered conversation (the
    engine's ``max_text_chars``), ``max_conversations`` per request (its ``max_texts_per_request``)."""

    max_chars: int = DEFAULT_LIMITS.max_text_chars
    max_conversations: int = DEFAULT_LIMITS.max_texts_per_request

    def in_progress_bytes(self) -> int:
        """Bytes the renderings in progress hold at most: two at once (``"turns"`` renders a prefix beside the
        whole), each its blocks and their joined copies at 4 bytes a character, plus the blocks' objects."""
        return 2 * (3 * 4 * self.max_chars + _COMPACT_BLOCKS * 128)


#: A rendering's blocks are joined into one every this many blocks, bounding the block objects held at once.
_COMPACT_BLOCKS = 4096


class RenderWatch:
    """What a render answers to, checked as it goes on the render thread: its caller leaving (:meth:`cancel`),
    its ``deadline`` (``time.monotonic()``: TIMEOUT past it), and ``charge(nbytes)`` of its finished renderings,
    which raises to stop it. A template computing without output is only stopped at its next output."""

    def __init__(self, deadline: float | None = None, charge: Callable[[int], None] | None = None) -> None:
        self.deadline = deadline
        self._charge = charge
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def check(self) -> None:
        if self._cancelled:
            raise _RenderCancelled
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ServiceError(
                ErrorKind.TIMEOUT,
                "rendering the conversations took past the queue deadline; send fewer or shorter conversations",
            )

    def hold(self, nbytes: int) -> None:
        if self._charge is not None:
            self._charge(nbytes)


class RenderCharge:
    """A render's ``charge``: keeps ``reservation`` at ``base`` plus what the finished renderings hold, grown
    ahead in steps. :meth:`close` (on the loop, before the reservation is released) makes a later charge stop
    the render instead of touching it."""

    STEP = 1 << 20

    def __init__(self, reservation: Reservation, base: int, what: str) -> None:
        self.reservation = reservation
        self.base = base
        self.what = what
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, held: int) -> None:
        with self._lock:
            if self._closed:
                raise _RenderCancelled
            need = self.base + held
            if need <= self.reservation.nbytes:
                return
            try:
                self.reservation.resize(need + max(self.STEP, held // 2), self.what)
            except ServiceError:
                self.reservation.resize(need, self.what)  # the refusal, if even this does not fit

    def close(self) -> None:
        with self._lock:
            self._closed = True


class _RenderCancelled(Exception):
    """The caller of a render has gone; only the render thread (``renderer.py``) turns it into a cancellation."""
