"""Scenario 4: long-text scaling, tokens/s vs text length (100 to 50k characters, no truncation), one client.

Service binary vs in-process ``encode_batch``, ``encode_batch_fast`` and transformers ``__call__``, ~256k
characters per request.
"""

from __future__ import annotations

from typing import Any

from benchmarks.profiles import Profile
from benchmarks.scenarios import batch_sizes
from benchmarks.scenarios.measuring import OPTIONS_LONG, Sides, Variant, aggregate
from benchmarks.textsets import long_text_batch

# encode_batch, encode_batch_fast, transformers __call__, service binary
METHODS: tuple[Variant, ...] = (*batch_sizes.METHODS[:3], batch_sizes.METHODS[4])


def empty_results() -> dict[str, Any]:
    """The scenario's section of the results, before any tokenizer is measured."""
    return {"options": OPTIONS_LONG, "points": []}


def measure(results: dict[str, Any], tokenizer: str, profile: Profile, sides: Sides) -> None:
    """Measure one tokenizer at every text length; append the points to ``results`` (this scenario's section)."""
    lengths = {chars: (f"chars-{chars}", long_text_batch(chars)) for chars in profile.long_lengths}
    runs = sides.measure_in_rounds(
        METHODS, lengths, OPTIONS_LONG, profile.long_seconds, profile.long_rounds, f"{tokenizer}: scenario 4"
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
