"""Pinning running processes to cores, every thread of each, as ``taskset -a -p`` does: ``os.sched_setaffinity(pid)``
moves one thread only, and a server's Rust pool or a DataLoader's threads are threads of their own. A thread started
later inherits its creator's mask, and a process forked later (a DataLoader worker) the forking thread's."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def usable_cores() -> list[int]:
    """The cores this process may run on now, in order."""
    return sorted(os.sched_getaffinity(0))


def first_cores(cores: list[int], count: int) -> list[int]:
    """The first ``count`` of ``cores`` (ValueError if there are fewer)."""
    if count > len(cores):
        raise ValueError(f"{count} cores asked for, of {len(cores)}")
    return cores[:count]


def pin(pids: Iterable[int], cores: Iterable[int]) -> None:
    """Pin every thread of every process of ``pids`` to ``cores`` (a thread that ends meanwhile is skipped)."""
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                os.sched_setaffinity(int(task.name), set(cores))
            except (ProcessLookupError, FileNotFoundError):
                continue
