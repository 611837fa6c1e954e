"""The client's one exception tree. Transports translate their HTTP library's errors into :class:`TransportError`
subclasses; an error status becomes the :class:`RequestRejected` subclass its body's ``error_type`` names in
``service.wire.ERROR_TYPES`` (by status for a body without one: a proxy's page).

::

    TokenizerServiceError
    ├── TransportError            one try failed below HTTP (retried, then wrapped in RetriesExhausted)
    │   ├── ConnectError          nothing listens, DNS failed, connection refused or reset while connecting
    │   ├── TransportTimeout      connect or read took longer than the client's timeout (also a TimeoutError)
    │   └── ProtocolError         the connection dropped mid-answer, or the answer is not what the contract says
    ├── RequestRejected           the server answered with an error status
    │   ├── InvalidRequest        422: a bad option or input, or the tokenizer refused it (also a ValueError)
    │   ├── Unauthorized          401: missing or wrong API key
    │   ├── PayloadTooLarge       413: over one of the server's limits (see ``info()["limits"]``)
    │   ├── NotAcceptable         406: a ragged result asked for as tensors: ask for padding
    │   ├── ServerBusy            429 overloaded, 503 unavailable/draining, 504 queue timeout, 502 (retried)
    │   └── RequestTimeout        408: the request reached the server too slowly, it was not run (retried)
    ├── FingerprintMismatch       the server's tokenizer is not the one the client was pinned to
    ├── RetriesExhausted          every allowed try failed: names the URL(s), the tries and the last cause
    │   └── ServiceUnreachable    no URL ever answered and each failed to connect: given up at once
    └── LaunchError               TokenizerClient.launch could not start (or restart) its private service

Every class can be built from its message alone (other attributes are keyword-only), so an error raised in a
DataLoader worker is re-raised in the training process as the same class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "TokenizerServiceError",
    "TransportError",
    "ConnectError",
    "TransportTimeout",
    "ProtocolError",
    "RequestRejected",
    "InvalidRequest",
    "Unauthorized",
    "PayloadTooLarge",
    "NotAcceptable",
    "RequestTimeout",
    "ServerBusy",
    "FingerprintMismatch",
    "RetriesExhausted",
    "ServiceUnreachable",
    "LaunchError",
]


class TokenizerServiceError(Exception):
    """Root of every error the client raises (argument mistakes aside, which are TypeError/ValueError)."""

    def __init__(self, message: str, **attributes: Any) -> None:
        super().__init__(message)
        self.message = message
        self.__dict__.update(attributes)

    def __reduce__(self) -> Any:
        # the keyword attributes survive pickling (multiprocessing result queues)
        attributes = {k: v for k, v in self.__dict__.items() if k != "message"}
        return _rebuild, (type(self), self.message, attributes)

    def __str__(self) -> str:
        return self.message


def _rebuild(cls: type[TokenizerServiceError], message: str, attributes: dict[str, Any]) -> TokenizerServiceError:
    error = cls.__new__(cls)
    TokenizerServiceError.__init__(error, message, **attributes)
    return error


class TransportError(TokenizerServiceError):
    """One try failed before a complete HTTP answer arrived. ``url`` is the endpoint that was tried."""

    url: str | None

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message, url=url)


class ConnectError(TransportError):
    """No connection could be made (refused, unreachable, DNS failure)."""


class TransportTimeout(TransportError, TimeoutError):
    """Connecting or waiting for the answer took longer than the client's timeout."""


class ProtocolError(TransportError):
    """The connection dropped mid-answer, or the answer does not follow the service's contract."""


class RequestRejected(TokenizerServiceError):
    """The server answered with an error ``status``: ``error_type`` is its kind (``"invalid_request"``,
    ``"too_large"``...), ``error`` its own message, ``url`` the request's."""

    status: int | None
    error_type: str | None
    error: str | None
    url: str | None
    retry_after: float | None

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        error: str | None = None,
        url: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, status=status, error_type=error_type, error=error, url=url, retry_after=retry_after)


class InvalidRequest(RequestRejected, ValueError):
    """422: an option or input the server (or the tokenizer, as transformers would) refuses."""


class Unauthorized(RequestRejected):
    """401: the API key is missing or wrong (``api_key=`` or ``TOKENIZER_SERVICE_API_KEY``)."""


class PayloadTooLarge(RequestRejected):
    """413: the request is over one of the server's limits; send fewer or shorter texts."""


class NotAcceptable(RequestRejected):
    """406: the rows have different lengths and cannot be tensors: pass ``padding=`` or no ``return_tensors``."""


class ServerBusy(RequestRejected):
    """429, 503 or 504: the server is overloaded, not ready, draining or timed out in its queue (or a proxy's 502:
    a replica restarting). Retried (honouring ``Retry-After``) before :class:`RetriesExhausted`."""


class RequestTimeout(RequestRejected):
    """408: the request's headers or body missed the server's read deadlines (a stalled network, a worker paused
    mid-upload); nothing ran and the connection was closed. Retried like :class:`ServerBusy` (RFC 9110 allows)."""


class FingerprintMismatch(TokenizerServiceError):
    """The server's ``X-Tokenizer-Fingerprint`` is not the ``expected_fingerprint`` the client was given:
    the deployment serves a different tokenizer, and continuing would silently change the training data."""

    expected: str | None
    actual: str | None
    url: str | None

    def __init__(
        self, message: str, *, expected: str | None = None, actual: str | None = None, url: str | None = None
    ) -> None:
        super().__init__(message, expected=expected, actual=actual, url=url)


class RetriesExhausted(TokenizerServiceError):
    """Every allowed try failed. ``urls`` are the endpoints tried, ``attempts`` how many tries were made,
    ``last_error`` the last cause (also chained as ``__cause__``)."""

    urls: Sequence[str]
    attempts: int
    last_error: BaseException | None

    def __init__(
        self, message: str, *, urls: Sequence[str] = (), attempts: int = 0, last_error: BaseException | None = None
    ) -> None:
        super().__init__(message, urls=tuple(urls), attempts=attempts, last_error=last_error)


class ServiceUnreachable(RetriesExhausted):
    """No URL of the client has ever answered, and each failed to connect (no such name, nothing listening, TLS
    against plain HTTP): given up at once, as such a URL is most likely wrong. Once a URL has answered, a failure
    is an outage and is retried."""


class LaunchError(TokenizerServiceError):
    """:meth:`TokenizerClient.launch <service.client.TokenizerClient.launch>` could not start its service, or it
    died again after its one relaunch. The message leads with the server's own error line and quotes its log's
    end; ``log_path`` is the whole log (None when no server ran); ``server_error`` is the server's own error line
    (None when it wrote none)."""

    log_path: str | None
    server_error: str | None

    def __init__(self, message: str, *, log_path: str | None = None, server_error: str | None = None) -> None:
        super().__init__(message, log_path=log_path, server_error=server_error)
