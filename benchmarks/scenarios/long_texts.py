"""Scenario 4: long-text scaling, tokens/s vs text length (100 to 50k characters, no truncation, ~256k characters
per request), one client: service binary vs in-process ``encode_batch``, ``encode_batch_fast`` and ``__call__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.harness import Row, Scenario, Settings, in_rounds
from benchmarks.processes import SAFETENSORS_MEDIA_TYPE
from benchmarks.scenarios import measuring
from benchmarks.scenarios.measuring import BASELINES, OPTIONS_LONG, Variant, aggregate, long_text_batch, sides

METHODS: tuple[Variant, ...] = (*BASELINES, ("service binary", "service", SAFETENSORS_MEDIA_TYPE))


@dataclass(frozen=True)
class Counts:
    rounds: int = 2
    seconds: float = 0.8


FULL, SMOKE = Counts(), Counts(rounds=1, seconds=0.05)


def measure(settings: Settings) -> dict[str, Any]:
    """Every tokenizer at every text length, on the run's shared worker and server."""
    counts = settings.counts(FULL, SMOKE)
    lengths = settings.counts(measuring.TEXTS_FULL, measuring.TEXTS_SMOKE).long_lengths
    section: dict[str, Any] = {"options": OPTIONS_LONG, "points": []}
    for tokenizer in settings.tokenizers:
        pair = sides(settings, tokenizer)
        runs = in_rounds(
            METHODS,
            lambda chars, method, pair=pair: pair.measure(
                method, f"chars-{chars}", long_text_batch(chars), OPTIONS_LONG, counts.seconds
            ),
            counts.rounds,
            f"{tokenizer}: scenario 4",
            points=lengths,
        )
        for (chars, (label, where, _)), point_runs in runs.items():
            figures = {"label": label, "where": where, **aggregate(point_runs)}
            section["points"].append(
                {"tokenizer": tokenizer, "chars": chars, "texts_per_request": long_text_batch(chars), **figures}
            )
        pair.server.sample_memory("after scenario 4")
        section.setdefault("servers", []).append(pair.server.describe())
    return section


def rows(section: dict[str, Any]) -> list[Row]:
    def texts(point: dict[str, Any]) -> str:
        return f"mixed {point['chars']} chars, {point['texts_per_request']}/req"

    return measuring.one_client_rows("4", section.get("points", []), texts, "tokens_per_s")


SCENARIO = Scenario(
    "4", "long texts: tokens/s vs text length, no truncation, service binary vs in-process", measure, rows
)
