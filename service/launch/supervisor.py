"""``TokenizerClient.launch``: a private tokenizer service on this machine for as long as a job uses it (users'
view: ``docs/guides/dataloader.md``, "A launched service"). Per replica, under the launch key's one lock
(:mod:`.rendezvous`), the first process launches and every other attaches; servers are started by exec (nothing
of this process's Python or tokenizer state runs in them) in sessions of their own (a Ctrl-C reaches the training
script, which lets go), with exactly ``launch``'s settings (this environment's ``TOKENIZER_SERVICE_*`` are not
passed on). Each process using the service holds its owners locks (``service/http/server/owners.py``); the last to
let go stops the servers the records name and waits. A dead replica is relaunched once
(:meth:`LaunchedService.recover`) by whichever process notices first. A forked child closes the inherited lock
descriptors and owns nothing, so its exit (``atexit`` included) stops nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..addresses import unix_socket_url
from ..children import child_environment
from ..embedded import DEFAULT_TOKENIZER, DEFAULT_TOKENIZER_DIR
from ..extras import unmet_line
from ..serve_flags import serve_arguments
from ..sizing import AUTO, check_replicas, plan_replicas
from ..transport.base import Request, Timeout
from ..transport.exceptions import LaunchError, TransportError
from ..transport.stdlib import HTTPTransport
from ..wire import API_KEY_ENV, ENV_PREFIX, INFO_PATH, READY_PATH
from .rendezvous import (
    Record,
    ServicePaths,
    exclusive_lock,
    hold_shared,
    launch_directory,
    launch_key,
    nobody_holds,
    process_alive,
    try_lock,
)

__all__ = [
    "ServeCommand",
    "LaunchedService",
    "Share",
    "launch_or_attach",
    "release",
    "ready_fingerprint",
    "stop_servers",
    "how_it_ended",
]

logger = logging.getLogger(__name__)

#: Serve settings ``launch`` sets itself.
RESERVED_OPTIONS = frozenset({"host", "port", "uds", "owners_file", "drain_listen_seconds", "reuse_port", "replica_of"})
#: A replica is launched at most this many times per record (relaunched once).
MAX_LAUNCHES = 2
#: How long a service that is stopping (draining) may take before a process waiting on it gives up.
STOP_WAIT_SECONDS = 45.0
#: How many lines of the server's log an error quotes.
LOG_LINES = 12

_PROG = "tokenizer-service serve"


# -- what to run -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServeCommand:
    """How to start the service. Secrets go by environment (a command line is readable by other users);
    ``replicas_asked`` is as given, so ``"auto"`` is one key whatever each rank's count of cores."""

    python: str
    model: str | None
    flags: tuple[str, ...]
    secrets: tuple[tuple[str, str], ...]
    model_identity: Any
    description: str
    replicas: int = 1
    replicas_asked: int | str = 1
    threads: int | None = None  # each replica's Rust threads as the plan chose them (None: as the flags say)

    @classmethod
    def build(
        cls,
        model: str | os.PathLike[str] | None,
        serve_options: Mapping[str, Any],
        api_key: str | None,
        python: str,
        replicas: object = 1,
    ) -> ServeCommand:
        if isinstance(model, os.PathLike):
            model = os.fspath(model)  # a pathlib.Path to the tokenizer's folder, as often as not
        if model == DEFAULT_TOKENIZER:
            model = None  # the same service as launch() without a model, found under the same key
        if model is not None and not isinstance(model, str):
            raise TypeError(
                f"model must be a str or a path (a tokenizer file or folder, or a hub id) or None, "
                f"not {type(model).__name__}"
            )
        if "url" in serve_options or "urls" in serve_options:
            raise ValueError(
                "launch() starts a service of its own and knows its URL; to use a service that is running "
                "already, connect to it: TokenizerClient(url)"
            )
        reserved = sorted(RESERVED_OPTIONS & set(serve_options))
        if reserved:
            raise ValueError(
                f"launch() chooses where its service listens, who owns it and how it stops, so {reserved} cannot "
                "be set; for a service on a TCP port, run `tokenizer-service serve` and connect with its URL"
            )
        interpreter = shutil.which(python)
        if interpreter is None:
            raise LaunchError(
                f"python={python!r} is not an interpreter that can be run (neither an executable file nor a "
                "command on PATH): pass the path of the python that has tokenizer-service[server]"
            )
        asked = check_replicas(replicas)
        threads = serve_options.get("threads")
        if asked == AUTO:
            from ..calibration.auto import auto_plan

            calibrated = serve_options.get("calibrate", True) is not False
            revision = serve_options.get("revision")
            plan = auto_plan(model, revision, threads=threads, use_calibration=calibrated, python=interpreter)
            logger.info("TokenizerClient.launch(replicas='auto'): %s", plan.summary)
        else:
            plan = plan_replicas(asked, threads)
        if plan.warning:
            warnings.warn(f"TokenizerClient.launch: {plan.warning}", RuntimeWarning, stacklevel=5)  # the caller's line
        flags = tuple(serve_arguments(serve_options))
        secrets = ((API_KEY_ENV, api_key),) if api_key else ()
        identity, description = _model_identity(model)
        each = plan.threads if threads is None else None  # the plan's threads, where --threads is not a flag already
        return cls(interpreter, model, flags, secrets, identity, description, plan.count, asked, each)

    def key(self) -> str:
        arguments = [*self.flags, f"version={__version__}"]
        if self.replicas_asked != 1:
            arguments.append(f"replicas={self.replicas_asked}")
        return launch_key(self.model_identity, arguments, dict(self.secrets), self.python)

    def argv(self, paths: ServicePaths) -> list[str]:
        model = ["--model", self.model] if self.model is not None else []
        ours = ["--uds", paths.socket, "--owners-file", paths.owners, "--drain-listen-seconds", "0"]
        if self.replicas > 1:
            ours += ["--replica-of", str(self.replicas)]  # its share of the cores and of the memory limit
        if self.threads is not None:
            ours += ["--threads", str(self.threads)]
        return [self.python, "-m", "service", "serve", *ours, *model, *self.flags]

    def environment(self) -> dict[str, str]:
        env = child_environment({name: value for name, value in os.environ.items() if not name.startswith(ENV_PREFIX)})
        env.update(self.secrets)
        return env

    def name(self, replica: int) -> str:
        which = f"replica {replica + 1} of {self.replicas} of " if self.replicas > 1 else ""
        return f"{which}the tokenizer service for {self.description}"


