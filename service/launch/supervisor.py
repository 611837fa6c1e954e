"""``TokenizerClient.launch``: a private tokenizer service on this machine, for as long as a job uses it.

    client = TokenizerClient.launch("path/to/tokenizer", threads=8)   # no model: the embedded default
    loader = DataLoader(rows, batch_size=32, num_workers=4, collate_fn=client.collator(padding=True))

How:

1. **One service per tokenizer and settings on this machine.** The launch key (the tokenizer files' identity,
   the serve settings, the interpreter, the host) names the files of a rendezvous in a private directory
   (:mod:`.rendezvous`). Under its lock the first process launches and every other one -- the other local
   ranks of a torchrun, accelerate or DeepSpeed job, or a second job with the same tokenizer -- attaches to
   the running service. Nothing reads ``LOCAL_RANK``: the script is the same for one process and eight.
2. **Started by exec.** The service is ``python -m service serve --uds <socket> --owners-file <lock>`` run by
   ``subprocess`` (fork-exec: no Python code, and no tokenizer state, of this process runs in the child),
   in a session of its own (a Ctrl-C in the terminal reaches the training script, which lets go of it), its
   output in a log file. This process never imports the server's modules; the server's settings are
   exactly ``launch``'s arguments (``TOKENIZER_SERVICE_*`` variables of this environment, which may describe
   a remote service, are not passed on).
3. **Ready, then pinned.** ``launch`` returns once ``/readyz`` answers, with a client pinned to the
   fingerprint the service reports; a service that cannot start raises :class:`LaunchError` with the
   server's own one-line error and the end of its log.
4. **Owned.** Every process that launched or attached holds a shared lock on the owners file while it uses
   the service; the server stops once nobody holds it (``service/http/server/owners.py``) -- when the last local
   rank exits, however it exits: a SIGKILLed job leaves no server. ``shutdown()``, the end of a ``with``
   block, or interpreter exit lets go; the last process to let go -- launcher or not -- stops the server
   running then (relaunched or not: the record names it) and waits for its exit.
5. **Relaunched once.** A client that cannot connect asks :meth:`LaunchedService.recover`: a service that
   died while still owned is relaunched (once per service, whoever notices first: the record counts), and
   the call goes on; a second death raises :class:`LaunchError` with its log. ``LaunchedService.pid`` reads
   the record, so every process names the live server, whoever relaunched it.

Forks and pickles: a client pickles its URL and service description, never a connection or a lock. A
DataLoader worker -- forked or spawned -- uses the service and never owns it: in a forked child this
process's lock descriptors are closed (the parent's locks stay held) and its ownership is forgotten, so the
child's exit stops nothing, ``atexit`` included.

POSIX only (Unix sockets and ``flock``), yet importable anywhere: nothing POSIX-only is imported with this
module, and on Windows ``launch`` raises :class:`LaunchError` saying to run ``tokenizer-service serve`` and
pass its URL (:func:`.rendezvous.require_posix`); the client itself works there over TCP.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import site
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..client.exceptions import LaunchError, TransportError
from ..client.transports.base import Request, Response, Timeout
from ..client.transports.stdlib import HTTPTransport
from ..embedded import DEFAULT_TOKENIZER, DEFAULT_TOKENIZER_DIR
from ..extras import unmet_line
from ..wire import API_KEY_ENV, ENV_PREFIX, INFO_PATH, READY_PATH, unix_socket_url
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

__all__ = ["ServeCommand", "LaunchedService", "Share", "take_share", "release"]

logger = logging.getLogger(__name__)

#: Serve settings ``launch`` sets itself: where the service listens, who owns it, and that it stops at once.
RESERVED_OPTIONS = frozenset({"host", "port", "uds", "owners_file", "drain_listen_seconds"})
#: A service is launched at most this many times per record: once, and relaunched once.
MAX_LAUNCHES = 2
#: How long a service that is stopping (draining) may take before a process waiting on it gives up.
STOP_WAIT_SECONDS = 45.0
#: How many lines of the server's log an error quotes.
LOG_LINES = 12

_PROG = "tokenizer-service serve"
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


# -- what to run -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServeCommand:
    """How to start the service: interpreter, model, serve flags, secrets (passed by environment, never on
    the command line, which other users can read), and what identifies the tokenizer files."""

    python: str
    model: str | None
    flags: tuple[str, ...]
    secrets: tuple[tuple[str, str], ...]
    model_identity: Any
    description: str

    @classmethod
    def build(
        cls,
        model: str | os.PathLike[str] | None,
        serve_options: Mapping[str, Any],
        api_key: str | None,
        python: str,
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
        flags: list[str] = []
        for name, value in sorted(serve_options.items()):
            if value is None:
                continue
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                flags.append(flag if value else "--no-" + flag[2:])
            else:
                flags += [flag, str(value)]
        secrets = ((API_KEY_ENV, api_key),) if api_key else ()
        identity, description = _model_identity(model)
        return cls(interpreter, model, tuple(flags), secrets, identity, description)

    def key(self) -> str:
        arguments = [*self.flags, f"version={__version__}"]
        return launch_key(self.model_identity, arguments, dict(self.secrets), self.python)

    def argv(self, paths: ServicePaths) -> list[str]:
        model = ["--model", self.model] if self.model is not None else []
        ours = ["--uds", paths.socket, "--owners-file", paths.owners, "--drain-listen-seconds", "0"]
        return [self.python, "-m", "service", "serve", *ours, *model, *self.flags]

    def environment(self) -> dict[str, str]:
        env = {name: value for name, value in os.environ.items() if not name.startswith(ENV_PREFIX)}
        env.update(self.secrets)
        root = str(_PACKAGE_ROOT)
        if root not in [*site.getsitepackages(), site.getusersitepackages()]:
            # running from a checkout: the child imports this very package
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        return env


def _model_identity(model: str | None) -> tuple[Any, str]:
    """(what identifies the tokenizer's files, a description): a local file or folder by its real path and
    the name, size and modification time of its files (retraining a tokenizer in place changes them); a hub
    id by its name (with ``revision`` among the flags)."""
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


# -- starting and stopping the server ---------------------------------------------------------------------
def _keep_previous_log(log: str) -> None:
    """Keep the log of the previous service of this tokenizer and settings as ``<log>.1`` (one generation): a
    crashed run's log survives the next launch, and logs never pile up."""
    try:
        os.replace(log, log + ".1")
    except FileNotFoundError:
        pass


def _start(
    command: ServeCommand, paths: ServicePaths, launches: int, timeout: float
) -> tuple[subprocess.Popen[bytes], Record]:
    """Start the server and wait until it is ready; its record, written. LaunchError if it cannot start."""
    if launches == 1:
        _keep_previous_log(paths.log)
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
    try:
        fingerprint = _wait_until_ready(process, command, paths, timeout, offset)
    except BaseException:
        _stop(process)
        raise
    record = Record(process.pid, fingerprint, launches, command.description)
    record.write(paths.record)
    return process, record


def _get(url: str, path: str, timeout: Timeout) -> Response:
    transport = HTTPTransport()
    try:
        return transport.handle_request(Request("GET", url + path, {}, timeout=timeout))
    finally:
        transport.close()


def _ready(url: str) -> bool:
    try:
        return _get(url, READY_PATH, Timeout(1.0, 5.0)).status == 200
    except TransportError:
        return False


def _wait_until_ready(
    process: subprocess.Popen[bytes], command: ServeCommand, paths: ServicePaths, timeout: float, offset: int
) -> str:
    url = unix_socket_url(paths.socket)
    deadline = time.monotonic() + timeout
    pause = 0.01
    while not _ready(url):
        code = process.poll()
        if code is not None:
            how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
            raise _failure(f"the tokenizer service for {command.description} {how} before it was ready", paths, offset)
        if time.monotonic() > deadline:
            raise _failure(
                f"the tokenizer service for {command.description} was not ready within {timeout:g}s (start_timeout=)",
                paths,
                offset,
            )
        time.sleep(pause)
        pause = min(pause * 1.5, 0.1)
    info = json.loads(bytes(_get(url, INFO_PATH, Timeout(5.0, 30.0)).body))
    fingerprint: str = info["fingerprint"]
    return fingerprint


def _failure(headline: str, paths: ServicePaths, offset: int = 0, silent: str | None = None) -> LaunchError:
    """A LaunchError leading with the server's own one-line error (else ``silent``, else its last line),
    quoting the end of its log."""
    try:
        with open(paths.log, "rb") as log:
            log.seek(max(offset, os.path.getsize(paths.log) - 64 * 1024))
            lines = log.read().decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    own = [line for line in lines if line.startswith(_PROG + ":")]
    last = next((line for line in reversed(lines) if line.strip()), "it wrote nothing")
    cause = own[-1] if own else silent or last
    tail = "\n".join("    " + line for line in lines[-LOG_LINES:])
    return LaunchError(f"{headline}: {cause}\n  log: {paths.log}; its last lines:\n{tail}", log_path=paths.log)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM our child server (it drains), SIGKILL if it overstays; reaped either way."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def _ready_or_gone(url: str, record: Record, socket_path: str, wait: float) -> bool:
    """True once the running server answers /readyz, False once it has exited; LaunchError if neither
    happens within ``wait`` seconds (a server that is stopping takes a moment)."""
    deadline = time.monotonic() + wait
    while process_alive(record.pid, socket_path):
        if _ready(url):
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
    """Where a launched service is and where its log goes; picklable (a DataLoader worker gets a copy). It
    holds no lock and no process: what this process owns is kept apart, per process. :attr:`pid` is the
    server's running now, relaunched or not."""

    url: str
    socket_path: str
    log_path: str  # every launch of the service writes here, relaunches appended
    fingerprint: str
    first_pid: int  # the server's when this process launched or attached to it
    launched: bool  # whether this process started it (else it attached to a running one)
    startup_seconds: float  # from the call to launch() to a ready service
    key: str
    command: ServeCommand = field(repr=False)
    paths: ServicePaths = field(repr=False)
    start_timeout: float = field(repr=False)

    @property
    def pid(self) -> int:
        """The pid of the service's server now: after a relaunch -- by this process, or by another one (a
        DataLoader worker, another local rank) -- the relaunched server's, as the record says."""
        record = Record.read(self.paths.record)
        return record.pid if record is not None else self.first_pid

    def describe(self, owner: str) -> str:
        return f"{owner}({self.socket_path!r}, pid={self.pid}, log={self.log_path!r})"

    def recover(self) -> None:
        """Called when the service cannot be reached: returns once a ready service is there -- it was only
        unreachable for a moment, or it died and is relaunched now (once per service, by whichever process
        notices first) -- or raises LaunchError: it died again, or it stopped because nobody owns it."""
        paths = self.paths
        with exclusive_lock(paths.lock, self.start_timeout + STOP_WAIT_SECONDS, "waiting for the launch lock"):
            record = Record.read(paths.record)
            if record is not None and _ready_or_gone(self.url, record, paths.socket, STOP_WAIT_SECONDS):
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
                    f"the launched tokenizer service for {self.command.description} died again after its one relaunch",
                    paths,
                    silent="it wrote no error (killed by a signal? the out-of-memory killer, say)",
                )
            dead = record.pid if record is not None else self.first_pid
            logger.warning("the launched tokenizer service (pid %s) died; relaunching it (log: %s)", dead, paths.log)
            process, record = _start(self.command, paths, launches + 1, self.start_timeout)
            if record.fingerprint != self.fingerprint:
                _stop(process)
                raise LaunchError(
                    f"the relaunched tokenizer service serves another tokenizer ({record.fingerprint}, not "
                    f"{self.fingerprint}): were its files changed?",
                    log_path=paths.log,
                )
            _adopt(self.key, process)


