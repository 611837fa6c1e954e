"""The servers this package starts by exec, as both launchers run them (``TokenizerClient.launch``'s,
:mod:`service.launch`, and ``serve --replicas``', :mod:`service.http.replicas`) and the calibration probes: the
environment a child runs in, whether one is ready (its fingerprint, asked on its Unix socket), whether a pid is
still the server it was, how one ended, and stopping them. Standard library and the package's own transport; it
registers nothing and starts nothing at import."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import site
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .addresses import unix_socket_url
from .transport.base import Request, Timeout
from .transport.exceptions import TransportError
from .transport.stdlib import HTTPTransport
from .wire import INFO_PATH, READY_PATH

__all__ = [
    "child_environment",
    "ready_fingerprint",
    "process_alive",
    "running_since",
    "how_it_ended",
    "stop_servers",
]

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def child_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with this package's checkout first on ``PYTHONPATH`` when it
    is not an installed package, so that a Python child imports this very package."""
    env = dict(os.environ if base is None else base)
    root = str(_PACKAGE_ROOT)
    if root not in [*site.getsitepackages(), site.getusersitepackages()]:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


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


def process_alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs with ``marker`` (its socket path) in its command line: not a reused pid, nor a zombie.
    Without /proc, whether it exists."""
    if not os.path.isdir("/proc/self"):
        return running_since(pid) is not None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return os.fsencode(marker) in file.read()
    except OSError:
        return False


def how_it_ended(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def running_since(pid: int) -> str | None:
    """Who ``pid`` is while it runs: its start time (without /proc, that it exists); None once it has exited, a
    zombie included. Its command line is no such sign: the kernel drops it as the process begins to exit, before
    the process is gone (a server with a large heap takes a while, more so on a busy machine)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # another user's
        return ""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]  # (state, ..., starttime: the stat's 3rd and 22nd fields)


def stop_servers(
    ours: Sequence[subprocess.Popen[bytes]], others: Sequence[tuple[int, str]] = (), *, wait: float
) -> None:
    """SIGTERM (they drain) ``ours`` (reaped here) and ``others`` (another process's, each known by its pid and
    start time, :func:`running_since`: not a reused pid) at once, wait up to ``wait`` seconds for each to exit,
    SIGKILL one that overstays; return once each has exited."""
    running = [process for process in ours if process.poll() is None]
    running_others = [(pid, since) for pid, since in others if running_since(pid) == since]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
    for pid, _ in running_others:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait
    for process in running:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
    for pid, since in running_others:
        killed = False
        while running_since(pid) == since:
            if time.monotonic() > deadline:
                if killed:
                    break  # (unkillable: in the kernel, on a dead disk, say)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed, deadline = True, time.monotonic() + 5  # (as ours: a killed process takes a moment to go)
            time.sleep(0.02)