def _model_identity(model: str | None) -> tuple[Any, str]:
    """(what identifies the tokenizer's files, a description): local files by real path, names, sizes and times
    (retraining in place changes them); a hub id by its name (``revision`` is among the flags)."""
    if model is None:
        return _files_identity(DEFAULT_TOKENIZER_DIR), "the embedded default tokenizer"
    path = Path(model).expanduser()
    if path.exists():
        return _files_identity(path), model
    return {"hub": model}, model


def _files_identity(path: Path) -> dict[str, Any]:
    # every file under a folder: named chat templates live in additional_chat_templates/
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    names = [path.name] if path.is_file() else [p.relative_to(path).as_posix() for p in files]
    stats = [(name, p.stat().st_size, p.stat().st_mtime_ns) for name, p in zip(names, files, strict=True)]
    return {"path": os.path.realpath(path), "files": stats}


def _check_server_installed(python: str) -> None:
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return  # another interpreter: its own `serve` says what it lacks
    problem = unmet_line("server")  # what `serve` itself checks at start-up (service/extras.py)
    if problem is not None:
        raise LaunchError(
            f"TokenizerClient.launch runs the server with this interpreter ({sys.executable}): {problem} -- or "
            "pass python= an interpreter that has it, or run `tokenizer-service serve` elsewhere and connect with "
            "its URL"
        )


# -- starting and stopping the servers --------------------------------------------------------------------
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


def _start(
    command: ServeCommand, replicas: Mapping[int, ServicePaths], launches: int, timeout: float
) -> dict[int, tuple[subprocess.Popen[bytes], Record]]:
    """Start ``replicas`` (index -> files), wait until all are ready, write their records; LaunchError (all stopped)."""
    starting = [_spawn(command, replica, paths, launches) for replica, paths in replicas.items()]
    try:
        fingerprints = _wait_until_ready(command, starting, timeout)
    except BaseException:
        stop_servers([s.process for s in starting])
        raise
    started = {}
    for item in starting:
        record = Record(item.process.pid, fingerprints[item.replica], launches, command.description)
        record.write(item.paths.record)
        started[item.replica] = (item.process, record)
    return started


