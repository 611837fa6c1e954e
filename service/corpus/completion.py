"""Outputs that are either whole or absent, and the ``.done`` record that says a unit is finished.

Every output file is written under a hidden temporary name in its final directory, flushed to disk, then
renamed (atomic on POSIX file systems, shared ones included), so no reader ever sees half a file. A unit
is done when its ``.done`` record exists; the record is written last, after every output of the unit, so a
worker that dies at any point leaves either a done unit or a partial one that a rerun redoes from the
start (:func:`remove_partial` clears what it left). One unit is written by one worker at a time.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import IO, Any

DONE_SUFFIX = ".done"
_PARTIAL_MARK = ".partial-"


def done_path(base: Path) -> Path:
    """The ``.done`` record of the unit whose outputs are named ``base`` (plus their suffixes)."""
    return base.with_name(base.name + DONE_SUFFIX)


def _partial_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{_PARTIAL_MARK}{os.getpid()}")


@contextmanager
def atomic_file(path: Path) -> Iterator[IO[bytes]]:
    """A binary file object whose content appears at ``path`` only when the block ends without an error
    (flushed and fsynced, then renamed); on an error the temporary file is removed and ``path`` untouched."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = _partial_path(path)
    stream = open(partial, "wb")
    try:
        yield stream
        stream.flush()
        os.fsync(stream.fileno())
        stream.close()
        os.replace(partial, path)
    except BaseException:
        stream.close()
        partial.unlink(missing_ok=True)
        raise


def interrupt_on_sigterm() -> None:
    """Make SIGTERM (a pod or a job being stopped) unwind like Ctrl-C, so that the output being written
    leaves no temporary file behind (:func:`atomic_file` removes it on the way out). Done units stay done."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_file`)."""
    with atomic_file(path) as stream:
        stream.write(data)


def write_done(base: Path, record: dict[str, Any]) -> None:
    """Mark the unit ``base`` done with ``record`` (JSON). Call it after its outputs are all in place."""
    atomic_write_bytes(done_path(base), (json.dumps(record, indent=1, ensure_ascii=False) + "\n").encode())


def read_done(base: Path) -> dict[str, Any] | None:
    """The ``.done`` record of unit ``base``, or None if it is not done (an unreadable record counts as not
    done: the unit is redone)."""
    try:
        record = json.loads(done_path(base).read_bytes())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def remove_partial(paths: Iterable[Path]) -> None:
    """Remove what an interrupted attempt may have left of these outputs: the files themselves and any
    temporary files of theirs."""
    for path in paths:
        path.unlink(missing_ok=True)
        if path.parent.is_dir():
            for leftover in path.parent.glob(f".{_escape_glob(path.name)}{_PARTIAL_MARK}*"):
                leftover.unlink(missing_ok=True)


def _escape_glob(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def wait_for_done(
    bases: Sequence[Path],
    *,
    stall_timeout: float,
    poll_interval: float = 2.0,
    on_wait: Callable[[int, int, list[Path]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Path]:
    """Wait until every unit of ``bases`` is done, as long as some unit gets done at least every
    ``stall_timeout`` seconds. Returns the units still missing (empty: all done). ``on_wait(done, total,
    missing)`` is called at each poll while waiting (for progress lines)."""
    missing = [base for base in bases if not done_path(base).exists()]
    last_progress = clock()
    while missing:
        if clock() - last_progress >= stall_timeout:
            break
        if on_wait is not None:
            on_wait(len(bases) - len(missing), len(bases), missing)
        sleep(poll_interval)
        still = [base for base in missing if not done_path(base).exists()]
        if len(still) < len(missing):
            last_progress = clock()
        missing = still
    return missing
