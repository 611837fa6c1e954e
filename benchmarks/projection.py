"""Scaling past this machine: a model fed by CPU figures measured here. What it gives is a projection, never a
measurement, and every table that shows it says so, with :data:`MODEL` and :data:`ASSUMPTIONS` beside it.

Inputs, per batch of 256 texts, in ms of CPU, measured on this machine (:class:`Costs`):

- ``G``, the GIL side of one server process (its Python threads) and ``R``, its Rust pool
  (``benchmarks.cpu_split``);
- ``C``, the client side on the same node: the load generator's CPU (batches of 256) or the DataLoader workers'
  collate CPU through the SDK (the collator path);
- ``W``, one worker of the workaround tokenizing in-process with parallelism off.

The number of replicas ``replicas="auto"`` starts on ``c`` cores, and the Rust threads of each, come from
``service.sizing.plan_replicas`` -- the launcher's own sizing, not a copy of it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from service.sizing import AUTO, CORES_PER_REPLICA, ReplicaPlan, plan_replicas

MODEL = (
    "c cores on one node, batches/s; K server processes of t Rust threads each: "
    "min(K * min(1/G, t/(G+R)), c/(G+R+C)) -- one process: K = 1, t = c; replicas='auto': K and t from "
    "service.sizing.plan_replicas('auto', cores=c) (one per CORES_PER_REPLICA cores, an equal share of threads); "
    "the workaround: c/W (one worker per core)"
)
#: One rayon pool's speedup over one thread at t threads, on one tokenizer instance, as tokenizers #2337 measured
#: its baseline (gpt2, 20k short documents, an Apple M3 Max: 98, 155, 202, 199, 208 MB/s at 1, 2, 4, 8, 14
#: threads; flat past 14): an ASSUMPTION from another machine and tokenizer, the pessimistic case, for the
#: sensitivity columns only. (HF's tokbench reports 60 % efficiency at 8 threads, a speedup of 4.8; #1900 several
#: instances 7-9x one pool on 120 cores.)
POOL_SPEEDUP_2337 = ((1, 1.0), (2, 1.58), (4, 2.06), (8, 2.03), (14, 2.12))
POOL_CURVE = (
    "sensitivity, an assumption: one pool's speedup at t threads as tokenizers #2337's baseline "
    "(1, 1.58, 2.06, 2.03, 2.12 at 1, 2, 4, 8, 14 threads, interpolated, flat past 14; gpt2 short documents on an "
    "M3 Max): one process then also answers at most speedup(t)/R batches/s"
)

ASSUMPTIONS = (
    "a perfect Rust pool: t threads give t times one thread's rate (the best case for one process; tokenizers "
    "#1900 and #2337 report one pool that stops scaling past 4-8 threads, which lowers one process's figure "
    "further and favours small replicas)",
    "one process's Python threads share one GIL, so it answers at most 1/G batches/s, whatever its cores",
    "each replica keeps its t cores busy, its GIL side included, and no more (the cores K x t leaves are left idle: "
    "conservative, the replicas are not pinned)",
    "G, R, C and W per batch do not change with the core count (no memory-bandwidth, cache or NUMA effects); "
    "measured on this shared machine, where sharing the cores inflates them",
    "the workaround's workers scale linearly, one per core; nothing else on the node uses the cores (the "
    "training step, the DataLoader's main process), the same for both",
)


@dataclass(frozen=True)
class Costs:
    """CPU per batch, ms: one server process's GIL side and Rust pool, the client side, and one worker's."""

    gil_ms: float
    rust_ms: float
    client_ms: float
    worker_ms: float

    @property
    def fed_cores(self) -> float:
        """The cores one process keeps busy before its GIL side saturates, its own included: (G+R)/G."""
        return (self.gil_ms + self.rust_ms) / self.gil_ms


def pool_speedup(threads: int) -> float:
    """:data:`POOL_SPEEDUP_2337` at ``threads`` threads: interpolated between its points, flat past the last."""
    points = POOL_SPEEDUP_2337
    if threads >= points[-1][0]:
        return points[-1][1]
    for (t0, s0), (t1, s1) in itertools.pairwise(points):
        if t0 <= threads <= t1:
            return s0 + (s1 - s0) * (threads - t0) / (t1 - t0)
    return points[0][1]


def processes(costs: Costs, count: int, threads: int, cores: float, *, pool_curve: bool = False) -> float:
    """Batches/s of ``count`` server processes of ``threads`` Rust threads each on ``cores`` cores (:data:`MODEL`;
    ``pool_curve``: each pool also bounded as :data:`POOL_CURVE` assumes)."""
    per_process = min(1 / costs.gil_ms, threads / (costs.gil_ms + costs.rust_ms))
    if pool_curve:
        per_process = min(per_process, pool_speedup(threads) / costs.rust_ms)
    node = cores / (costs.gil_ms + costs.rust_ms + costs.client_ms)
    return 1000 * min(count * per_process, node)


def one_process(costs: Costs, cores: int, *, pool_curve: bool = False) -> float:
    """Batches/s of one server process with a Rust thread per core."""
    return processes(costs, 1, cores, cores, pool_curve=pool_curve)


def auto_plan(cores: int, cores_per_replica: int | None = None) -> ReplicaPlan:
    """What ``replicas="auto"`` starts on ``cores`` cores: ``service.sizing``'s plan (with another
    ``cores_per_replica`` than :data:`~service.sizing.CORES_PER_REPLICA`, for a what-if)."""
    return plan_replicas(AUTO, cores=cores, cores_per_replica=cores_per_replica)


def replicas_auto(costs: Costs, cores: int, *, cores_per_replica: int | None = None, pool_curve: bool = False) -> float:
    """Batches/s of the replicas ``replicas="auto"`` starts on ``cores`` cores."""
    plan = auto_plan(cores, cores_per_replica)
    return processes(costs, plan.count, plan.threads_each, cores, pool_curve=pool_curve)


def workaround(costs: Costs, cores: float) -> float:
    """Batches/s of one parallelism-off worker per core."""
    return 1000 * cores / costs.worker_ms


def supported_cores_per_replica(rows: list[Costs]) -> int:
    """The most cores per replica every row's GIL side keeps busy: the smallest (G+R)/G, rounded down (at least 1)."""
    return max(1, math.floor(min(row.fed_cores for row in rows)))


def largest_meeting(rows: list[Costs], cores: int, ratio: float, *, pool_curve: bool = False) -> int | None:
    """The most cores per replica (1 to ``cores``) with which replicas='auto' gives at least ``ratio`` x the
    workaround on ``cores`` cores on every row; None if no value does."""
    for per_replica in range(cores, 0, -1):
        if all(
            replicas_auto(row, cores, cores_per_replica=per_replica, pool_curve=pool_curve)
            >= ratio * workaround(row, cores)
            for row in rows
        ):
            return per_replica
    return None


__all__ = [
    "ASSUMPTIONS",
    "CORES_PER_REPLICA",
    "MODEL",
    "POOL_CURVE",
    "POOL_SPEEDUP_2337",
    "Costs",
    "auto_plan",
    "largest_meeting",
    "one_process",
    "pool_speedup",
    "processes",
    "replicas_auto",
    "supported_cores_per_replica",
    "workaround",
]
