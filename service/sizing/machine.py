"""What this machine gives one process: the CPUs it may use (affinity, cgroup quota), its memory limit (cgroup, else
the machine's memory) and the CPU model. Standard library only: the launcher, the server and the calibration read
them."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path

__all__ = ["allowed_cpus", "available_cpus", "cgroup_cpu_quota", "cgroup_memory_limit", "cpu_model", "memory_limit"]


def allowed_cpus() -> list[int]:
    """The CPU ids this process may run on (its affinity mask), in order; ``0..n-1`` where there is no mask."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def available_cpus() -> int:
    """CPUs this process may use: the affinity mask, capped by a cgroup CPU quota (not the host's count)."""
    cpus = len(allowed_cpus())
    quota = cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
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


def cgroup_memory_limit(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max`` or v1 ``memory.limit_in_bytes``), or None."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value >= 1 << 60 else value  # v1 writes a huge number for "unlimited"
    return None


def memory_limit() -> int | None:
    """The memory this process's processes may hold together, in bytes: its cgroup's limit, else the machine's
    physical memory; None where neither can be read."""
    limit = cgroup_memory_limit()
    if limit is not None:
        return limit
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what the platform says of the processor."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("model name", "Model", "cpu model", "Processor") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
