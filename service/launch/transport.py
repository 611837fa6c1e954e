"""What ``TokenizerClient.launch`` adds to a client, as its transport: the launched service and this client's share
of it. A call a dead replica cannot take goes to the others while it is relaunched, or, with none running, waits
for the relaunch and is tried once more. A copy in another process (a DataLoader worker) owns nothing: the share
is never pickled. No asyncio at import: DataLoader workers unpickle the sync transport.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..fingerprint_pins import check_fingerprint_pin, fingerprint_matches
from ..transport.base import AsyncTransport, Request, Response, SyncTransport
from ..transport.exceptions import ConnectError, FingerprintMismatch
from ..transport.stdlib import HTTPTransport
from .command import ServeCommand
from .launched import LaunchedService
from .ownership import Share, launch_or_attach, release
from .recovery import recover, recover_in_background
from .rendezvous import require_posix

__all__ = ["LaunchedTransport", "AsyncLaunchedTransport", "Launch", "launch", "START_TIMEOUT"]

#: Seconds ``launch`` waits for a ready service by default (a hub tokenizer may be downloading).
START_TIMEOUT = 300.0


class _Bound:
    """What both launched transports hold: the service, and this process's share of it (never pickled)."""

    service: LaunchedService
    _share: Share | None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_share": None}

    def release(self) -> None:
        """Let go of this client's share (the replicas stop once no process uses them; the last waits for them).
        Idempotent."""
        share, self._share = self._share, None
        if share is not None:
            release(share)

    def describe(self) -> str:
        return self.service.describe("launched")

    def _stranded(self, request: Request) -> int | None:
        """After a failed connect: the replica to wait for, or None when another runs (the client sends the call
        there while this one is relaunched in the background)."""
        replica = self.service.replica_at(request.url)
        if self.service.others_running(replica):
            recover_in_background(self.service, replica)
            return None
        return replica


class LaunchedTransport(_Bound):
    """A launched client's transport; ``inner`` (default :class:`HTTPTransport`) does the I/O."""

    def __init__(self, service: LaunchedService, share: Share | None, inner: SyncTransport | None = None) -> None:
        self.service = service
        self._share = share
        self.inner: SyncTransport = inner if inner is not None else HTTPTransport()
        if share is not None:
            share.ownership.transports.add(self)  # closed when the service stops: an open connection delays it

    def handle_request(self, request: Request) -> Response:
        try:
            return self.inner.handle_request(request)
        except ConnectError:
            replica = self._stranded(request)
            if replica is None:
                raise  # the client sends the call to another replica
            recover(self.service, replica)
            return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()

    def sync_twin(self) -> LaunchedTransport:
        return self


class AsyncLaunchedTransport(_Bound):
    """The asyncio twin of :class:`LaunchedTransport` (recovery runs in a thread: it may start a server)."""

    def __init__(self, service: LaunchedService, share: Share | None, inner: AsyncTransport | None = None) -> None:
        if inner is None:
            from ..transport.streams import AsyncHTTPTransport

            inner = AsyncHTTPTransport()
        self.service = service
        self._share = share
        self.inner: AsyncTransport = inner

    async def handle_async_request(self, request: Request) -> Response:
        import asyncio

        try:
            return await self.inner.handle_async_request(request)
        except ConnectError:
            replica = self._stranded(request)
            if replica is None:
                raise
            await asyncio.to_thread(recover, self.service, replica)
            return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def sync_twin(self) -> LaunchedTransport:
        """A sync transport to the same service, owning nothing (for a collator: DataLoaders call it sync)."""
        return LaunchedTransport(self.service, None)


@dataclass(frozen=True)
class Launch:
    """A launched (or attached) service and this process's share of it: what a launched client is built on."""

    service: LaunchedService
    share: Share

    def release(self) -> None:
        release(self.share)


def launch(
    model: str | os.PathLike[str] | None,
    serve_options: Mapping[str, Any],
    *,
    api_key: str | None = None,
    expected_fingerprint: str | None = None,
    start_timeout: float = START_TIMEOUT,
    python: str | None = None,
    replicas: int | str = 1,
) -> Launch:
    """The service for ``model`` and ``serve_options`` (``serve``'s settings) on this machine, launched or attached
    to, with this process's share; FingerprintMismatch when it serves another than ``expected_fingerprint``."""
    require_posix()  # before anything else: on Windows, say what to do instead
    command = ServeCommand.build(model, serve_options, api_key, python or sys.executable, replicas)
    share = launch_or_attach(command, start_timeout)
    service = share.ownership.service
    if expected_fingerprint is not None and not fingerprint_matches(
        check_fingerprint_pin(expected_fingerprint), service.fingerprint
    ):
        release(share)
        raise FingerprintMismatch(
            f"the launched service for {command.description} serves {service.fingerprint}, not the expected "
            f"{expected_fingerprint}",
            expected=expected_fingerprint,
            actual=service.fingerprint,
            url=service.url,
        )
    return Launch(service, share)
