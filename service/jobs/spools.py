"""Each process's private spool directory for files on their way to a store: made on first use, removed at the
process's exit, and those of processes gone (killed by SIGKILL) removed by the next one to make its own."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_SPOOL: dict[int, Path] = {}
_SPOOL_PREFIX = "tokenizer-service-spool-"


def process_spool() -> Path:
    """This process's private directory for files on their way to a store (removed at exit)."""
    spool = _SPOOL.get(os.getpid())
    if spool is None:
        _remove_orphan_spools()
        spool = Path(tempfile.mkdtemp(prefix=f"{_SPOOL_PREFIX}{os.getpid()}-"))
        _SPOOL[os.getpid()] = spool
        atexit.register(shutil.rmtree, spool, True)  # on use, never at import
    return spool


def _remove_orphan_spools() -> None:
    """Remove the spool directories (named after their process ids) of processes gone, e.g. killed by SIGKILL."""
    for path in Path(tempfile.gettempdir()).glob(f"{_SPOOL_PREFIX}*-*"):
        pid = path.name[len(_SPOOL_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:  # another user's live process
            pass
