"""``tokenizer-service serve --replicas K``: K servers behind one port, started by exec from this process, which
serves nothing (what it promises, and why: docs/guides/deploying.md, "One big machine, without Kubernetes"). It
binds the port first (``SO_REUSEPORT``, never listening; a port a server answers on is refused, else a set of this
user's would be joined), waits for every replica ready on one fingerprint (asked on a private Unix socket each),
forwards SIGTERM and SIGINT (each replica has a session of its own), and holds each one's owners lock, so that even
a SIGKILL of this process leaves none running. A replica failing, whenever, stops them all: exit 1.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..addresses import MAX_SOCKET_PATH_BYTES
from ..launch.rendezvous import hold_shared
from ..plurals import counted
from ..processes import how_it_ended, ready_fingerprint, stop_servers
from ..serve_flags import serve_arguments
from ..sizing import AUTO, ReplicaPlan, plan_replicas
from ..wire import API_KEY_ENV, ENV_PREFIX
from .port_taken import cannot_listen, local_host
from .settings import Settings

__all__ = ["plan_for", "serve_replicas", "SET_BY_THE_PARENT"]

logger = logging.getLogger(__name__)

#: The settings this process sets for each replica itself.
SET_BY_THE_PARENT = frozenset(
    {"replicas", "host", "port", "uds", "reuse_port", "owners_file", "replica_of", "threads", "calibrate"}
)
#: How long a replica may drain past its own ``--graceful-shutdown-seconds`` before it is killed.
STOP_MARGIN_SECONDS = 10.0
_POLL_SECONDS = 0.05


@dataclass
class _Replica:
    index: int
    count: int
    socket_path: str  # where this process asks /readyz and /info
    owners_path: str
    process: subprocess.Popen[bytes] | None = None
    fingerprint: str | None = None
    owners_fd: int | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        pid = f", pid {self.process.pid}" if self.process is not None else ""
        return f"replica {self.index + 1} of {self.count}{pid}"


class _Signals:
    """SIGTERM and SIGINT, noted in order for the main loop to forward."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda sig, frame: self.pending.append(sig))

    def take(self) -> list[int]:
        taken, self.pending = self.pending, []
        return taken


def plan_for(settings: Settings, prog: str) -> ReplicaPlan:
    """The replicas and threads ``--replicas`` asks for: a count as given, ``auto`` from this machine's kept
    calibration for the tokenizer (made now if none is kept, unless ``--no-calibrate``), said in one line."""
    if settings.replicas == AUTO:
        from ..calibration.auto import auto_plan

        plan = auto_plan(
            settings.model, settings.revision, threads=settings.threads, use_calibration=settings.calibrate
        )
        logger.info("--replicas auto: %s", plan.summary)
    else:
        plan = plan_replicas(settings.replicas, settings.threads)
    if plan.warning:
        print(f"{prog}: warning: {plan.warning}", file=sys.stderr, flush=True)
    return plan


def serve_replicas(settings: Settings, given: Mapping[str, Any], prog: str, plan: ReplicaPlan) -> int:
    """Run ``plan.count`` replicas of ``plan.threads_each`` Rust threads until all have stopped; their exit
    status."""
    from .server import bind_listener

    try:  # a port in use fails at once
        if settings.port != 0 and _answered(settings.host, settings.port):
            raise OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE))  # as a bind says it (SO_REUSEPORT would not)
        reserved = bind_listener(settings.host, settings.port, reuse_port=True)  # never listens: the replicas do
    except OSError as exc:
        print(cannot_listen(prog, settings.host, settings.port, exc), file=sys.stderr)
        return 1
    host, port = reserved.getsockname()[:2]
    folder = _private_folder()
    replicas = [
        _Replica(i, plan.count, os.path.join(folder, f"{i}.sock"), os.path.join(folder, f"{i}.owners"))
        for i in range(plan.count)
    ]
    signals = _Signals()
    try:
        for replica in replicas:
            replica.owners_fd = hold_shared(replica.owners_path, 1.0, "holding a new owners file")
        argv, env = _replica_command(given)
        shared = ["--host", settings.host, "--port", str(port), "--reuse-port", "--replica-of", str(plan.count)]
        if plan.threads is not None:
            shared += ["--threads", str(plan.threads)]  # the plan's, or --threads as given
        for replica in replicas:
            own = ["--uds", replica.socket_path, "--owners-file", replica.owners_path]
            replica.process = subprocess.Popen(
                [*argv, *shared, *own],
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # a Ctrl-C in the terminal reaches this process only, which forwards it
            )

        def say_up() -> None:
            logger.info(
                "serving on %s with %d replicas (pids %s; %s each; %s)",
                f"http://{f'[{host}]' if ':' in host else host}:{port}",
                plan.count,
                ", ".join(str(r.process.pid) for r in replicas if r.process is not None),
                counted(plan.threads_each, "Rust thread"),
                replicas[0].fingerprint,
            )

        return _supervise(replicas, signals, prog, say_up)
    finally:
        running = [replica.process for replica in replicas if replica.process is not None]
        stop_servers(running, wait=settings.graceful_shutdown_seconds + STOP_MARGIN_SECONDS)
        reserved.close()
        for replica in replicas:
            if replica.owners_fd is not None:
                os.close(replica.owners_fd)
        shutil.rmtree(folder, ignore_errors=True)