# -- what this process owns -------------------------------------------------------------------------------
@dataclass
class _Ownership:
    """This process's hold on one launched service: its shared owners lock, and the server if it started it."""

    service: LaunchedService
    owners_fd: int
    process: subprocess.Popen[bytes] | None
    shares: int = 1  # clients of this process that have not let go
    pid: int = field(default_factory=os.getpid)
    clients: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)  # sync clients: closed at the end


@dataclass
class Share:
    """One client's part of an ownership (never pickled: copies in other processes own nothing)."""

    ownership: _Ownership
    released: bool = False


_owned: dict[str, _Ownership] = {}
_owned_lock = threading.Lock()
_children: list[subprocess.Popen[bytes]] = []  # servers this process started for others, kept from the GC


def _acquire(command: ServeCommand, start_timeout: float) -> _Ownership:
    """Attach to the running service of ``command``'s key, or launch it (see the module doc)."""
    started = time.monotonic()
    key = command.key()
    paths = ServicePaths.of(launch_directory(), key)
    url = unix_socket_url(paths.socket)
    owners_fd = hold_shared(paths.owners, STOP_WAIT_SECONDS, "waiting for the previous service to stop")
    try:
        with exclusive_lock(
            paths.lock, start_timeout + STOP_WAIT_SECONDS, "waiting for another process launching the same service"
        ):
            record = Record.read(paths.record)
            process = None
            if record is None or not _ready_or_gone(url, record, paths.socket, STOP_WAIT_SECONDS):
                _check_server_installed(command.python)
                process, record = _start(command, paths, 1, start_timeout)
    except BaseException:
        os.close(owners_fd)
        raise
    service = LaunchedService(
        url=url,
        socket_path=paths.socket,
        log_path=paths.log,
        fingerprint=record.fingerprint,
        first_pid=record.pid,
        launched=process is not None,
        startup_seconds=time.monotonic() - started,
        key=key,
        command=command,
        paths=paths,
        start_timeout=start_timeout,
    )
    how = "launched" if process is not None else "attached to"
    logger.info(
        "%s the tokenizer service for %s at %s in %.2fs (log: %s)",
        how,
        command.description,
        url,
        service.startup_seconds,
        paths.log,
    )
    return _Ownership(service, owners_fd, process)


