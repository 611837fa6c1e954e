"""The machine a benchmark runs on: how many CPUs it may use, and how busy other processes keep it.

The machine is shared: every measurement records the CPU other processes used meanwhile, a figure taken
while they used more than ``BUSY_CORES`` is flagged in the table, and a run first waits (bounded) for a
quiet machine.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

from benchmarks.loadgen import CpuProbe
from benchmarks.progress import log

BUSY_CORES = 0.25  # other processes using more than this during a measurement: flagged in the table


def available_cpus() -> int:
    """The CPUs this process may run on (the server sizes its Rust thread pool the same way)."""
    from service.engine.parallelism import available_cpus as cpus

    return cpus()


def host_facts() -> dict[str, Any]:
    """What a table names the machine by: the CPU model, the CPUs this process may use and the host's count, the
    memory the kernel reports (MemTotal), the OS and the Python."""
    return {
        "cpu_model": _proc_field(Path("/proc/cpuinfo"), "model name") or platform.processor() or platform.machine(),
        "cpus_available": available_cpus(),
        "cpus_on_host": os.cpu_count(),
        "memory_gib": round(int((_proc_field(Path("/proc/meminfo"), "MemTotal") or "0 kB").split()[0]) / 2**20, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _proc_field(path: Path, name: str) -> str | None:
    """The value of the first ``name: value`` line of a /proc file, or None."""
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return None


def machine_noise(seconds: float = 0.5) -> float:
    """Cores busy on this machine outside this process, over a short idle window."""
    probe = CpuProbe()
    before = probe.snapshot()
    time.sleep(seconds)
    return CpuProbe.delta(before, probe.snapshot())["other_cpu_cores"]


def wait_for_quiet(limit: float) -> float:
    """Wait, at most ``limit`` seconds, until other processes use under BUSY_CORES cores; return the last reading."""
    deadline = time.monotonic() + limit
    while True:
        noise = machine_noise(2.0 if limit > 0 else 0.5)
        left = deadline - time.monotonic()
        if noise <= BUSY_CORES or left <= 0:
            return noise
        log(f"other processes are using {noise:.2f} cores; waiting for a quieter machine ({left:.0f} s left)")