def ready_fingerprint(socket_path: str) -> str | None:
    """The fingerprint of the server on the Unix socket ``socket_path`` once it answers /readyz, else None."""
    url = unix_socket_url(socket_path)
    transport = HTTPTransport()
    try:
        if transport.handle_request(Request("GET", url + READY_PATH, {}, timeout=Timeout(1.0, 5.0))).status != 200:
            return None
        info = transport.handle_request(Request("GET", url + INFO_PATH, {}, timeout=Timeout(1.0, 30.0)))
        fingerprint: str = json.loads(bytes(info.body))["fingerprint"]
        return fingerprint
    except TransportError:
        return None
    finally:
        transport.close()


def how_it_ended(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


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
            raise _failure(f"{command.name(item.replica)} {what}", item.paths, item.offset)
        time.sleep(pause)
        pause = min(pause * 1.5, 0.1)
    return fingerprints


def _failure(headline: str, paths: ServicePaths, offset: int = 0, silent: str | None = None) -> LaunchError:
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


def stop_servers(
    ours: Sequence[subprocess.Popen[bytes]], others: Sequence[tuple[int, str]] = (), wait: float = STOP_WAIT_SECONDS
) -> None:
    """SIGTERM (they drain) ``ours`` (reaped here) and ``others`` ((pid, socket), another process's) at once, wait
    up to ``wait`` seconds for each to exit, SIGKILL one that overstays."""
    running = [process for process in ours if process.poll() is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    for pid, _ in others:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    for pid, socket_path in others:
        while process_alive(pid, socket_path):  # (its command line names the socket: not a reused pid)
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.02)


def _ready_or_gone(paths: ServicePaths, record: Record, wait: float) -> bool:
    """True once the server answers /readyz, False once it has exited; LaunchError if neither within ``wait``
    seconds (a stopping server takes a moment)."""
    deadline = time.monotonic() + wait
    while process_alive(record.pid, paths.socket):
        if ready_fingerprint(paths.socket) is not None:
            return True
        if time.monotonic() > deadline:
            raise LaunchError(
                f"the launched tokenizer service (pid {record.pid}) neither answers nor exits after {wait:g}s; "
                "end it, and launch again"
            )
        time.sleep(0.05)
    return False


# -- the service a client is bound to ---------------------------------------------------------------------
@dataclass
class LaunchedService:
    """Where a launched service's replicas and their logs are; picklable (a DataLoader worker gets a copy), holding
    no lock or process. :attr:`pids` are the servers running now, relaunched or not; ``url``, ``socket_path``,
    ``log_path`` and :attr:`pid` are the first replica's (the only one's, without replicas)."""

    urls: tuple[str, ...]  # one per replica, as the client spreads its calls over them
    fingerprint: str
    first_pids: tuple[int, ...]  # the servers' when this process launched or attached to them
    launched: bool  # whether this process started them (else it attached to running ones)
    startup_seconds: float  # from the call to launch() to a ready service
    key: str
    command: ServeCommand = field(repr=False)
    paths: tuple[ServicePaths, ...] = field(repr=False)
    start_timeout: float = field(repr=False)

    @property
    def replicas(self) -> int:
        return len(self.paths)

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def socket_path(self) -> str:
        return self.paths[0].socket

    @property
    def log_path(self) -> str:
        return self.paths[0].log  # every launch of the replica writes here, relaunches appended

    @property
    def log_paths(self) -> tuple[str, ...]:
        return tuple(paths.log for paths in self.paths)

    @property
    def pids(self) -> tuple[int, ...]:
        """The servers' pids now: after a relaunch, by whichever process, the relaunched one's (as recorded)."""
        return tuple(self._pid(replica) for replica in range(self.replicas))

    @property
    def pid(self) -> int:
        return self._pid(0)

    def _pid(self, replica: int) -> int:
        record = Record.read(self.paths[replica].record)
        return record.pid if record is not None else self.first_pids[replica]

    def describe(self, owner: str) -> str:
        if self.replicas == 1:
            return f"{owner}({self.socket_path!r}, pid={self.pid}, log={self.log_path!r})"
        folder = os.path.dirname(self.socket_path)
        return f"{owner}({self.replicas} replicas in {folder!r}, pids={list(self.pids)}, logs={list(self.log_paths)})"

    def replica_at(self, url: str) -> int:
        return next((i for i, base in enumerate(self.urls) if url.startswith(base + "/") or url == base), 0)

    def others_running(self, replica: int) -> bool:
        """Whether a replica but ``replica`` runs (to take the calls meanwhile)."""
        for other, paths in enumerate(self.paths):
            if other != replica and (record := Record.read(paths.record)) is not None:
                if process_alive(record.pid, paths.socket):
                    return True
        return False

    def recover(self, replica: int = 0) -> None:
        """For a replica that cannot be reached: return once it is ready (unreachable for a moment, or relaunched
        now: once, by whichever process notices first), or raise LaunchError (it died again, or nobody owns it)."""
        paths = self.paths[replica]
        name = self.command.name(replica)
        with exclusive_lock(paths.lock, self.start_timeout + STOP_WAIT_SECONDS, "waiting for the launch lock"):
            record = Record.read(paths.record)
            if record is not None and _ready_or_gone(paths, record, STOP_WAIT_SECONDS):
                return
            if nobody_holds(paths.owners):
                raise LaunchError(
                    f"the launched tokenizer service for {self.command.description} has stopped: every process "
                    "that launched or attached to it has let it go (shutdown(), the end of its with-block, or exit)",
                    log_path=paths.log,
                )
            launches = record.launches if record is not None else 1
            if launches >= MAX_LAUNCHES:
                raise _failure(
                    f"the launched {name} died again after its one relaunch",
                    paths,
                    silent="it wrote no error (killed by a signal? the out-of-memory killer, say)",
                )
            logger.warning(
                "the launched %s (pid %s) died; relaunching it (log: %s)", name, self._pid(replica), paths.log
            )
            [(process, record)] = _start(self.command, {replica: paths}, launches + 1, self.start_timeout).values()
            if record.fingerprint != self.fingerprint:
                stop_servers([process])
                raise LaunchError(
                    f"the relaunched {name} serves another tokenizer ({record.fingerprint}, not "
                    f"{self.fingerprint}): were its files changed?",
                    log_path=paths.log,
                )
            _adopt(self.key, replica, process)

    def recover_in_background(self, replica: int) -> None:
        """:meth:`recover` in a thread (one per replica in this process) while the others take its calls; a failed
        relaunch is logged, not tried again here."""
        with _background_lock:
            if (self.key, replica) in _background:
                return
            _background.add((self.key, replica))
        thread = threading.Thread(
            target=self._recover_quietly, args=(replica,), name=f"relaunch-replica-{replica}", daemon=True
        )
        thread.start()

    def _recover_quietly(self, replica: int) -> None:
        try:
            self.recover(replica)
        except LaunchError as exc:
            logger.warning("%s; its calls go to the other replicas", exc)
            return  # stays in _background: given up on in this process
        except Exception:
            logger.exception("relaunching the %s failed", self.command.name(replica))
        with _background_lock:
            _background.discard((self.key, replica))


_background: set[tuple[str, int]] = set()  # (key, replica) being relaunched by a thread of this process, or given up
_background_lock = threading.Lock()


# -- what this process owns -------------------------------------------------------------------------------
@dataclass
class _Ownership:
    """This process's hold on one service: its shared owners locks (one per replica) and the servers it started."""

    service: LaunchedService
    owners_fds: list[int]
    processes: dict[int, subprocess.Popen[bytes]]  # replica -> the server this process started for it
    shares: int = 1  # clients of this process that have not let go
    pid: int = field(default_factory=os.getpid)
    transports: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)  # sync ones: closed at the end


