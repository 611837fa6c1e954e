"""Scenario "split": one server process's CPU per batch split by thread -- the GIL side (its Python threads)
against the Rust pool, and one parallelism-off worker beside them -- on the corpora of issue 33's table, and
one process's ceiling (1 / GIL side).

It runs ``python -m benchmarks.cpu_split --out <out-dir>/cpu_split.json [--smoke]`` in its own process
(:mod:`~benchmarks.scenarios.own_process`): it starts its own instrumented servers and worker. Bounded by the
profile's timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.profiles import Profile
from benchmarks.scenarios.own_process import run_module


def run(out_dir: Path, profile: Profile) -> dict[str, Any]:
    """Run cpu_split with the profile's size; its figures, or why it failed."""
    return run_module("cpu_split", "scenario split", out_dir, profile.smoke, profile.split_timeout, needs_torch=False)


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per corpus: its label, and the figures of this checkout's server and of the worker; none if it did not run."""
    if "data" not in results:
        return []
    checkout = results["data"]["meta"]["checkouts"][0]
    return [
        {"label": row["label"], "server": row["figures"][checkout], "worker": row["figures"]["1 worker"]}
        for row in results["data"]["corpora"]
    ]
