"""The engine's errors: :class:`ServiceError` with an :class:`ErrorKind`. The web layer raises it with its own
kinds too (``service.http.errors``) and maps every kind's value to a status (``service.wire.ERROR_TYPES``)."""

from __future__ import annotations

import enum


class ErrorKind(str, enum.Enum):
    """What went wrong, in terms a caller can act on."""

    INVALID_REQUEST = "invalid_request"  # malformed body, wrong type, unknown field: fix the request
    TOKENIZER = "tokenizer"  # the tokenizer (transformers / Rust) refused this input or option combination
    TOO_LARGE = "too_large"  # a configured limit was exceeded: send less per request
    OVERLOADED = "overloaded"  # queue full or no memory free now: retry after a pause
    UNAVAILABLE = "unavailable"  # not ready or draining: retry elsewhere
    TIMEOUT = "timeout"  # waited past the deadline in the queue
    INTERNAL = "internal"  # a bug: report it


class ServiceError(Exception):
    """The one error of the engine and the layers above, its message telling the caller what to fix. ``kind``:
    an :class:`ErrorKind` or the web layer's ``HttpErrorKind``."""

    def __init__(self, kind: enum.Enum, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after

    def detached(self) -> ServiceError:
        """A copy without traceback, cause or context, so nothing the failed work's frames held outlives it
        (raise it outside the ``except`` block that caught this one)."""
        return ServiceError(self.kind, self.message, retry_after=self.retry_after)

    def __repr__(self) -> str:
        return f"ServiceError({self.kind.value!r}, {self.message!r})"
