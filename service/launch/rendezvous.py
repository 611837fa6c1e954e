"""Where launched services meet the processes that use them: one private directory per user on this machine
(:func:`launch_directory`: short, as a socket path holds 107 bytes; mode 0700, as whoever reaches a socket can use
the service). Per launch key (:func:`launch_key`), named by its first 16 hex digits, and per replica ``N``:

- ``<key>.lock``: held exclusively by the one process deciding to attach, launch or relaunch, so that the local
  ranks of a torchrun job start exactly one set;
- ``<key>-N.sock``: the replica's Unix socket;
- ``<key>-N.owners``: held *shared* by every process using the service; the replica stops once nobody holds it
  (``service/http/server/owners.py``) and holds it exclusively while it stops, so a newcomer waits, then launches
  anew (one per replica, so that all see their owners gone at once and stop together);
- ``<key>-N.json``: the record (pid, fingerprint, launches); ``<key>-N.log``: the replica's output.

Locks are ``flock`` locks, which the kernel drops however their process dies. Standard library only; nothing here
starts a process. ``fcntl`` is imported where a lock is taken, so this module imports on Windows, where
:func:`require_posix` says what to do instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..addresses import MAX_SOCKET_PATH_BYTES
from ..processes import process_alive, running_since
from ..transport.exceptions import LaunchError
from ..wire import ENV_PREFIX, URL_ENV

__all__ = [
    "LAUNCH_DIR_ENV",
    "require_posix",
    "launch_directory",
    "launch_key",
    "ServicePaths",
    "Record",
    "exclusive_lock",
    "hold_shared",
    "try_lock",
    "nobody_holds",
    "close_locks",
]

#: The directory ``TokenizerClient.launch`` keeps its sockets, locks and logs in (default:
#: ``$XDG_RUNTIME_DIR/tokenizer-service``, else ``/tmp/tokenizer-service-<uid>``; private: mode 0700).
LAUNCH_DIR_ENV = ENV_PREFIX + "LAUNCH_DIR"
_POLL_SECONDS = 0.05


def require_posix() -> None:
    """LaunchError unless this system has Unix domain sockets and ``flock`` (Windows has neither)."""
    missing = [] if hasattr(socket, "AF_UNIX") else ["Unix domain sockets"]
    try:
        import fcntl  # noqa: F401  (every fcntl module has flock)
    except ImportError:
        missing.append("flock (the fcntl module)")
    if missing:
        raise LaunchError(
            f"TokenizerClient.launch needs a POSIX system (Unix sockets and flock), and this one "
            f"({sys.platform}) lacks {' and '.join(missing)}: run `tokenizer-service serve` where it can run "
            '(its container, a Linux host or WSL) and pass its URL: TokenizerClient("http://HOST:PORT") or '
            f"${URL_ENV}"
        )


def launch_directory() -> Path:
    """``$TOKENIZER_SERVICE_LAUNCH_DIR``, else ``$XDG_RUNTIME_DIR/tokenizer-service``, else
    ``/tmp/tokenizer-service-<uid>``, created if missing; LaunchError saying what to do when it cannot be used."""
    configured = os.environ.get(LAUNCH_DIR_ENV)
    if configured:
        folder = Path(configured).expanduser().absolute()  # the same directory whatever the cwd of each rank
    else:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        if runtime and os.path.isdir(runtime) and os.access(runtime, os.W_OK | os.X_OK):
            folder = Path(runtime) / "tokenizer-service"
        else:
            folder = Path("/tmp") / f"tokenizer-service-{os.getuid()}"
    _make_private(folder, configured=bool(configured))
    return folder


def _make_private(folder: Path, *, configured: bool) -> None:
    advice = f"set {LAUNCH_DIR_ENV} to a private directory you can write" if not configured else "choose another"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LaunchError(f"cannot create the launch directory {folder}: {exc.strerror or exc}; {advice}") from exc
    status = os.lstat(folder)
    if not stat.S_ISDIR(status.st_mode):
        raise LaunchError(f"the launch directory {folder} is not a directory (a symlink or a file); {advice}")
    if status.st_uid != os.getuid():
        raise LaunchError(f"the launch directory {folder} belongs to another user (uid {status.st_uid}); {advice}")
    if status.st_mode & 0o077:
        raise LaunchError(
            f"the launch directory {folder} is open to other users (mode {stat.S_IMODE(status.st_mode):o}): "
            f"whoever reaches a socket there can use the service; chmod 700 it, or {advice}"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise LaunchError(f"the launch directory {folder} is not writable; {advice}")


def launch_key(model_identity: Any, arguments: list[str], secrets: Mapping[str, str], python: str) -> str:
    """Equal for two launches on this machine exactly when they would serve the same tokenizer files with the same
    settings on the same interpreter (secrets enter as a hash)."""
    identity = {
        "host": socket.gethostname(),  # a launch directory on a shared disk is still one per machine
        "python": os.path.realpath(python),
        "model": model_identity,
        "arguments": arguments,
        "secrets": {name: hashlib.sha256(value.encode()).hexdigest() for name, value in sorted(secrets.items())},
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class ServicePaths:
    """The files of one replica of a launch key (the lock is the key's, shared by all)."""

    socket: str
    lock: str
    owners: str
    record: str
    log: str

    @classmethod
    def of(cls, folder: Path, key: str, replica: int = 0) -> ServicePaths:
        stem = str(folder / key[:16])
        own = f"{stem}-{replica}"
        paths = cls(own + ".sock", stem + ".lock", own + ".owners", own + ".json", own + ".log")
        size = len(os.fsencode(paths.socket))
        if size > MAX_SOCKET_PATH_BYTES:
            raise LaunchError(
                f"the socket path {paths.socket} is {size} bytes, and a Unix socket path holds at most "
                f"{MAX_SOCKET_PATH_BYTES}: set {LAUNCH_DIR_ENV} to a shorter private directory (e.g. /tmp/ts-$USER)"
            )
        return paths


@dataclass
class Record:
    """``<key>-N.json``: what the launcher of a running replica wrote down."""

    pid: int
    fingerprint: str
    launches: int  # 1 when first launched, 2 after its one relaunch
    description: str
    started: str | None = None  # the server's start time (service.processes.running_since): who it is while it runs

    def server_since(self, socket_path: str) -> str | None:
        """Who the server this record names is, to wait on while ``running_since(pid)`` gives the same: its recorded
        start time; for a record without one (an earlier version's), its start time now if it runs serving
        ``socket_path`` (not a reused pid), else None. A process's command line is gone before the process is, so
        only the recorded start time also knows a server that is exiting already."""
        if self.started is not None:
            return self.started
        return running_since(self.pid) if process_alive(self.pid, socket_path) else None

    @classmethod
    def read(cls, path: str) -> Record | None:
        try:
            with open(path, encoding="utf-8") as file:
                return cls(**json.load(file))
        except (OSError, ValueError, TypeError):
            return None  # missing, half-written by a launcher that died, or from another version: none

    def write(self, path: str) -> None:
        partial = f"{path}.{os.getpid()}.part"
        with open(partial, "w", encoding="utf-8") as file:
            json.dump(asdict(self), file)
        os.replace(partial, path)


def _open_lock(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def try_lock(fd: int, *, exclusive: bool) -> bool:
    """Take ``fd``'s flock if that needs no wait; whether it was (a shared lock of ours turns exclusive only if no
    other process holds it)."""
    import fcntl  # here, not at import: Windows has none (see require_posix)

    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock_within(fd: int, exclusive: bool, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not try_lock(fd, exclusive=exclusive):
        if time.monotonic() >= deadline:
            raise LaunchError(f"gave up after {timeout:g}s {what}")
        time.sleep(_POLL_SECONDS)


@contextlib.contextmanager
def exclusive_lock(path: str, timeout: float, what: str) -> Iterator[None]:
    """Hold the lock file ``path`` exclusively for the block (LaunchError after ``timeout`` seconds)."""
    fd = _open_lock(path)
    try:
        _lock_within(fd, True, timeout, what)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def hold_shared(path: str, timeout: float, what: str) -> int:
    """A descriptor holding a shared lock on ``path``, closed to let go (waits while a stopping service holds it)."""
    fd = _open_lock(path)
    try:
        _lock_within(fd, False, timeout, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def nobody_holds(path: str) -> bool:
    """Whether no process holds ``path``'s lock at all (this process's own descriptors count)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        return try_lock(fd, exclusive=True)
    finally:
        os.close(fd)


def close_locks(fds: list[int]) -> None:
    """Close these lock descriptors (a lock held through them goes with them)."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
