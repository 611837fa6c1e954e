"""Scenario 8: conversations -- ``/chat/encode`` against in-process ``apply_chat_template`` on the same
conversations, and the chat collator in DataLoader workers against ``apply_chat_template`` in the collate_fn.

It runs ``python -m benchmarks.chat_compare --out <out-dir>/chat_compare.json [--smoke]`` in its own process
(:mod:`~benchmarks.scenarios.own_process`): it starts its own server and forks DataLoader workers. Bounded by
the profile's timeout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.profiles import Profile
from benchmarks.scenarios.own_process import run_module


def run(out_dir: Path, profile: Profile) -> dict[str, Any]:
    """Run chat_compare with the profile's size; its figures, or why it was skipped or failed."""
    return run_module("chat_compare", "scenario 8", out_dir, profile.smoke, profile.chat_timeout)


def throughput(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """batch size -> its figures (conversations/s per variant, ratios); empty when the scenario did not run."""
    return results["data"]["throughput"] if "data" in results else {}


def loader_cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The DataLoader cells; none when the scenario did not run."""
    return results["data"]["dataloader"] if "data" in results else []