def take_share(command: ServeCommand, start_timeout: float) -> Share:
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
    """Let go of the owners lock; the last process to let go -- whether it launched the service or attached
    to it -- stops the server running now and waits for its exit (the server would stop in a quarter of a
    second by itself), under the launch lock, so that no one relaunches it meanwhile."""
    if ownership.pid != os.getpid():
        return
    for client in list(ownership.clients):
        client.close()  # its idle connections (the server would close them at once anyway)
    paths = ownership.service.paths
    try:
        with exclusive_lock(paths.lock, STOP_WAIT_SECONDS, "waiting for the launch lock"):
            if _last_owner(ownership.owners_fd):
                _stop_running(paths, ownership.process)
            os.close(ownership.owners_fd)
    except LaunchError:
        os.close(ownership.owners_fd)  # the server's own watch stops it once nobody holds the lock


def _stop_running(paths: ServicePaths, ours: subprocess.Popen[bytes] | None) -> None:
    """Stop the server the record names, and wait until it has exited: ``ours`` (the one this process
    started, reaped here), or one another process started -- relaunched by a DataLoader worker after ours
    died, say, or launched by another local rank."""
    if ours is not None:
        _stop(ours)  # (reaped at once if it died already)
    record = Record.read(paths.record)
    if record is None or (ours is not None and record.pid == ours.pid):
        return
    if not process_alive(record.pid, paths.socket):  # (its command line names the socket: not a reused pid)
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)  # it drains, as ours does
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while process_alive(record.pid, paths.socket):
            if time.monotonic() > deadline:
                os.kill(record.pid, signal.SIGKILL)
                return
            time.sleep(0.02)


