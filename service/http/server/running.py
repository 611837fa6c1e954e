"""Running the app under uvicorn, with a graceful drain on the first SIGTERM or Ctrl-C (docs/explanations/limits.md,
"The drain"), where plain uvicorn closes its listener at once (resetting its accept queue) and re-raises the signal
at exit:

1. ``/readyz`` turns 503; requests being answered complete; new ones get 503 + Retry-After + ``Connection: close``
   for ``drain_listen_seconds`` (while a load balancer may still route here), or until nothing is in flight and no
   connection is open;
2. the listener closes without resetting what the kernel had accepted (:mod:`.listening`);
3. what was accepted is answered (:mod:`.protocol`), and the process exits 0 once no request or connection is left.

All within ``grace_seconds``, else exit 1; a second signal stops at once (exit 130). A ``private`` server (one
``TokenizerClient.launch`` starts; a ``serve --replicas`` replica has an owners file too, but drains as ``serve``)
drains for nobody: it closes its listener, then its idle connections, at once, and exits once the requests in
flight are answered. The uvicorn internals used are listed in :mod:`service.http.server`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import signal
import socket
import stat
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any, Protocol

import uvicorn

from ...addresses import unix_socket_url
from ...exits import EXIT_INTERRUPTED
from .listening import SocketFile, close_listeners
from .owners import OwnersWatch
from .protocol import ConnectionGuard, DrainState

logger = logging.getLogger(__name__)
#: Descriptors kept for everything but client connections (listening socket, logs, tokenizer files...).
SPARE_DESCRIPTORS = 64
#: The signals that start the drain (a pod being stopped, Ctrl-C), by the name the log gives.
DRAIN_SIGNALS: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT (Ctrl-C)"}
_POLL_SECONDS = 0.02


class Drainable(DrainState, Protocol):
    """What the launcher drains (:class:`service.http.runtime.Runtime`)."""

    @property
    def in_flight(self) -> int: ...

    def begin_drain(self) -> None: ...


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose first SIGTERM or SIGINT drains ``drain`` before shutting down."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain: Drainable,
        grace_seconds: float,
        guard: ConnectionGuard,
        listen_seconds: float = 0.0,
        socket_files: tuple[SocketFile, ...] = (),
        private: bool = False,
    ) -> None:
        super().__init__(config)
        self.drain = drain
        self.guard = guard
        self.socket_files = socket_files
        self.private = private
        self.grace_seconds = grace_seconds
        self.listen_seconds = 0.0 if private else min(listen_seconds, grace_seconds)
        self.drain_started: float | None = None
        self.drain_signal = DRAIN_SIGNALS[signal.SIGTERM]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig in DRAIN_SIGNALS and self.drain_started is not None:
            # In a signal handler: hand the work to the loop (never uvicorn's handling, which would raise the
            # signal again at exit: a KeyboardInterrupt traceback for SIGINT).
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._stop_now, DRAIN_SIGNALS[sig])
            return
        if sig in DRAIN_SIGNALS and self._loop is not None:
            self.drain_started = time.monotonic()
            self.drain_signal = DRAIN_SIGNALS[sig]
            # In a signal handler: hand the work to the loop.
            self._loop.call_soon_threadsafe(self._start_drain)
            # A Rust encode cannot be interrupted, and interpreter exit joins the engine thread: past the
            # grace period (plus a moment for the lifespan shutdown) exit hard rather than overstay.
            watchdog = threading.Timer(self.grace_seconds + 1.0, self._give_up)
            watchdog.daemon = True
            watchdog.start()
            return
        super().handle_exit(sig, frame)

    def stop_gracefully(self) -> None:
        """Drain and stop as on SIGTERM, from any thread (the owners watch); nothing if a drain has begun."""
        if self.drain_started is None:
            self.handle_exit(signal.SIGTERM, None)

    def _start_drain(self) -> None:
        assert self._loop is not None
        self._drain_task = self._loop.create_task(self._drain())  # keep a reference: tasks are weak

    def _stop_now(self, name: str) -> None:
        logger.warning("%s again: stopping now, %d request(s) unanswered", name, self.drain.in_flight)
        logging.shutdown()
        os._exit(EXIT_INTERRUPTED)

    def _give_up(self) -> None:
        logger.error("graceful shutdown exceeded %.0fs; exiting with work still running", self.grace_seconds)
        logging.shutdown()
        os._exit(1)

    async def _drain(self) -> None:
        assert self.drain_started is not None
        deadline = self.drain_started + self.grace_seconds
        self.drain.begin_drain()  # /readyz -> 503, new requests -> 503 + Retry-After
        self.guard.drain_connections()  # every answer closes its connection from now on
        logger.info(
            "%s: draining %d in-flight request(s) and %d connection(s), at most %.0fs",
            self.drain_signal,
            self.drain.in_flight,
            len(self.guard.connections),
            self.grace_seconds,
        )
        # 1. Clients still routed here are told to go elsewhere while the endpoint removal spreads.
        await self._wait_until_idle(self.drain_started + self.listen_seconds)
        # 2. New connections are refused, without resetting one the kernel had accepted. (No servers yet: SIGTERM
        # during start-up.)
        await close_listeners(getattr(self, "servers", ()), self.socket_files)
        if self.private:  # its users are gone: nobody will send on an idle connection
            self.guard.close_idle()
        # 3. What was accepted is answered, and the connections close after their last answer.
        await self._wait_until_idle(deadline)
        if self.drain.in_flight > 0:
            # A request still running at the deadline would be cut by uvicorn's shutdown and the process
            # would exit 0 as if nothing were lost: give up now, with the exit code that says so.
            self._give_up()
        # Connections still open are idle: uvicorn's shutdown closes them.
        logger.info("drained in %.1fs; shutting down", time.monotonic() - self.drain_started)
        self.should_exit = True

    async def _wait_until_idle(self, until: float) -> None:
        """Until no request is in flight and no connection is open, or ``until`` (monotonic) has passed."""
        while (self.drain.in_flight > 0 or self.guard.connections) and time.monotonic() < until:
            await asyncio.sleep(_POLL_SECONDS)


def bind_listener(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """Bind the TCP socket before the tokenizer loads, so a port in use fails at once (OSError), not after minutes;
    not listening yet, so a client is refused rather than queued unread. ``reuse_port``: ``SO_REUSEPORT``, shared
    by the replicas of ``serve --replicas``."""
    addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = addresses[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart reuses the port at once
        if reuse_port:
            if not hasattr(socket, "SO_REUSEPORT"):
                raise OSError(errno.ENOPROTOOPT, "this system has no SO_REUSEPORT, which --replicas needs")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def bind_unix_listener(path: str) -> tuple[socket.socket, SocketFile]:
    """Bind a Unix socket at ``path`` (mode 0660) as :func:`bind_listener` binds TCP. A dead server's socket file is
    replaced; a live one, or a file that is not a socket, is an OSError saying so."""
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(existing.st_mode):
            raise OSError(errno.EEXIST, "the path exists and is not a socket")
        if socket_is_live(path):
            raise OSError(errno.EADDRINUSE, "a server is listening on that socket")
        os.unlink(path)  # stale: left by a server that died
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o660)
        return sock, SocketFile.of(path)
    except OSError:
        sock.close()
        raise


def socket_is_live(path: str) -> bool:
    """Whether something accepts connections on the Unix socket at ``path`` (a full queue counts as live)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            pass  # a timeout or EAGAIN: a server too busy to accept at once is still a server
    return True


