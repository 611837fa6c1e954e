"""Running the app under uvicorn, with a graceful drain on SIGTERM.

Plain uvicorn closes its listening socket the moment SIGTERM arrives (new connections are refused, not
answered) and re-raises the signal at exit. For a rolling update we want: ``/readyz`` turns 503 at once,
new work is refused politely (503 + Retry-After, which the client SDK fails over on), in-flight requests
complete, and the process exits 0 -- all within ``grace_seconds``. A second SIGTERM, or SIGINT, falls back
to uvicorn's own handling.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any, Protocol

import uvicorn

logger = logging.getLogger(__name__)


class Drainable(Protocol):
    """What the launcher drains (:class:`service.http.runtime.Runtime`)."""

    @property
    def in_flight(self) -> int:
        """Requests being answered now."""

    def begin_drain(self) -> None:
        """Refuse new work from now on; let admitted work finish."""


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first SIGTERM drains ``drain`` before shutting down."""

    def __init__(self, config: uvicorn.Config, drain: Drainable, grace_seconds: float) -> None:
        super().__init__(config)
        self.drain = drain
        self.grace_seconds = grace_seconds
        self.drain_started: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self.drain_started is None and self._loop is not None:
            self.drain_started = time.monotonic()
            # Runs inside a signal handler: hand the work to the loop, do nothing else here.
            self._loop.call_soon_threadsafe(self._start_drain)
            # A Rust encode cannot be interrupted, and interpreter exit joins the engine thread: past the
            # grace period (plus a moment for the lifespan shutdown) exit hard rather than overstay.
            watchdog = threading.Timer(self.grace_seconds + 1.0, self._give_up)
            watchdog.daemon = True
            watchdog.start()
            return
        super().handle_exit(sig, frame)

    def _start_drain(self) -> None:
        assert self._loop is not None
        self._drain_task = self._loop.create_task(self._drain())  # keep a reference: tasks are weak

    def _give_up(self) -> None:
        logger.error("graceful shutdown exceeded %.0fs; exiting with work still running", self.grace_seconds)
        logging.shutdown()
        os._exit(1)

    async def _drain(self) -> None:
        assert self.drain_started is not None
        self.drain.begin_drain()  # /readyz -> 503, new work -> 503 + Retry-After
        deadline = self.drain_started + self.grace_seconds
        logger.info(
            "SIGTERM: draining %d in-flight request(s), at most %.0fs", self.drain.in_flight, self.grace_seconds
        )
        # The drain itself holds no request; wait for those that were running to finish.
        while self.drain.in_flight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # Whatever is left gets the rest of the grace period inside uvicorn's own shutdown.
        self.config.timeout_graceful_shutdown = max(1, int(deadline - time.monotonic()))
        logger.info("drained; shutting down")
        self.should_exit = True


def run(
    app: Any, drain: Drainable, *, host: str, port: int, log_level: str, access_log: bool, grace_seconds: float
) -> None:
    """Serve ``app`` in this process (one uvicorn worker, never forking) until drained or interrupted."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        workers=1,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=max(1, int(grace_seconds)),
        server_header=False,
    )
    DrainingServer(config, drain, grace_seconds).run()
