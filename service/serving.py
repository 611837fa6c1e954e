"""Running the app under uvicorn, with a graceful drain on SIGTERM.

Plain uvicorn closes its listening socket the moment SIGTERM arrives (new connections are refused, not
answered) and re-raises the signal at exit. For a rolling update we want: ``/readyz`` turns 503 at once,
new work is refused politely (503 + Retry-After, which the client SDK fails over on), in-flight requests
complete, and the process exits 0 -- all within ``--graceful-shutdown-seconds``. A second SIGTERM, or
SIGINT, falls back to uvicorn's own handling.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

import uvicorn

logger = logging.getLogger(__name__)


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Any, grace_seconds: float) -> None:
        super().__init__(config)
        self.app_ref = app
        self.grace_seconds = grace_seconds
        self.drain_started: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task | None = None

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
        self._drain_task = self._loop.create_task(self._drain())  # keep a reference: tasks are weak

    def _give_up(self) -> None:
        logger.error("graceful shutdown exceeded %.0fs; exiting with work still running", self.grace_seconds)
        logging.shutdown()
        os._exit(1)

    async def _drain(self) -> None:
        state = self.app_ref.state
        engine = getattr(state, "engine", None)
        if engine is not None:
            engine.draining = True  # /readyz -> 503, new work -> 503 + Retry-After
        deadline = self.drain_started + self.grace_seconds
        logger.info("SIGTERM: draining %d in-flight request(s), at most %.0fs", state.in_flight.count,
                    self.grace_seconds)
        # The drain itself holds no request; wait for those that were running to finish.
        while state.in_flight.count > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        # Whatever is left gets the rest of the grace period inside uvicorn's own shutdown.
        self.config.timeout_graceful_shutdown = max(1, int(deadline - time.monotonic()))
        logger.info("drained; shutting down")
        self.should_exit = True


def run(app: Any, *, host: str, port: int, log_level: str, access_log: bool, grace_seconds: float) -> None:
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
    DrainingServer(config, app, grace_seconds).run()
