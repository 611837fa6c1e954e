"""The one error vocabulary of the service.

The engine raises :class:`ServiceError` with an :class:`ErrorKind`; the web layer maps each kind to an
HTTP status in exactly one table (``service.http.responses.STATUS_BY_KIND``). Nothing here knows about HTTP.
"""

from __future__ import annotations

import enum


class ErrorKind(str, enum.Enum):
    """What went wrong, in terms a caller can act on."""

    INVALID_REQUEST = "invalid_request"  # malformed body, wrong type, unknown field: fix the request
    MALFORMED_HTTP = "malformed_http"  # not HTTP/1.1 the parser accepts (the connection is closed)
    TOKENIZER = "tokenizer"  # the tokenizer (transformers / Rust) refused this input or option combination
    TOO_LARGE = "too_large"  # a configured limit was exceeded: send less per request
    NOT_ACCEPTABLE = "not_acceptable"  # the result cannot be represented in the requested format
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # a body that is not (uncompressed, UTF-8) JSON
    HEADERS_TOO_LARGE = "headers_too_large"  # the request line and headers exceed the limit
    REQUEST_TIMEOUT = "request_timeout"  # the client took too long to send its headers or body
    UNAUTHORIZED = "unauthorized"  # missing or wrong API key
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    OVERLOADED = "overloaded"  # queue full: retry after a pause
    UNAVAILABLE = "unavailable"  # not ready or draining: retry elsewhere
    TIMEOUT = "timeout"  # waited past the deadline in the queue
    CLIENT_GONE = "client_gone"  # the client disconnected before the answer: nobody to tell
    INTERNAL = "internal"  # a bug: report it


class ServiceError(Exception):
    """An error with a kind and a message that tells the caller what to fix."""

    def __init__(self, kind: ErrorKind, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"ServiceError({self.kind.value!r}, {self.message!r})"
