"""What this process holds of launched services, in one registry: per service, its shared owners locks (one per
replica, :mod:`.rendezvous`), the servers it started and how many of its clients have not let go; the servers it
relaunched for a service it does not own; the replicas its threads are relaunching. One launched service per process.
The last process to let go stops the servers the records name and waits.

Its process-wide hooks are installed by the first launch, attach or relaunch in this process, never at import (a
process that imports the SDK runs nothing of ours at exit or fork): at exit, let go of what this process owns; in a
forked child, forget it, so that the child's exit (``atexit`` included) stops nothing.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..processes import stop_servers
from ..transport.exceptions import LaunchError
from .command import ServeCommand
from .launched import LaunchedService
from .rendezvous import Record, ServicePaths, close_locks, exclusive_lock, try_lock
from .starting import STOP_WAIT_SECONDS, attach_or_start

__all__ = ["Share", "launch_or_attach", "release", "adopt", "claim_relaunch", "relaunch_done", "let_go_of_everything"]


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
_background: set[tuple[str, int]] = set()  # (key, replica) being relaunched by a thread of this process, or given up
_background_lock = threading.Lock()
_hooks_installed = False


def _install_hooks() -> None:
    """The process-wide hooks, installed once per process by its first launch, attach or relaunch, never at import;
    called with ``_owned_lock`` held, before the registry holds anything (a child forked from then on gets fresh locks
    and an empty registry)."""
    global _hooks_installed
    if _hooks_installed:
        return
    atexit.register(let_go_of_everything)
    if hasattr(os, "register_at_fork"):  # (not on Windows, where launch() refuses: see rendezvous.require_posix)
        os.register_at_fork(after_in_child=_forget_after_fork)
    _hooks_installed = True


def launch_or_attach(command: ServeCommand, start_timeout: float) -> Share:
    with _owned_lock:
        _install_hooks()
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
        ownership = _Ownership(*attach_or_start(command, start_timeout))
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
            close_locks(ownership.owners_fds)
    except LaunchError:
        close_locks(ownership.owners_fds)  # each server's own watch stops it once nobody holds its lock


def _stop_running(paths: Sequence[ServicePaths], ours: Mapping[int, subprocess.Popen[bytes]]) -> None:
    """Stop the server each record names, ours or another process's (a worker's relaunch, a rank's launch); wait."""
    others = []
    for replica, replica_paths in enumerate(paths):
        record = Record.read(replica_paths.record)
        process = ours.get(replica)
        if record is None or (process is not None and record.pid == process.pid):
            continue
        if (since := record.server_since(replica_paths.socket)) is not None:
            others.append((record.pid, since))  # (stop_servers stops it only if it is still that process)
    stop_servers(list(ours.values()), others, wait=STOP_WAIT_SECONDS)  # (ours are reaped at once if they died already)


def adopt(key: str, replica: int, process: subprocess.Popen[bytes]) -> None:
    """A server this process relaunched: stopped with this process's ownership, or left to the others."""
    with _owned_lock:
        _install_hooks()
        ownership = _owned.get(key)
        if ownership is not None and ownership.pid == os.getpid():
            dead = ownership.processes.get(replica)
            if dead is not None:
                dead.poll()  # reaped: it died, or this relaunch would not be
            ownership.processes[replica] = process
        else:
            _children.append(process)


def let_go_of_everything() -> None:
    """At exit (and at the end of a test): let go of what this process owns (never a forked child's inherited copy)."""
    with _owned_lock:
        owned = [o for o in _owned.values() if o.pid == os.getpid()]
        _owned.clear()
    for ownership in owned:
        _let_go(ownership)


def claim_relaunch(key: str, replica: int) -> bool:
    """Whether the caller is to relaunch ``replica`` in a thread: no thread of this process relaunches it already, nor
    gave up on it (then :func:`relaunch_done`)."""
    with _owned_lock:
        _install_hooks()
    with _background_lock:
        if (key, replica) in _background:
            return False
        _background.add((key, replica))
        return True


def relaunch_done(key: str, replica: int) -> None:
    """A relaunching thread is done: another may relaunch ``replica`` when it dies again."""
    with _background_lock:
        _background.discard((key, replica))


def _forget_after_fork() -> None:
    """In a forked child: close the inherited lock descriptors (the parent's locks stay: same open files) and own
    nothing, so the child's exit stops nothing."""
    global _owned_lock, _background_lock
    _owned_lock = threading.Lock()  # another thread may have held it at the fork
    _background_lock = threading.Lock()
    for inherited in _owned.values():
        close_locks(inherited.owners_fds)
    _owned.clear()
    _children.clear()
    _background.clear()  # the parent's relaunching threads are not here
