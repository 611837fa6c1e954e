"""The machine a benchmark runs on: how many CPUs it may use, and how busy other processes keep it.

The machine is shared: every measurement records the CPU other processes used meanwhile, a figure taken
while they used more than ``BUSY_CORES`` is flagged in the table, and a run first waits (bounded) for a
quiet machine.
"""

from __future__ import annotations

import time

from benchmarks.loadgen import CpuProbe
from benchmarks.progress import log

BUSY_CORES = 0.25  # other processes using more than this during a measurement: flagged in the table


def available_cpus() -> int:
    """The CPUs this process may run on (the server sizes its Rust thread pool the same way)."""
    from service.engine.parallelism import available_cpus as cpus

    return cpus()


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
