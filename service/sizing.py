"""How many server processes the cores keep busy, and how many Rust threads each gets: one process serves at most
1 / (its GIL-held time per batch) batches a second, so the cores beyond what it keeps busy are fed by replicas
(each the one server: one tokenizer, never forks), not a bigger rayon pool. ``launch(replicas=)``,
``serve --replicas`` and the Kubernetes manifests' pod CPU size by it. Standard library only (launcher and server
import it)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "CORES_PER_REPLICA",
    "AUTO",
    "available_cpus",
    "check_replicas",
    "ReplicaPlan",
    "plan_replicas",
    "share_of_cores",
]

#: The cores one server process keeps busy: the figure ``replicas="auto"`` divides the cores by, and the most
#: CPU a Kubernetes pod of one process should get. A *projection*, not a measurement on a big machine: one
#: process's GIL side keeps (G + R) / G cores busy before it saturates, G being its Python threads' CPU per batch
#: and R its Rust pool's, as ``benchmarks.cpu_split`` measures them on this project's 2-core machine (batches of
#: 256, padding longest, truncation 128) and ``benchmarks.scaling`` prints per row (docs/guides/performance.md,
#: "Scaling with the node"): short Chinese reviews (WordPiece) 5.1 (G 3.09, R 12.8 ms; 5.4 in another run, 5.1
#: in the GIL-side work's), ~300-char English (byte-level BPE) 8.0 (2.14, 15.1), ~300-char Chinese 11.9
#: (5.44, 59.5), ~1000-char Chinese 19.8 (11.09, 208). The tightest row rounded down: 5. At 6, a replica on short
#: texts waits on its GIL side with a core to spare, and benchmarks.scaling's projection gives replicas="auto"
#: 0.88x the workaround on 16 cores on that row (2 x 8); at 5, 3 x 5. Smaller replicas are also what one rayon
#: pool that stops scaling past 4-8 threads (tokenizers #1900, #2337) favours. Update it here when a
#: measurement on a many-core machine gives the figure: everything that sizes by it reads this name.
CORES_PER_REPLICA: Final = 5

#: The value of ``replicas`` that sizes the count from the cores: one replica per :data:`CORES_PER_REPLICA`.
AUTO: Final = "auto"


def available_cpus() -> int:
    """CPUs this process may use: the affinity mask, capped by a cgroup CPU quota (not the host's count)."""
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


def check_replicas(replicas: object) -> int | str:
    """``replicas`` (a whole number >= 1, or ``"auto"``), or a ValueError (TypeError for a non-number) saying what
    to write instead."""
    if isinstance(replicas, str) and replicas.strip().lower() == AUTO:
        return AUTO
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        error = ValueError if isinstance(replicas, (str, float)) else TypeError
        raise error(
            f"replicas must be a whole number of server processes (1 or more) or {AUTO!r} (one per "
            f"{CORES_PER_REPLICA} cores this process may use), not {replicas!r}"
        )
    if replicas < 1:
        raise ValueError(
            f"replicas must be at least 1 (one server process), not {replicas}; {AUTO!r} sizes them from the cores"
        )
    return replicas


@dataclass(frozen=True)
class ReplicaPlan:
    """How many replicas to start on ``cores`` cores, and what it costs when that is more than the cores."""

    count: int
    cores: int
    threads: int | None  # each replica's Rust threads when asked for; None: its share of the cores
    warning: str | None  # set when it asks for more processes or threads than there are cores

    @property
    def threads_each(self) -> int:
        return self.threads if self.threads is not None else share_of_cores(self.cores, self.count)


def share_of_cores(cores: int, replicas: int) -> int:
    """An equal share of ``cores`` for one of ``replicas`` processes, at least 1."""
    return max(1, cores // max(1, replicas))


def plan_replicas(
    replicas: object, threads: int | None = None, cores: int | None = None, *, cores_per_replica: int | None = None
) -> ReplicaPlan:
    """The replicas ``replicas`` asks for on ``cores`` cores (default :func:`available_cpus`), each with ``threads``
    Rust threads (default: its share). ``cores_per_replica`` overrides :data:`CORES_PER_REPLICA` for what-ifs
    (``benchmarks.projection``)."""
    asked = check_replicas(replicas)
    cores = available_cpus() if cores is None else cores
    per_replica = CORES_PER_REPLICA if cores_per_replica is None else cores_per_replica
    count = max(1, cores // per_replica) if asked == AUTO else int(asked)
    warning = None
    if count > cores:
        warning = (
            f"replicas={count} is more than the {cores} cores this process may use: each replica loads its own "
            f"tokenizer and holds its own memory budget, and their event loops take turns on the same cores, so "
            f"throughput is no higher than with {cores} and memory is {count - cores} tokenizer(s) larger "
            f"(replicas={AUTO!r} gives {max(1, cores // per_replica)} here)"
        )
    elif threads is not None and count * threads > cores:
        warning = (
            f"replicas={count} with threads={threads} each runs {count * threads} Rust threads on {cores} cores: "
            f"they contend for the cores (leave threads unset for an equal share: {share_of_cores(cores, count)} each)"
        )
    return ReplicaPlan(count, cores, threads, warning)
