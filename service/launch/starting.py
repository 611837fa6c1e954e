"""Starting a launched service's servers and finding them ready: each started by exec (nothing of this process's
Python or tokenizer state runs in them) in a session of its own (a Ctrl-C reaches the training script, which lets
go), its output appended to its log, and its record written once it answers; a server that exits or is not ready in
time is an error that quotes its own line from its log. :func:`attach_or_start`: under the launch key's one lock
(:mod:`.rendezvous`), the first process starts the replicas and every other attaches to them."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..addresses import unix_socket_url
from ..processes import how_it_ended, ready_fingerprint, running_since, stop_servers
from ..transport.exceptions import LaunchError
from .command import ServeCommand, check_server_installed
from .launched import LaunchedService
from .rendezvous import Record, ServicePaths, close_locks, exclusive_lock, hold_shared, launch_directory

__all__ = ["MAX_LAUNCHES", "STOP_WAIT_SECONDS", "start", "failure", "ready_or_gone", "attach_or_start"]

logger = logging.getLogger(__name__)

#: A replica is launched at most this many times per record (relaunched once).
MAX_LAUNCHES = 2
#: How long a service that is stopping (draining) may take before a process waiting on it gives up.
STOP_WAIT_SECONDS = 45.0
#: How many lines of the server's log an error quotes.
LOG_LINES = 12

_PROG = "tokenizer-service serve"


@dataclass
class _Starting:
    replica: int
    paths: ServicePaths
    process: subprocess.Popen[bytes]
    offset: int  # where this launch's lines begin in its log


def _spawn(command: ServeCommand, replica: int, paths: ServicePaths, launches: int) -> _Starting:
    if launches == 1:  # the previous service's log kept as <log>.1: a crashed run's survives, none pile up
        with contextlib.suppress(FileNotFoundError):
            os.replace(paths.log, paths.log + ".1")
    with open(paths.log, "wb" if launches == 1 else "ab") as log:
        offset = log.tell()
        what = "launched" if launches == 1 else f"relaunched (launch {launches} of {MAX_LAUNCHES})"
        log.write(f"---- {time.strftime('%Y-%m-%d %H:%M:%S')} {what} by pid {os.getpid()}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command.argv(paths),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=command.environment(),
            close_fds=True,
            start_new_session=True,
        )
    return _Starting(replica, paths, process, offset)


def start(
    command: ServeCommand, replicas: Mapping[int, ServicePaths], launches: int, timeout: float
) -> dict[int, tuple[subprocess.Popen[bytes], Record]]:
    """Start ``replicas`` (index -> files), wait until all are ready, write their records; LaunchError (all stopped)."""
    starting = [_spawn(command, replica, paths, launches) for replica, paths in replicas.items()]
    try:
        fingerprints = _wait_until_ready(command, starting, timeout)
    except BaseException:
        stop_servers([s.process for s in starting], wait=STOP_WAIT_SECONDS)
        raise
    started = {}
    for item in starting:
        pid = item.process.pid
        record = Record(pid, fingerprints[item.replica], launches, command.description, running_since(pid))
        record.write(item.paths.record)
        started[item.replica] = (item.process, record)
    return started


def _wait_until_ready(command: ServeCommand, starting: Sequence[_Starting], timeout: float) -> dict[int, str]:
    """Each replica's fingerprint once all are ready; LaunchError for one that exits, or is not ready in time."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    fingerprints: dict[int, str] = {}
    while len(fingerprints) < len(starting):
        for item in starting:
            if item.replica in fingerprints:
                continue
            fingerprint = ready_fingerprint(item.paths.socket)
            if fingerprint is not None:
                fingerprints[item.replica] = fingerprint
                continue
            code = item.process.poll()
            if code is not None:
                what = f"{how_it_ended(code)} before it was ready"
            elif time.monotonic() > deadline:
                what = f"was not ready within {timeout:g}s (start_timeout=)"
            else:
                continue
            raise failure(f"{command.name(item.replica)} {what}", item.paths, item.offset)
        time.sleep(pause)
        pause = min(pause * 1.5, 0.1)
    return fingerprints


