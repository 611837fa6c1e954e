"""Scenario 3: a DataLoader fed through the SDK collator vs tokenizing in the collate_fn.

It runs ``python -m benchmarks.dataloader_compare --out <out-dir>/dataloader_compare.json [--smoke]`` in its
own process (:mod:`~benchmarks.scenarios.own_process`): it starts its own servers, sets
``TOKENIZERS_PARALLELISM=false`` and forks DataLoader workers. Bounded by the profile's timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.profiles import Profile
from benchmarks.scenarios.own_process import run_module


def run(out_dir: Path, profile: Profile) -> dict[str, Any]:
    """Run dataloader_compare with the profile's size; its figures, or why it was skipped or failed."""
    return run_module("dataloader_compare", "scenario 3", out_dir, profile.smoke, profile.dataloader_timeout)


def cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-cell figures (workers x batch size) of a scenario-3 section; none when it did not run."""
    return results["data"]["dataloader"] if "data" in results else []
