"""The client ``TokenizerClient.launch`` returns: an ordinary client bound to a private service on this
machine (:mod:`.supervisor` starts, finds, owns and relaunches it), whose transport asks for the service to
be relaunched when it cannot be reached, and which lets go of the service at ``shutdown()``, at the end of a
``with`` block, or at interpreter exit. The asyncio twin is :mod:`.async_client` (this module imports no
asyncio: DataLoader workers unpickle it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from ..client.clients import TokenizerClient
from ..client.exceptions import ConnectError, FingerprintMismatch
from ..client.transports.base import Request, Response, SyncTransport
from ..client.transports.stdlib import HTTPTransport
from ..wire import API_KEY_ENV, check_fingerprint_pin, fingerprint_matches
from .rendezvous import require_posix
from .supervisor import LaunchedService, ServeCommand, Share, release, take_share

__all__ = [
    "LaunchedTokenizerClient",
    "RecoveringTransport",
    "launch",
    "CLIENT_OPTIONS",
    "START_TIMEOUT",
]


# -- the transports of launched clients -------------------------------------------------------------------
class RecoveringTransport:
    """A launched client's transport: ``inner`` does the I/O; when a replica cannot be reached, either the
    other replicas take its calls -- the ConnectError goes up, and the client sends the call to another
    replica -- while it is relaunched in the background, or, when no other replica runs, the request waits
    while :meth:`LaunchedService.recover` relaunches it if it died, and is tried once more."""

    def __init__(self, inner: SyncTransport, service: LaunchedService) -> None:
        self.inner = inner
        self.service = service

    def handle_request(self, request: Request) -> Response:
        try:
            return self.inner.handle_request(request)
        except ConnectError:
            replica = self.service.replica_at(request.url)
            if self.service.others_running(replica):
                self.service.recover_in_background(replica)
                raise
            self.service.recover(replica)
            return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


# -- the launched clients ---------------------------------------------------------------------------------
class Launched:
    """What both launched clients add to their base: the service, and this client's share of its ownership
    (never pickled: a copy in another process owns nothing)."""

    service: LaunchedService
    _share: Share | None

    def _bind(self, service: LaunchedService, share: Share | None) -> None:
        self.service = service
        self._share = share

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_share": None}

    def __repr__(self) -> str:
        return self.service.describe(type(self).__name__)


class LaunchedTokenizerClient(Launched, TokenizerClient):
    """A :class:`TokenizerClient` bound to a service :meth:`TokenizerClient.launch` started, or found running,
    on this machine. ``service`` (a :class:`LaunchedService`) says where it is, its pid and its log.

    ``shutdown()``, or the end of a ``with`` block, lets go of the service: it stops once no process on this
    machine uses it; a client never shut down lets go at interpreter exit. Copies of the client in DataLoader
    workers (forked or pickled) use the service and never own it. ``options``: those of :class:`TokenizerClient`
    but the URL and the fingerprint, which are the service's."""

    def __init__(
        self, service: LaunchedService, *, share: Share | None, transport: SyncTransport | None = None, **options: Any
    ) -> None:
        inner = transport if transport is not None else HTTPTransport()
        transport = RecoveringTransport(inner, service)
        super().__init__(list(service.urls), expected_fingerprint=service.fingerprint, transport=transport, **options)
        self._bind(service, share)
        if share is not None:
            share.ownership.clients.add(self)  # closed when the service stops: an open connection delays it

    def shutdown(self) -> None:
        """Let go of the launched service (its replicas stop once no process on this machine uses it). Idempotent."""
        self.close()
        if self._share is not None:
            release(self._share)

    def __exit__(self, *exc_info: Any) -> None:
        super().__exit__(*exc_info)
        self.shutdown()


# -- launch() ---------------------------------------------------------------------------------------------
#: The options of ``launch`` that are the client's (as :class:`TokenizerClient` takes them); ``api_key`` is
#: also the server's. Every other keyword is a setting of ``tokenizer-service serve``.
CLIENT_OPTIONS = frozenset({"api_key", "timeout", "retry", "headers", "transport", "expected_fingerprint"})
#: Seconds ``launch`` waits for a ready service by default (a hub tokenizer may be downloading).
START_TIMEOUT = 300.0


def launch_client(
    client_class: Callable[..., Any],
    model: str | os.PathLike[str] | None,
    start_timeout: float,
    python: str | None,
    replicas: int | str,
    options: Mapping[str, Any],
) -> Any:
    require_posix()  # before anything else: on Windows, say what to do instead
    client_options = {name: value for name, value in options.items() if name in CLIENT_OPTIONS}
    serve_options = {name: value for name, value in options.items() if name not in CLIENT_OPTIONS}
    api_key = client_options.get("api_key")
    expected = client_options.pop("expected_fingerprint", None)
    command = ServeCommand.build(model, serve_options, api_key, python or sys.executable, replicas)
    share = take_share(command, start_timeout)
    service = share.ownership.service
    if expected is not None and not fingerprint_matches(check_fingerprint_pin(expected), service.fingerprint):
        release(share)
        raise FingerprintMismatch(
            f"the launched service for {command.description} serves {service.fingerprint}, not the expected {expected}",
            expected=expected,
            actual=service.fingerprint,
            url=service.url,
        )
    if api_key is None:
        client_options["api_key"] = os.environ.get(API_KEY_ENV) or None
    return client_class(service, share=share, **client_options)


def launch(
    model: str | os.PathLike[str] | None = None,
    *,
    start_timeout: float = START_TIMEOUT,
    python: str | None = None,
    replicas: int | str = 1,
    **options: Any,
) -> LaunchedTokenizerClient:
    """``TokenizerClient.launch`` (its docstring says what it takes; the module docs of this and
    :mod:`.supervisor` say how it works)."""
    client: LaunchedTokenizerClient = launch_client(
        LaunchedTokenizerClient, model, start_timeout, python, replicas, options
    )
    return client
