"""Rust thread-pool sizing and the at-fork guard.

The whole point of the service is that one process keeps the Rust tokenizer's rayon pool busy and never
forks. This module sizes that pool from the CPUs the process may really use (affinity and cgroup quota)
and counts any fork that happens after the tokenizer is loaded.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from pathlib import Path

logger = logging.getLogger(__name__)


def available_cpus() -> int:
    """CPUs this process may use: the affinity mask, capped by a cgroup CPU quota if one is set."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def _cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPU quota in cores from cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``; None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def configure_rust_parallelism(threads: int) -> None:
    """Turn the tokenizers' rayon pool on with ``threads`` workers.

    The thread count only takes effect if this runs before the pool is first used in this process, which
    is why the CLI calls it before anything touches ``tokenizers``.
    """
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["RAYON_RS_NUM_CPUS"] = str(threads)  # older tokenizers releases read this name


def parallelism_enabled() -> bool:
    """Whether tokenizers will run its batch encodes on the rayon pool."""
    return os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in {"1", "true", "yes", "on"}


class ForkGuard:
    """Counts forks of this process after the tokenizer is loaded, and logs each one as an error.

    ``os.register_at_fork`` handlers cannot be removed, so one process-wide guard is registered once and
    armed/disarmed by each engine. The ``before`` hook runs in the parent, so the count stays where
    ``/info`` can report it.
    """

    _lock = threading.Lock()
    _registered = False
    _armed = 0
    forks_after_load = 0

    @classmethod
    def arm(cls) -> None:
        with cls._lock:
            if not cls._registered:
                os.register_at_fork(before=cls._on_fork)
                cls._registered = True
            cls._armed += 1

    @classmethod
    def disarm(cls) -> None:
        with cls._lock:
            cls._armed = max(0, cls._armed - 1)

    @classmethod
    def _on_fork(cls) -> None:
        if cls._armed:
            cls.forks_after_load += 1
            logger.error(
                "the serving process is forking after the tokenizer was loaded (fork #%d): the child "
                "inherits a Rust thread pool it cannot use; the service must run as one process",
                cls.forks_after_load,
            )
