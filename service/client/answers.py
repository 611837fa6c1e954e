"""How an answer ends a call: an error status as the client exception its ``error_type`` names (the contract's one
table, ``service.wire.ERROR_TYPES``), which of them are worth another try, ``Retry-After``, and the fingerprint pin
checked before a body is read. Shared by the sync and async clients; no I/O."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import TypeVar

from ..fingerprint_pins import fingerprint_matches
from ..transport import Response, exceptions
from ..transport.exceptions import FingerprintMismatch, RequestRejected, RequestTimeout, ServerBusy
from ..wire import (
    ERROR_FIELD,
    ERROR_TYPE_FIELD,
    ERROR_TYPES,
    EXCEPTION_BY_STATUS,
    FINGERPRINT_HEADER,
    RETRY_AFTER_HEADER,
)
from .operations import Call, json_loads

T = TypeVar("T")

#: The exception of each ``error_type`` (``service.wire.ERROR_TYPES``), and of each status for an answer whose body
#: names no ``error_type`` the table knows (a proxy's page, say).
REJECTION_BY_ERROR_TYPE: dict[str, type[RequestRejected]] = {
    error_type: getattr(exceptions, error.exception) for error_type, error in ERROR_TYPES.items()
}
REJECTION_BY_STATUS: dict[int, type[RequestRejected]] = {
    status: getattr(exceptions, name) for status, name in EXCEPTION_BY_STATUS.items()
}
# Worth another try, maybe elsewhere: overloaded, draining, queue timeout, a proxy's bad gateway while a replica
# restarts (ServerBusy), and a request that reached the server too slowly for anything to run (RequestTimeout).
RETRIED_REJECTIONS = (ServerBusy, RequestTimeout)


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: delay-seconds or an HTTP-date (RFC 9110); None if absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def rejection(response: Response, url: str, method: str) -> RequestRejected:
    """The exception for an error status, from the server's ``{"error", "error_type"}`` body."""
    error: str | None = None
    error_type: str | None = None
    try:
        parsed = json_loads(response.body)
        if isinstance(parsed, dict):
            error, error_type = parsed.get(ERROR_FIELD), parsed.get(ERROR_TYPE_FIELD)
    except ValueError:
        pass
    if error is None:  # not the service's shape: a proxy's page, say
        snippet = bytes(response.body[:200]).decode("utf-8", "replace").strip()
        error = snippet or "(empty body)"
    cls = REJECTION_BY_ERROR_TYPE.get(error_type) if isinstance(error_type, str) else None
    if cls is None:  # no error_type the contract knows: the status says what it can
        cls = REJECTION_BY_STATUS.get(response.status, RequestRejected)
    kind = f" {error_type}" if error_type else ""
    message = f"{method} {url} -> {response.status}{kind}: {error}"
    return cls(
        message,
        status=response.status,
        error_type=error_type,
        error=error,
        url=url,
        retry_after=retry_after_seconds(response.headers.get(RETRY_AFTER_HEADER.lower())),
    )


def retried_rejection(response: Response, url: str, method: str) -> RequestRejected | None:
    """The rejection an answer stands for when it is worth another try (:data:`RETRIED_REJECTIONS`), else None."""
    if 200 <= response.status < 300:
        return None
    rejected = rejection(response, url, method)
    return rejected if isinstance(rejected, RETRIED_REJECTIONS) else None


def check_fingerprint(expected: str | None, actual: str | None, url: str) -> None:
    """FingerprintMismatch unless the pin ``expected`` (a whole fingerprint or a prefix of one) names ``actual``."""
    if expected is not None and not fingerprint_matches(expected, actual):
        seen = f"serves {actual}" if actual else "sent no X-Tokenizer-Fingerprint"
        pin = "" if len(expected) == len(actual or "") else " (a prefix pins the fingerprints that begin with it)"
        raise FingerprintMismatch(
            f"{url} {seen}, but this client is pinned to expected_fingerprint={expected}{pin}: the deployment "
            "changed tokenizer; refusing to continue with different token ids",
            expected=expected,
            actual=actual,
            url=url,
        )


def finish(call: Call[T], response: Response, url: str, expected_fingerprint: str | None) -> T:
    """The parsed body of an answer not retried, or the error it stands for."""
    if not 200 <= response.status < 300:
        raise rejection(response, url, call.method)
    if not call.fingerprint_in_body:  # checked before parsing: a mismatch is the error, whatever the body
        check_fingerprint(expected_fingerprint, response.headers.get(FINGERPRINT_HEADER.lower()), url)
    result = call.parse(response, url)
    if call.fingerprint_in_body:
        check_fingerprint(expected_fingerprint, result["fingerprint"], url)  # type: ignore[index]
    return result
