"""How the scenarios measure: the request options, interleaved rounds, one-client measurements of either
side (the in-process worker or the service), and the medians over rounds.

Measurements are interleaved in rounds -- each round measures every variant once, in rotated order, so no
variant always runs first or last -- and the median over rounds is reported; ratios are ratios of medians.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from benchmarks import corpus
from benchmarks.loadgen import percentiles
from benchmarks.processes import BenchServer, InProcessWorker
from benchmarks.progress import log
from benchmarks.service_client import ServiceClient

OPTIONS_BATCH: dict[str, Any] = {"padding": "longest", "truncation": True, "max_length": 128}  # scenarios 1, 2
OPTIONS_LONG: dict[str, Any] = {"padding": "longest", "truncation": False}  # scenario 4: whole texts

# A variant measured from one client: (label, where: "inprocess" or "service", method or media type)
Variant = tuple[str, str, str]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def rotated(items: tuple[T, ...], shift: int) -> tuple[T, ...]:
    """``items`` rotated left by ``shift``: round ``shift`` measures the variants in this order."""
    shift %= len(items)
    return items[shift:] + items[:shift]


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median rates over rounds; latencies pooled; CPU per request summed over rounds."""
    batches = sum(r["batches"] for r in runs)
    return {
        "texts_per_s": statistics.median(r["texts"] / r["seconds"] for r in runs),
        "tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in runs),
        "rounds_texts_per_s": [round(r["texts"] / r["seconds"], 1) for r in runs],
        "latency_ms": percentiles([x for r in runs for x in r["latencies"]]),
        "requests": batches,
        "server_or_worker_cpu_ms_per_request": 1000 * sum(r["cpu"]["watched_cpu_seconds"] for r in runs) / batches,
        "client_cpu_ms_per_request": 1000 * sum(r["cpu"]["client_cpu_seconds"] for r in runs) / batches,
        "other_cpu_cores": max(r["cpu"]["other_cpu_cores"] for r in runs),
    }


@dataclass
class Sides:
    """The two sides of a one-client comparison -- the in-process worker and a server -- on the run's text sets."""

    worker: InProcessWorker
    server: BenchServer
    client: ServiceClient
    sets: dict[str, list[str]]
    max_batches: int

    def measure(
        self, where: str, what: str, set_name: str, batch: int, options: dict[str, Any], seconds: float
    ) -> dict[str, Any]:
        """One measurement of one variant: ``what`` is the in-process method or the service's media type."""
        if where == "inprocess":
            return self.worker.measure(what, set_name, batch, options, seconds, self.max_batches)
        batches = corpus.batches_of(self.sets[set_name], batch)
        return self.client.measure(self.server, set_name, batches, options, what, seconds, self.max_batches)

    def measure_in_rounds(
        self,
        methods: tuple[Variant, ...],
        points: dict[K, tuple[str, int]],
        options: dict[str, Any],
        seconds: float,
        rounds: int,
        progress: str,
    ) -> dict[tuple[K, str], list[dict[str, Any]]]:
        """Every variant at every point, in ``rounds`` interleaved rounds (variants in rotated order).

        ``points`` maps a point (a text cell, a batch size, a text length) to the text set and the batch size
        measured there. Returns the measurements by (point, variant label), one per round.
        """
        runs: dict[tuple[K, str], list[dict[str, Any]]] = defaultdict(list)
        for round_ in range(rounds):
            log(f"{progress}, round {round_ + 1}/{rounds}")
            order = rotated(methods, round_)
            for point, (set_name, batch) in points.items():
                for label, where, what in order:
                    runs[(point, label)].append(self.measure(where, what, set_name, batch, options, seconds))
        return runs
