"""Launched services in tests: a private launch directory of their own, and their servers judged and ended by PID
(read from /proc, not with the code under test)."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from testkit.servers import alive


def serves(pid: int, socket_path: Path | str) -> bool:
    """Whether ``pid`` is a server on ``socket_path`` (its command line names it)."""
    try:
        return str(socket_path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def wait_gone(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started and that still run (Linux: /proc/PID/task/PID/children)."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@contextlib.contextmanager
def private_launch_directory() -> Iterator[Path]:
    """A launch directory of its own (short, under /tmp: a socket path holds at most 107 bytes); at the end, any
    server a record there names is killed -- only if it serves that record's socket -- and the directory removed."""
    from service.launch import ownership
    from service.launch.rendezvous import Record

    folder = Path(tempfile.mkdtemp(prefix="tsl-", dir="/tmp"))
    try:
        yield folder
    finally:
        ownership.let_go_of_everything()  # a failed test must not leave this process owning a service
        for record in folder.glob("*.json"):
            data = Record.read(str(record))
            if data is not None and data.pid != os.getpid() and serves(data.pid, record.with_suffix(".sock")):
                kill(data.pid)
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()


def texts_encoded(url: str) -> float:
    """How many texts the server at ``url`` (one replica: its own socket) has encoded, from its /metrics."""
    import re

    from service.transport import HTTPTransport, Request, Timeout

    transport = HTTPTransport()
    try:
        answer = transport.handle_request(Request("GET", url + "/metrics", {}, timeout=Timeout(2.0, 10.0)))
    finally:
        transport.close()
    found = re.search(rb"^tokenizer_texts_encoded_total (\S+)$", bytes(answer.body), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def replica_sockets(parent: int) -> dict[int, str]:
    """pid -> the private socket (``--uds``) of each replica a ``serve --replicas`` parent runs now."""
    sockets = {}
    for child in children(parent):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--uds" in argv:
            sockets[child] = argv[argv.index(b"--uds") + 1].decode()
    return sockets
