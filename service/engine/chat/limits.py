"""What a render answers to as it runs: its bounds (:class:`RenderLimits`) and the watch it checks as it goes
(:class:`RenderWatch`, charging :class:`RenderCharge`). The lowest layer of the chat package: it imports none of its
siblings. A render stopped because its caller has gone raises :class:`_RenderCancelled`, which only the render
thread (``renderer.py``) turns back into a cancellation."""

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
    """Bounds of one request's rendering, checked while it renders (a template can make a small conversation
    huge): ``max_chars`` per rendered conversation (the engine's ``max_text_chars``) and ``max_conversations`` per
    request (its ``max_texts_per_request``). All of a request's renderings together are bounded by the memory
    they are charged to as they accumulate (see :class:`RenderWatch`)."""

    max_chars: int = DEFAULT_LIMITS.max_text_chars
    max_conversations: int = DEFAULT_LIMITS.max_texts_per_request

    def in_progress_bytes(self) -> int:
        """Bytes the renderings in progress hold at most, beside the finished ones: two at once (``"turns"``
        renders a prefix beside the whole), each its blocks and the joined copies made of them (a tracked
        generation block joins the blocks so far), Python strings taking up to 4 bytes per character, plus the
        block objects between compactions."""
        return 2 * (3 * 4 * self.max_chars + _COMPACT_BLOCKS * 128)


#: A rendering's blocks are joined into one every this many blocks: a template yielding tiny blocks (or a loop
#: of them) holds no more than this many block objects at once.
_COMPACT_BLOCKS = 4096


class RenderWatch:
    """What a render in progress answers to, checked as it goes (on the render thread): its caller leaving
    (:meth:`cancel`), its ``deadline`` (``time.monotonic()``: TIMEOUT past it), and the memory its finished
    renderings hold (``charge(nbytes)``, called as they accumulate; it raises to stop the render, e.g. when the
    memory budget has no room). A template that computes for long without writing anything is only stopped at
    its next output."""

    def __init__(self, deadline: float | None = None, charge: Callable[[int], None] | None = None) -> None:
        self.deadline = deadline
        self._charge = charge
        self._cancelled = False

    def cancel(self) -> None:
        """The caller has gone: the render stops at its next check."""
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
        """The finished renderings now hold ``nbytes``."""
        if self._charge is not None:
            self._charge(nbytes)


class RenderCharge:
    """A render's ``charge`` (:class:`RenderWatch`): keeps ``reservation`` at ``base`` plus what the finished
    renderings hold, grown ahead in steps, from the render thread. :meth:`close` (on the loop, before the
    reservation can be released) stops any later charge from touching it: a render still running then stops."""

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
    """The caller of a render has gone: nobody waits for its result."""
