"""Scenario 5: less padding -- random batches vs token-budget batches vs packed batches through the service, at
the same token budget, and what the counts they need cost (``/lengths`` vs ``/encode``).

It runs ``python -m benchmarks.padding_compare --out <out-dir>/padding_compare.json [--smoke]`` in its own
process (:mod:`~benchmarks.scenarios.own_process`): it starts its own server and forks DataLoader workers.
Bounded by the profile's timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.profiles import Profile
from benchmarks.scenarios.own_process import run_module

#: The count variant that is tokenizing alone, in its own process, no HTTP: what any exact count must pay.
IN_PROCESS_COUNT = "in-process encode_batch_fast"


def run(out_dir: Path, profile: Profile) -> dict[str, Any]:
    """Run padding_compare with the profile's size; its figures, or why it was skipped or failed."""
    return run_module("padding_compare", "scenario 5", out_dir, profile.smoke, profile.padding_timeout)


def loops(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """loop ("training step", "loader only") -> variant -> its figures; empty when the scenario did not run."""
    return results["data"]["dataloader"]["loops"] if "data" in results else {}


def counts(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """text set -> its count figures (``texts``, ``distinct``, ``variants``); empty when it did not run."""
    return results["data"]["counts"] if "data" in results else {}