@dataclass
class Share:
    """One client's part of an ownership (never pickled: copies in other processes own nothing)."""

    ownership: _Ownership
    released: bool = False


_owned: dict[str, _Ownership] = {}
_owned_lock = threading.Lock()
_children: list[subprocess.Popen[bytes]] = []  # servers this process started for others, kept from the GC


def _acquire(command: ServeCommand, start_timeout: float) -> _Ownership:
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
                if (record := records[replica]) is None or not _ready_or_gone(p, record, STOP_WAIT_SECONDS)
            }
            processes: dict[int, subprocess.Popen[bytes]] = {}
            if missing:
                _check_server_installed(command.python)
                # said before the seconds of start-up, which it names the log of (its one line: attaching is quick)
                which = "" if command.replicas == 1 else f"{len(missing)} of {command.replicas} replicas of "
                logger.info(
                    "launching %sthe tokenizer service for %s (ready in seconds; its log: %s)",
                    which,
                    command.description,
                    missing[min(missing)].log,
                )
                for replica, (process, record) in _start(command, missing, 1, start_timeout).items():
                    processes[replica], records[replica] = process, record
            running = [record for record in records.values() if record is not None]  # (all of them, now)
            if len({record.fingerprint for record in running}) > 1:
                stop_servers(list(processes.values()))
                listing = "; ".join(f"{command.name(i)}: {record.fingerprint}" for i, record in enumerate(running))
                raise LaunchError(
                    f"the replicas serve different tokenizers ({listing}): were the tokenizer's files changed while "
                    "they started? launch again",
                    log_path=paths[0].log,
                )
    except BaseException:
        _close(owners_fds)
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
    return _Ownership(service, owners_fds, processes)