def _last_owner(owners_fd: int) -> bool:
    return try_lock(owners_fd, exclusive=True)  # ours shared -> exclusive: only if alone


def _adopt(key: str, process: subprocess.Popen[bytes]) -> None:
    """A server this process relaunched: stopped with this process's ownership, or left to the others."""
    with _owned_lock:
        ownership = _owned.get(key)
        if ownership is not None and ownership.pid == os.getpid():
            ownership.process = process
        else:
            _children.append(process)


def _let_go_of_everything() -> None:
    """At interpreter exit: this process lets go of what it owns (never a forked child's inherited copy)."""
    with _owned_lock:
        owned = [o for o in _owned.values() if o.pid == os.getpid()]
        _owned.clear()
    for ownership in owned:
        _let_go(ownership)


def _forget_after_fork() -> None:
    """In a forked child: close the inherited lock descriptors (the parent's locks stay: it holds the same
    open files) and own nothing, so the child's exit stops nothing."""
    global _owned_lock
    _owned_lock = threading.Lock()  # another thread may have held it at the fork
    for inherited in _owned.values():
        try:
            os.close(inherited.owners_fd)
        except OSError:
            pass
    _owned.clear()
    _children.clear()


atexit.register(_let_go_of_everything)
if hasattr(os, "register_at_fork"):  # (not on Windows, where launch() refuses: see rendezvous.require_posix)
    os.register_at_fork(after_in_child=_forget_after_fork)
