"""How many server processes (replicas) to run on a machine, and how many Rust threads each: chosen from what one
tokenizer does there. One process serves at most 1 / (its GIL-held time per batch) batches a second, and one Rust
pool stops gaining somewhere past a few threads (tokenizers #1900, #2337); the cores beyond what one process keeps
busy are fed by replicas, each the one server (one tokenizer, never forks). The model, in batches a second:

    one process of t threads:  min(1/G, rate(t), t/(G + R))     K of them on c cores: min(K x that, c/(G + R))

G is one server process's GIL side per batch, R the Rust pool's CPU per batch on one thread and rate(t) the pool's
measured rate at t threads (:class:`Curve`). :func:`choose_plan` tries every t and the most replicas of it the cores
and the memory limit allow, and keeps the best; where plans come within :data:`TIE` of it, the one with the fewest
replicas (each holds its own tokenizer and memory). ``tokenizer-service calibrate`` measures G, R, rate(t) and a
replica's memory on the machine it runs on; without a calibration, :data:`REFERENCE` stands in for them (the
evidence, labelled so, never a figure for this machine). Standard library only: the launcher imports it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Final

from .machine import available_cpus, memory_limit

__all__ = [
    "AUTO",
    "Curve",
    "MODEL",
    "Measurement",
    "Plan",
    "REFERENCE",
    "ReplicaPlan",
    "TIE",
    "check_replicas",
    "choose_plan",
    "plan_replicas",
    "share_of_cores",
    "throughput",
    "workaround_throughput",
]

#: The value of ``replicas`` that sizes the count from a measurement of this machine (see ``calibrate``).
AUTO: Final = "auto"
#: Plans within this share of the best modelled throughput count as equal; the fewest replicas among them wins.
TIE: Final = 0.03
MIB: Final = 1 << 20
#: Memory a replica needs beyond its resting size: the smallest request budget the server gives itself.
REPLICA_HEADROOM: Final = 64 * MIB
#: The model, as every report prints it beside what it derives.
MODEL: Final = (
    "one process of t Rust threads serves min(1/G, rate(t), t/(G+R)) batches/s; K of them on c cores min(K x that, "
    "c/(G+R)); the workaround c/W"
)
#: Where a plan without a calibration comes from, as the log line says it.
DEFAULT_SOURCE: Final = "the default plan: not measured here (service.sizing.REFERENCE; `tokenizer-service calibrate`)"


@dataclass(frozen=True)
class Curve:
    """One tokenizer instance's Rust pool: batches a second of Rust work at ``t`` threads, for measured ``t``
    (ascending, 1 first). Between points it is interpolated; past the last, flat (never extrapolated upwards)."""

    points: tuple[tuple[int, float], ...]

    def __post_init__(self) -> None:
        if not self.points or self.points[0][0] != 1:
            raise ValueError(f"a curve starts at 1 thread, not {self.points[:1]}")
        threads = [t for t, _ in self.points]
        if threads != sorted(set(threads)) or any(rate <= 0 for _, rate in self.points):
            raise ValueError(f"a curve's threads ascend and its rates are positive: {self.points}")

    @classmethod
    def from_speedups(cls, speedups: tuple[tuple[int, float], ...], one_thread_rate: float) -> Curve:
        """A curve from speedups over one thread (a published figure) and the rate of one thread."""
        return cls(tuple((t, one_thread_rate * s) for t, s in speedups))

    def rate(self, threads: int) -> float:
        points = self.points
        if threads >= points[-1][0]:
            return points[-1][1]
        for (t0, r0), (t1, r1) in itertools.pairwise(points):
            if t0 <= threads <= t1:
                return r0 + (r1 - r0) * (threads - t0) / (t1 - t0)
        return points[0][1]

    def speedup(self, threads: int) -> float:
        return self.rate(threads) / self.rate(1)


@dataclass(frozen=True)
class Measurement:
    """What the planner needs of one tokenizer on one machine, per batch of texts: the GIL side of one server
    process (ms of CPU), its Rust pool's curve (batches/s of wall time), one parallelism-off worker's CPU (the
    workaround's, ms), a replica's resident memory (bytes) and, where measured, the pool's CPU on one thread."""

    gil_ms: float
    curve: Curve
    worker_ms: float
    replica_bytes: int
    rust_cpu_ms: float | None = None  # the pool's CPU per batch, where measured apart from its wall-time rate

    @property
    def rust_ms(self) -> float:
        """The Rust pool's CPU per batch on one thread: as measured, else its rate's (1 / rate(1))."""
        return self.rust_cpu_ms if self.rust_cpu_ms is not None else 1000 / self.curve.rate(1)


#: The evidence, where nothing was measured on this machine (LABELLED: not this machine). The pool as tokenizers
#: #2337 measured its baseline (gpt2, short documents, an Apple M3 Max: 1, 1.58, 2.06, 2.03, 2.12x one thread at 1,
#: 2, 4, 8, 14 threads); G, R and W of this project's tightest row (short Chinese reviews, the embedded WordPiece,
#: batches of 256: G 3.09 ms, R 12.8 ms, W 15.9 ms, on the 2-core machine of docs/guides/performance.md); a replica
#: of 114 MB (the embedded default, no torch, measured there too). On it the planner picks 2 threads per replica
#: (1.58x one thread for twice the cores: within TIE of one thread each, with half the replicas).
REFERENCE: Final = Measurement(
    gil_ms=3.09,
    curve=Curve.from_speedups(((1, 1.0), (2, 1.58), (4, 2.06), (8, 2.03), (14, 2.12)), 1000 / 12.8),
    worker_ms=15.9,
    replica_bytes=114 * MIB,
)


def process_rate(measurement: Measurement, threads: int) -> float:
    """Batches a second one server process of ``threads`` Rust threads serves, on ``threads`` cores."""
    gil, rust = measurement.gil_ms, measurement.rust_ms
    return min(1000 / gil, measurement.curve.rate(threads), 1000 * threads / (gil + rust))


def throughput(measurement: Measurement, replicas: int, threads: int, cores: int) -> float:
    """Batches a second of ``replicas`` processes of ``threads`` threads each on ``cores`` cores (the model)."""
    node = 1000 * cores / (measurement.gil_ms + measurement.rust_ms)
    return min(replicas * process_rate(measurement, threads), node)


def workaround_throughput(measurement: Measurement, cores: int) -> float:
    """Batches a second of the workaround: one parallelism-off worker per core, tokenizing in-process."""
    return 1000 * cores / measurement.worker_ms


@dataclass(frozen=True)
class Plan:
    """``replicas`` processes of ``threads`` Rust threads each on ``cores`` cores, and what the model expects of it."""

    replicas: int
    threads: int
    cores: int
    batches_per_second: float  # the model's, for this plan
    workaround_per_second: float  # the model's, for one parallelism-off worker per core
    memory_cap: int | None  # the most replicas the memory limit holds, where it binds the choice

    @property
    def versus_workaround(self) -> float:
        return self.batches_per_second / self.workaround_per_second


def memory_cap(measurement: Measurement, memory_bytes: int | None) -> int | None:
    """The most replicas ``memory_bytes`` holds (each its resting size + :data:`REPLICA_HEADROOM`); None: no limit."""
    if memory_bytes is None:
        return None
    return max(1, memory_bytes // (measurement.replica_bytes + REPLICA_HEADROOM))


def choose_plan(measurement: Measurement, cores: int, memory_bytes: int | None = None) -> Plan:
    """The replicas x threads the model expects most of on ``cores`` cores within ``memory_bytes`` (see the module):
    every thread count from 1 to ``cores``, each with as many replicas as the cores and the memory allow; the
    fewest replicas among those within :data:`TIE` of the best."""
    if cores < 1:
        raise ValueError(f"cores must be at least 1, not {cores}")
    cap = memory_cap(measurement, memory_bytes)
    candidates = []
    for threads in range(1, cores + 1):
        count = cores // threads if cap is None else min(cores // threads, cap)
        candidates.append((throughput(measurement, count, threads, cores), count, threads))
    best = max(value for value, _, _ in candidates)
    value, count, threads = min(
        (c for c in candidates if c[0] >= (1 - TIE) * best), key=lambda c: (c[1], c[2])
    )  # fewest replicas, then fewest threads
    binds = cap is not None and cap < cores // threads
    return Plan(count, threads, cores, value, workaround_throughput(measurement, cores), cap if binds else None)


# -- replicas as asked for --------------------------------------------------------------------------------
def check_replicas(replicas: object) -> int | str:
    """``replicas`` (a whole number >= 1, or ``"auto"``), or a ValueError (TypeError for a non-number) saying what
    to write instead."""
    if isinstance(replicas, str) and replicas.strip().lower() == AUTO:
        return AUTO
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        error = ValueError if isinstance(replicas, (str, float)) else TypeError
        raise error(
            f"replicas must be a whole number of server processes (1 or more) or {AUTO!r} (sized from a calibration "
            f"of this machine: `tokenizer-service calibrate`), not {replicas!r}"
        )
    if replicas < 1:
        raise ValueError(
            f"replicas must be at least 1 (one server process), not {replicas}; {AUTO!r} sizes them for this machine"
        )
    return replicas


@dataclass(frozen=True)
class ReplicaPlan:
    """How many replicas to start on ``cores`` cores with how many Rust threads each, where the plan came from,
    and what it costs when that is more than the cores."""

    count: int
    cores: int
    threads: int | None  # each replica's Rust threads when chosen or asked for; None: its share of the cores
    warning: str | None  # set when it asks for more processes or threads than there are cores
    source: str = "asked for"  # one line: where the count and threads came from

    @property
    def threads_each(self) -> int:
        return self.threads if self.threads is not None else share_of_cores(self.cores, self.count)

    @property
    def summary(self) -> str:
        """``2 replicas x 4 Rust threads on 8 cores, from <source>``: the line a launch logs."""
        each = self.threads_each
        return (
            f"{self.count} replica{'s' * (self.count != 1)} x {each} Rust thread{'s' * (each != 1)} on {self.cores} "
            f"core{'s' * (self.cores != 1)}, from {self.source}"
        )


def share_of_cores(cores: int, replicas: int) -> int:
    """An equal share of ``cores`` for one of ``replicas`` processes, at least 1."""
    return max(1, cores // max(1, replicas))


def plan_replicas(
    replicas: object,
    threads: int | None = None,
    cores: int | None = None,
    *,
    chosen: Plan | None = None,
    source: str | None = None,
    memory_bytes: int | None = None,
) -> ReplicaPlan:
    """The replicas ``replicas`` asks for on ``cores`` cores (default :func:`available_cpus`), each with ``threads``
    Rust threads (default: its share). For ``"auto"``, ``chosen`` is the plan of a calibration (``source`` says
    which); without one, :func:`choose_plan` on :data:`REFERENCE` within ``memory_bytes`` (default
    :func:`memory_limit`)."""
    asked = check_replicas(replicas)
    cores = available_cpus() if cores is None else cores
    if asked == AUTO:
        if chosen is None:
            chosen = choose_plan(REFERENCE, cores, memory_limit() if memory_bytes is None else memory_bytes)
            source = source or DEFAULT_SOURCE
        count = chosen.replicas
        threads = chosen.threads if threads is None else threads
    else:
        count = int(asked)
    warning = None
    if count > cores:
        warning = (
            f"replicas={count} is more than the {cores} cores this process may use: each replica loads its own "
            f"tokenizer and holds its own memory budget, and their event loops take turns on the same cores, so "
            f"throughput is no higher than with {cores} and memory is {count - cores} tokenizer(s) larger"
        )
    elif threads is not None and count * threads > cores:
        warning = (
            f"replicas={count} with threads={threads} each runs {count * threads} Rust threads on {cores} cores: "
            f"they contend for the cores (leave threads unset for an equal share: {share_of_cores(cores, count)} each)"
        )
    return ReplicaPlan(count, cores, threads, warning, source or "asked for")
