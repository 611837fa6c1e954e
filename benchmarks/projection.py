"""Scaling past this machine: a model fed by CPU figures measured here (:class:`Costs`: G, R, C and W per batch of 256)
and one Rust pool's curve (a calibration's, else tokenizers #2337's; a perfect pool beside it as the best case).
What it gives is a projection, never a measurement: every table that shows it says so, with :data:`MODEL` and
:data:`ASSUMPTIONS` beside it. ``replicas="auto"`` is sized by ``service.sizing.choose_plan``, the launcher's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.sizing import REFERENCE, Curve, Measurement, Plan, choose_plan

MODEL = (
    "c cores on one node, batches/s; K server processes of t Rust threads each: "
    "min(K * min(1/G, rate(t), t/(G+R)), c/(G+R+C)) -- rate(t): the pool's curve x 1/R; one process: K = 1, t = c; "
    "replicas='auto': K and t from service.sizing.choose_plan (the launcher's planner) on the same figures; the "
    "workaround: c/W (one worker per core)"
)
#: One pool's speedup over one thread at t threads where no calibration is given: tokenizers #2337's baseline
#: (gpt2 short documents, an Apple M3 Max), as service.sizing.REFERENCE holds it -- an ASSUMPTION from another machine.
SPEEDUPS_2337: tuple[tuple[int, float], ...] = tuple((t, REFERENCE.curve.speedup(t)) for t, _ in REFERENCE.curve.points)
#: The best case beside it: t threads give t times one thread's rate.
PERFECT: tuple[tuple[int, float], ...] = ((1, 1.0), (1024, 1024.0))
POOL_2337 = "tokenizers #2337's curve (1, 1.58, 2.06, 2.03, 2.12x at 1, 2, 4, 8, 14 threads; an assumption)"

ASSUMPTIONS = (
    "one process's Python threads share one GIL, so it answers at most 1/G batches/s, whatever its cores",
    "one Rust pool gains as its curve says and no more (flat past its last measured point)",
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


def pool(costs: Costs, speedups: Sequence[tuple[int, float]]) -> Curve:
    """The pool's curve in batches/s: ``speedups`` x one thread's rate (1/R)."""
    return Curve.from_speedups(tuple(speedups), 1000 / costs.rust_ms)


def processes(costs: Costs, count: int, threads: int, cores: float, curve: Curve) -> float:
    """Batches/s of ``count`` server processes of ``threads`` Rust threads each on ``cores`` cores (:data:`MODEL`)."""
    per_process = min(1000 / costs.gil_ms, curve.rate(threads), 1000 * threads / (costs.gil_ms + costs.rust_ms))
    node = 1000 * cores / (costs.gil_ms + costs.rust_ms + costs.client_ms)
    return min(count * per_process, node)


def one_process(costs: Costs, cores: int, curve: Curve) -> float:
    """Batches/s of one server process with a Rust thread per core."""
    return processes(costs, 1, cores, cores, curve)


def auto_plan(costs: Costs, cores: int, curve: Curve) -> Plan:
    """What ``replicas="auto"`` starts on ``cores`` cores: the launcher's planner on these figures (no memory cap)."""
    return choose_plan(Measurement(costs.gil_ms, curve, costs.worker_ms, 0), cores)


def replicas_auto(costs: Costs, cores: int, curve: Curve) -> float:
    """Batches/s of the replicas ``replicas="auto"`` starts on ``cores`` cores."""
    plan = auto_plan(costs, cores, curve)
    return processes(costs, plan.replicas, plan.threads, cores, curve)


def workaround(costs: Costs, cores: float) -> float:
    """Batches/s of one parallelism-off worker per core."""
    return 1000 * cores / costs.worker_ms
