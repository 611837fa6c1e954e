"""A server that lives exactly as long as the processes it works for (``--owners-file``).

``TokenizerClient.launch`` starts a private server for a training job. The processes of that job -- the
script, or every local rank of a torchrun job -- each hold a *shared* ``flock`` on one lock file for as long
as they use the server. The kernel drops a process's lock when it exits, however it exits (SIGKILL and
out-of-memory kills included), so the server needs no pid of anyone: :class:`OwnersWatch` tries to take
the lock *exclusively*, without waiting, a few times a second, and the first time it can, nobody holds it
any more: the server stops as on SIGTERM. It keeps the exclusive lock until it has exited, so a process
that comes to share it meanwhile waits for this server to be gone and then launches a new one
(``service/launch/supervisor.py``).

A forked child shares its parent's lock (the same open file) rather than holding one of its own; the
client closes its copy in forked children, so only the processes that asked for the server count.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

#: How often the watch tries the lock: the most time a server outlives its last owner before it stops.
CHECK_SECONDS = 0.25


class OwnersWatch:
    """Calls ``on_gone`` (from its own thread, once) when no process holds a shared lock on ``path``."""

    def __init__(self, path: str, on_gone: Callable[[], None]) -> None:
        self.path = path
        self.on_gone = on_gone  # replaceable: what "stop" means changes once the server runs
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def start(self) -> OwnersWatch:
        threading.Thread(target=self._watch, name="owners-watch", daemon=True).start()
        return self

    def _watch(self) -> None:
        while True:
            time.sleep(CHECK_SECONDS)
            try:  # taken once no process holds it, and then held (exclusively) until this process exits
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            logger.info("every process using this server has gone (--owners-file %s): stopping", self.path)
            self.on_gone()
            return