def _supervise(replicas: list[_Replica], signals: _Signals, prog: str, say_up: Callable[[], None]) -> int:
    """Until a signal (forwarded, then :func:`_wait_all`) or a replica's exit (1). Once all are ready, ``say_up()``,
    or 1 if their fingerprints differ."""
    waiting, up = list(replicas), False
    while True:
        forwarded = signals.take()
        if forwarded:
            _forward(replicas, forwarded)
            return _wait_all(replicas, signals)
        for replica in replicas:
            assert replica.process is not None
            starting = replica in waiting
            code = replica.process.poll()
            if code is not None:
                when = "before it was ready" if starting else "while serving"
                after = "" if starting else " (a partial set never stays up: restart the whole set)"
                print(
                    f"{prog}: {replica.name} {how_it_ended(code)} {when}; stopping the others{after}", file=sys.stderr
                )
                return 1
            if starting:
                replica.fingerprint = ready_fingerprint(replica.socket_path)
                if replica.fingerprint is not None:
                    waiting.remove(replica)
        if not waiting and not up:
            if len({replica.fingerprint for replica in replicas}) > 1:
                listing = "; ".join(f"{r.name}: {r.fingerprint}" for r in replicas)
                print(
                    f"{prog}: the replicas serve different tokenizers ({listing}): were the tokenizer's files changed "
                    "while they loaded? stopping them all",
                    file=sys.stderr,
                )
                return 1
            say_up()
            up = True
        time.sleep(_POLL_SECONDS)


def _wait_all(replicas: list[_Replica], signals: _Signals) -> int:
    """Wait for every replica to exit, forwarding further signals; the worst exit status."""
    while any(r.process is not None and r.process.poll() is None for r in replicas):
        _forward(replicas, signals.take())
        time.sleep(_POLL_SECONDS)
    worst = 0
    for replica in replicas:
        assert replica.process is not None
        code = replica.process.returncode
        if code != 0:
            logger.warning("%s %s", replica.name, how_it_ended(code))
        worst = max(worst, 1 if code < 0 else code)
    return worst


def _forward(replicas: list[_Replica], signals: list[int]) -> None:
    for sig in signals:
        for replica in replicas:
            if replica.process is not None and replica.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    replica.process.send_signal(sig)


def _replica_command(given: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Each replica's command (``serve`` with the flags given, but those this process sets) and environment (this
    one's, but ``--replicas``; the API key by environment only)."""
    settings = {name: value for name, value in given.items() if name not in SET_BY_THE_PARENT}
    api_key = settings.pop("api_key", None)
    env = {name: value for name, value in os.environ.items() if name != ENV_PREFIX + "REPLICAS"}
    if api_key is not None:
        env[API_KEY_ENV] = str(api_key)  # never on a command line, which other users can read
    return [sys.executable, "-m", "service", "serve", *serve_arguments(settings)], env


def _private_folder() -> str:
    """A private directory for the replicas' sockets and owners files, short enough for a socket path."""
    folder = tempfile.mkdtemp(prefix="tokenizer-service-replicas-")
    if len(os.fsencode(os.path.join(folder, "0000.sock"))) > MAX_SOCKET_PATH_BYTES:
        os.rmdir(folder)
        folder = tempfile.mkdtemp(prefix="ts-replicas-", dir="/tmp")
    return folder


def _answered(host: str, port: int) -> bool:
    """Whether a server accepts connections on ``host``'s ``port`` (a wildcard host: this machine)."""
    try:
        with socket.create_connection((local_host(host), port), timeout=1.0):
            return True
    except OSError:
        return False