def raise_descriptor_limit() -> int:
    """Raise the soft limit on open descriptors to the hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft if soft != resource.RLIM_INFINITY else target
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        logger.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
        return soft
    return target


def connection_guard(*, max_connections: int, **limits: Any) -> ConnectionGuard:
    """This process's guard: ``max_connections`` capped below the descriptor limit (raised first)."""
    descriptors = raise_descriptor_limit()
    allowed = max(8, descriptors - SPARE_DESCRIPTORS)
    if max_connections > allowed:
        logger.warning(
            "--max-connections %d is over what %d open files allow: serving at most %d connections",
            max_connections,
            descriptors,
            allowed,
        )
        max_connections = allowed
    return ConnectionGuard(max_connections=max_connections, **limits)


def run(
    app: Any,
    drain: Drainable,
    *,
    listeners: Sequence[socket.socket],
    log_level: str,
    access_log: bool,
    grace_seconds: float,
    guard: ConnectionGuard,
    drain_listen_seconds: float,
    http_protocol: str,
    socket_files: Sequence[SocketFile] = (),
    owners: OwnersWatch | None = None,
    private: bool = False,
) -> None:
    """Serve ``app`` on ``listeners`` (Unix sockets' files in ``socket_files``) in this process (never forking)
    until drained or interrupted, or until ``owners`` sees the last process using the server gone."""
    config = server_config(
        app,
        log_level=log_level,
        access_log=access_log,
        grace_seconds=grace_seconds,
        guard=guard,
        http_protocol=http_protocol,
    )
    for listener in listeners:
        if listener.family == socket.AF_UNIX:
            logger.info("serving on %s", unix_socket_url(listener.getsockname()))
        else:
            host, port = listener.getsockname()[:2]
            logger.info("serving on http://%s:%d", f"[{host}]" if ":" in host else host, port)
    server = DrainingServer(
        config,
        drain,
        grace_seconds,
        guard,
        listen_seconds=drain_listen_seconds,
        socket_files=tuple(socket_files),
        private=private,
    )
    if owners is not None:
        owners.on_gone = server.stop_gracefully
    server.run(list(listeners))


def server_config(
    app: Any, *, log_level: str, access_log: bool, grace_seconds: float, guard: ConnectionGuard, http_protocol: str
) -> uvicorn.Config:
    """uvicorn's Config for :func:`run`: its public options (the internals test makes one on the installed uvicorn)."""
    return uvicorn.Config(
        app,
        workers=1,
        log_config=None,  # uvicorn's lines go to the root logger, in the service's format (not "INFO:     ...")
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=max(1, int(grace_seconds)),
        timeout_keep_alive=max(1, round(guard.keep_alive)),
        server_header=False,
        **protocol_settings(http_protocol, guard),
    )


def protocol_settings(http_protocol: str, guard: ConnectionGuard) -> dict[str, Any]:
    if http_protocol == "guarded":
        return {"http": guard.protocol_class(), "ws": "none"}  # no WebSocket: every Upgrade is ignored
    logger.warning(
        "--http-protocol %s: no header or body deadlines, no connection limit (comparison only)", http_protocol
    )
    if http_protocol == "h11":
        return {"http": "h11", "h11_max_incomplete_event_size": guard.max_header_bytes}
    return {"http": http_protocol}
