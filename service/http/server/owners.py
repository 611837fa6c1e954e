"""A server that lives exactly as long as the processes it works for (``--owners-file``).

Each process using a launched server holds a *shared* ``flock`` on one file; the kernel drops it however the
process exits (SIGKILL and the OOM killer included), so no pid is needed: :class:`OwnersWatch` tries the lock
*exclusively* a few times a second, and once it gets it nobody is left: the server stops as on SIGTERM, holding
the lock until it exits, so a newcomer waits for it to be gone and launches anew (``service/launch/ownership.py``).
A forked child would share its parent's lock; the client closes that copy in forked children.
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
            try:  # once taken, held until this process exits
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            logger.info("every process using this server has gone (--owners-file %s): stopping", self.path)
            self.on_gone()
            return