def launch_or_attach(command: ServeCommand, start_timeout: float) -> Share:
    with _owned_lock:
        key = command.key()
        ownership = _owned.get(key)
        if ownership is not None:
            ownership.shares += 1
            return Share(ownership)
        if _owned:
            other = next(iter(_owned.values())).service
            asked = (
                "the same tokenizer with other settings"
                if command.description == other.command.description
                else f"another tokenizer ({command.description})"
            )
            raise LaunchError(
                f"this process already launched a tokenizer service, for {other.command.description} "
                f"({other.fingerprint}), and this launch asks for {asked}: one launched service per process -- "
                "shut the first down (client.shutdown() or the end of its with-block), or run "
                "`tokenizer-service serve` for the second and connect with its URL",
                log_path=other.log_path,
            )
        ownership = _acquire(command, start_timeout)
        _owned[key] = ownership
        return Share(ownership)


def release(share: Share) -> None:
    ownership = share.ownership
    with _owned_lock:
        if share.released or ownership.pid != os.getpid():
            return
        share.released = True
        ownership.shares -= 1
        if ownership.shares > 0:
            return
        _owned.pop(ownership.service.key, None)
        _let_go(ownership)


def _let_go(ownership: _Ownership) -> None:
    """Let go of the owners locks; the last process to let go stops every replica running now and waits for their
    exit (they would stop within 0.25 s by themselves), under the launch lock, so no one relaunches one meanwhile."""
    if ownership.pid != os.getpid():
        return
    for transport in list(ownership.transports):
        transport.close()  # its idle connections (the server would close them at once anyway)
    paths = ownership.service.paths
    try:
        with exclusive_lock(paths[0].lock, STOP_WAIT_SECONDS, "waiting for the launch lock"):
            # ours shared -> exclusive only if alone (every owner holds every replica's lock)
            if try_lock(ownership.owners_fds[0], exclusive=True):
                _stop_running(paths, ownership.processes)
            _close(ownership.owners_fds)
    except LaunchError:
        _close(ownership.owners_fds)  # each server's own watch stops it once nobody holds its lock


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _stop_running(paths: Sequence[ServicePaths], ours: Mapping[int, subprocess.Popen[bytes]]) -> None:
    """Stop the server each record names, ours or another process's (a worker's relaunch, a rank's launch); wait."""
    others = []
    for replica, replica_paths in enumerate(paths):
        record = Record.read(replica_paths.record)
        process = ours.get(replica)
        if record is None or (process is not None and record.pid == process.pid):
            continue
        if process_alive(record.pid, replica_paths.socket):  # (its command line names the socket: not a reused pid)
            others.append((record.pid, replica_paths.socket))
    stop_servers(list(ours.values()), others)  # (ours are reaped at once if they died already)


def _adopt(key: str, replica: int, process: subprocess.Popen[bytes]) -> None:
    """A server this process relaunched: stopped with this process's ownership, or left to the others."""
    with _owned_lock:
        ownership = _owned.get(key)
        if ownership is not None and ownership.pid == os.getpid():
            dead = ownership.processes.get(replica)
            if dead is not None:
                dead.poll()  # reaped: it died, or this relaunch would not be
            ownership.processes[replica] = process
        else:
            _children.append(process)


def _let_go_of_everything() -> None:
    """At exit: let go of what this process owns (never a forked child's inherited copy)."""
    with _owned_lock:
        owned = [o for o in _owned.values() if o.pid == os.getpid()]
        _owned.clear()
    for ownership in owned:
        _let_go(ownership)


def _forget_after_fork() -> None:
    """In a forked child: close the inherited lock descriptors (the parent's locks stay: same open files) and own
    nothing, so the child's exit stops nothing."""
    global _owned_lock, _background_lock
    _owned_lock = threading.Lock()  # another thread may have held it at the fork
    _background_lock = threading.Lock()
    for inherited in _owned.values():
        _close(inherited.owners_fds)
    _owned.clear()
    _children.clear()
    _background.clear()  # the parent's relaunching threads are not here


atexit.register(_let_go_of_everything)
if hasattr(os, "register_at_fork"):  # (not on Windows, where launch() refuses: see rendezvous.require_posix)
    os.register_at_fork(after_in_child=_forget_after_fork)
