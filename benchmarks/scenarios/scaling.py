"""Scenario "scaling": scaling with the node, measured and modelled -- per corpus, one process's CPU split (GIL
side, Rust pool), throughput on 1 and 2 cores of one replica x 2 threads, 2 replicas x 1 thread and the
workaround (2 parallelism-off processes), for batches of 256 and through the DataLoader collator, and a
projection to 16, 64 and 128 cores with its model (``benchmarks.scaling``, ``benchmarks.projection``).

It runs ``python -m benchmarks.scaling --out <out-dir>/scaling.json [--smoke]`` in its own process
(:mod:`~benchmarks.scenarios.own_process`): it launches its own services, pins processes to cores and forks
DataLoader workers. Without torch it measures the batches of 256 only. Bounded by the profile's timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.profiles import Profile
from benchmarks.scenarios.own_process import run_module


def run(out_dir: Path, profile: Profile) -> dict[str, Any]:
    """Run benchmarks.scaling with the profile's size; its figures, or why it failed."""
    return run_module("scaling", "scenario scaling", out_dir, profile.smoke, profile.scaling_timeout, needs_torch=False)


def corpora(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per corpus: its split, measured cells and ratios, model inputs and projection; none if it did not run."""
    return results["data"]["corpora"] if "data" in results else []


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Its targets, one per row (measured: 2 replicas / 1; projected: replicas='auto' / the workaround)."""
    return results["data"]["targets"] if "data" in results else []
