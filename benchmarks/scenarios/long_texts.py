"""Scenario 4: long-text scaling, tokens/s vs text length (100 to 50k characters, no truncation), one client.

Service binary vs in-process ``encode_batch`` (and ``encode_batch_fast``), ~256k characters per request.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from benchmarks.profiles import Profile
from benchmarks.progress import log
from benchmarks.scenarios import batch_sizes
from benchmarks.scenarios.measuring import OPTIONS_LONG, Sides, Variant, aggregate, rotated
from benchmarks.textsets import long_text_batch

# encode_batch, encode_batch_fast, service binary
METHODS: tuple[Variant, ...] = (batch_sizes.METHODS[0], batch_sizes.METHODS[1], batch_sizes.METHODS[4])


def empty_results() -> dict[str, Any]:
    """The scenario's section of the results, before any tokenizer is measured."""
    return {"options": OPTIONS_LONG, "points": []}


def measure(results: dict[str, Any], tokenizer: str, profile: Profile, sides: Sides) -> None:
    """Measure one tokenizer at every text length; append the points to ``results`` (this scenario's section)."""
    runs: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for round_ in range(profile.long_rounds):
        log(f"{tokenizer}: scenario 4, round {round_ + 1}/{profile.long_rounds}")
        for chars in profile.long_lengths:
            for label, where, what in rotated(METHODS, round_):
                runs[(chars, label)].append(
                    sides.measure(
                        where, what, f"chars-{chars}", long_text_batch(chars), OPTIONS_LONG, profile.long_seconds
                    )
                )
    for (chars, label), point_runs in runs.items():
        results["points"].append(
            {
                "tokenizer": tokenizer,
                "chars": chars,
                "texts_per_request": long_text_batch(chars),
                "label": label,
                **aggregate(point_runs),
            }
        )