def failure(headline: str, paths: ServicePaths, offset: int = 0, silent: str | None = None) -> LaunchError:
    """A LaunchError leading with the server's own error line (else ``silent``, else its last), quoting its log."""
    try:
        with open(paths.log, "rb") as log:
            log.seek(max(offset, os.path.getsize(paths.log) - 64 * 1024))
            lines = log.read().decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    own = [line for line in lines if line.startswith(_PROG + ":")]
    last = next((line for line in reversed(lines) if line.strip()), "it wrote nothing")
    cause = own[-1] if own else silent or last
    quoted = [line for line in lines if line != cause][-LOG_LINES:]  # (the cause is said once: in the first line)
    tail = "".join("\n    " + line for line in quoted)
    return LaunchError(
        f"{headline}: {cause}\n  log: {paths.log}; its last lines besides that one:{tail}",
        log_path=paths.log,
        server_error=own[-1] if own else None,
    )


def ready_or_gone(paths: ServicePaths, record: Record, wait: float) -> bool:
    """True once the server answers /readyz, False once it has exited; LaunchError if neither within ``wait``
    seconds (a stopping server takes a moment). Gone means exited, not begun to exit: its replacement is not started
    beside a server still giving its memory back (:meth:`Record.server_since`)."""
    deadline = time.monotonic() + wait
    since = record.server_since(paths.socket)
    while since is not None and running_since(record.pid) == since:
        if ready_fingerprint(paths.socket) is not None:
            return True
        if time.monotonic() > deadline:
            raise LaunchError(
                f"the launched tokenizer service (pid {record.pid}) neither answers nor exits after {wait:g}s; "
                "end it, and launch again"
            )
        time.sleep(0.05)
    return False


def attach_or_start(
    command: ServeCommand, start_timeout: float
) -> tuple[LaunchedService, list[int], dict[int, subprocess.Popen[bytes]]]:
    """The service ``command`` runs, its replicas attached to or started (those missing); with this process's
    shared owners locks (one descriptor per replica) and the servers it started (replica -> process)."""
    started = time.monotonic()
    key = command.key()
    folder = launch_directory()
    paths = tuple(ServicePaths.of(folder, key, replica) for replica in range(command.replicas))
    owners_fds: list[int] = []
    try:
        for replica_paths in paths:
            owners_fds.append(
                hold_shared(replica_paths.owners, STOP_WAIT_SECONDS, "waiting for the previous service to stop")
            )
        with exclusive_lock(
            paths[0].lock, start_timeout + STOP_WAIT_SECONDS, "waiting for another process launching the same service"
        ):
            records = {replica: Record.read(p.record) for replica, p in enumerate(paths)}
            missing = {
                replica: p
                for replica, p in enumerate(paths)
                if (record := records[replica]) is None or not ready_or_gone(p, record, STOP_WAIT_SECONDS)
            }
            processes: dict[int, subprocess.Popen[bytes]] = {}
            if missing:
                check_server_installed(command.python)
                # said before the seconds of start-up, which it names the log of (its one line: attaching is quick)
                which = "" if command.replicas == 1 else f"{len(missing)} of {command.replicas} replicas of "
                logger.info(
                    "launching %sthe tokenizer service for %s (ready in seconds; its log: %s)",
                    which,
                    command.description,
                    missing[min(missing)].log,
                )
                for replica, (process, record) in start(command, missing, 1, start_timeout).items():
                    processes[replica], records[replica] = process, record
            running = [record for record in records.values() if record is not None]  # (all of them, now)
            if len({record.fingerprint for record in running}) > 1:
                stop_servers(list(processes.values()), wait=STOP_WAIT_SECONDS)
                listing = "; ".join(f"{command.name(i)}: {record.fingerprint}" for i, record in enumerate(running))
                raise LaunchError(
                    f"the replicas serve different tokenizers ({listing}): were the tokenizer's files changed while "
                    "they started? launch again",
                    log_path=paths[0].log,
                )
    except BaseException:
        close_locks(owners_fds)
        raise
    service = LaunchedService(
        urls=tuple(unix_socket_url(p.socket) for p in paths),
        fingerprint=running[0].fingerprint,
        first_pids=tuple(record.pid for record in running),
        launched=bool(processes),
        startup_seconds=time.monotonic() - started,
        key=key,
        command=command,
        paths=paths,
        start_timeout=start_timeout,
    )
    where = service.url if command.replicas == 1 else f"{command.replicas} replicas in {folder}"
    if processes:
        logger.debug(
            "launched the tokenizer service for %s at %s in %.2fs", command.description, where, service.startup_seconds
        )
    else:
        logger.info(
            "attached to the tokenizer service for %s at %s (its log: %s)", command.description, where, paths[0].log
        )
    return service, owners_fds, processes
