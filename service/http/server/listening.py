"""Closing a listening socket without resetting a connection the kernel has already accepted.

Closing a TCP listener resets every connection in its accept queue, whose clients may already have sent a
request (32 resets under 32 reconnecting clients, measured before this module). :func:`close_listeners` closes
in three steps, so that a client is either answered or refused before it could send anything:

1. A socket filter drops incoming SYNs (Linux, ``SO_ATTACH_FILTER``): the client's retried SYN (~1 s later)
   finds the socket closed, having sent nothing. Handshakes under way complete.
2. The event loop accepts (and the server answers) until the accept queue is empty (``TCP_INFO``) and the
   handshakes under way have had a round trip's time.
3. The listener is closed in the step that last saw the queue empty (nothing awaited in between).

Without the filter (not Linux), steps 2 and 3 narrow the race; without ``TCP_INFO`` too, the listener is simply
closed. A Unix socket's step 1 is removing its file (:class:`SocketFile`: a connect by path then fails at once);
its queue cannot be read, so step 2 waits the settle time.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import socket
import struct
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

#: How long a handshake under way when the filter went on may take to complete (one round trip, with room).
HANDSHAKE_SETTLE_SECONDS = 0.1
#: The most time spent waiting for the accept queue to empty (the loop empties a full one in milliseconds).
QUEUE_WAIT_LIMIT_SECONDS = 2.0
_POLL_SECONDS = 0.005

_SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)
_TCP_LISTEN = 10  # tcp_info.tcpi_state of a listening socket
# Classic BPF, run on each segment reaching the listener from its TCP header on: SYN flag set -> drop, else keep
# (a handshake's final ACK passes).
_DROP_SYN = (
    (0x30, 0, 0, 13),  # ldb [13]
    (0x45, 1, 0, 0x02),  # jset #SYN, drop, keep
    (0x06, 0, 0, 0xFFFFFFFF),  # keep: ret #-1
    (0x06, 0, 0, 0),  # drop: ret #0
)


def refuse_new_handshakes(sock: Any) -> bool:
    """Drop the SYNs that reach listening socket ``sock`` from now on; False where that is not possible."""
    if sys.platform != "linux" or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    program = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *op) for op in _DROP_SYN))
    fprog = struct.pack("HP", len(_DROP_SYN), ctypes.addressof(program))  # struct sock_fprog
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)  # the kernel copies the program
    except OSError as exc:
        logger.debug("cannot filter SYNs on the listening socket (%s): closing with a narrower race", exc)
        return False
    return True


def accept_queue_length(sock: Any) -> int | None:
    """Connections waiting in listening socket ``sock``'s accept queue; None where the kernel does not say."""
    tcp_info = getattr(socket, "TCP_INFO", None)
    if tcp_info is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, 32)
    except OSError:
        return None
    if len(info) < 28 or info[0] != _TCP_LISTEN:
        return None
    length: int = struct.unpack_from("I", info, 24)[0]  # tcpi_unacked: the accept queue, for a listener
    return length


@dataclass(frozen=True)
class SocketFile:
    """A Unix listening socket's file, known by device and inode so that it is removed only while it is still this
    server's (a newer server may have replaced it)."""

    path: str
    device: int
    inode: int

    @classmethod
    def of(cls, path: str) -> SocketFile:
        status = os.lstat(path)
        return cls(path, status.st_dev, status.st_ino)

    def remove(self) -> None:
        """Remove the file if it is still this one (connections by its path then fail at once)."""
        with contextlib.suppress(FileNotFoundError):
            status = os.lstat(self.path)
            if (status.st_dev, status.st_ino) == (self.device, self.inode):
                os.unlink(self.path)


async def close_listeners(servers: Iterable[asyncio.Server], socket_files: Sequence[SocketFile] = ()) -> None:
    """Close the listening sockets of ``servers`` (see the module doc; ``socket_files``: their Unix sockets' files,
    removed first): after this a new connection is refused, and every one completed before was accepted."""
    servers = list(servers)
    sockets = [sock for server in servers for sock in server.sockets]
    for socket_file in socket_files:
        socket_file.remove()  # a Unix socket's step 1
    tcp = [sock for sock in sockets if sock.family != socket.AF_UNIX]
    unix_refusing = len(socket_files) >= len(sockets) - len(tcp)
    filtered = bool(sockets) and all([refuse_new_handshakes(sock) for sock in tcp]) and unix_refusing
    started = time.monotonic()
    settled = started + (HANDSHAKE_SETTLE_SECONDS if filtered else 0.0)
    while (now := time.monotonic()) < started + QUEUE_WAIT_LIMIT_SECONDS:
        if now >= settled and not any(accept_queue_length(sock) for sock in sockets):
            break
        await asyncio.sleep(_POLL_SECONDS)  # the event loop accepts meanwhile
    else:
        logger.warning("the accept queue did not empty within %gs; closing it", QUEUE_WAIT_LIMIT_SECONDS)
    for server in servers:  # no await since the queue was last seen empty
        server.close()
