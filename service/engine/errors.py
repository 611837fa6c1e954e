"""The engine's error vocabulary: :class:`ServiceError` with an :class:`ErrorKind`, what a caller of the engine
can get wrong or what the engine cannot do right now. The web layer raises the same error with the kinds only
HTTP has (``service.http.errors``) and answers every kind with the status the wire contract's one table gives
its value (``service.wire.ERROR_TYPES``). Nothing here knows about HTTP.
"""

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
    """An error with a kind and a message that tells the caller what to fix: the one error of the engine and of
    the layers above it. ``kind``: an :class:`ErrorKind`, or a kind of a layer above (the web layer's
    ``HttpErrorKind``); its value is an ``error_type`` of ``service.wire.ERROR_TYPES``."""

    def __init__(self, kind: enum.Enum, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after

    def detached(self) -> ServiceError:
        """A copy without traceback, cause or context: raise it outside the ``except`` block that caught this
        one, so nothing the failed work's frames held (renderings, buffers) outlives the error."""
        return ServiceError(self.kind, self.message, retry_after=self.retry_after)

    def __repr__(self) -> str:
        return f"ServiceError({self.kind.value!r}, {self.message!r})"
