"""Scenario 1: one client sending batches of 256 (``padding="longest"``, truncation, ``max_length=128``), service JSON
and binary (decoded into torch tensors) vs in-process ``encode_batch``, ``encode_batch_fast`` and transformers
``__call__``, on every language x length cell; plus a batch-size sweep on mixed ~300-character texts, for the plot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks import corpus
from benchmarks.harness import Row, Scenario, Settings, in_rounds, per_cell_target
from benchmarks.processes import JSON_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE
from benchmarks.scenarios.measuring import BASELINES, OPTIONS_BATCH, Variant, aggregate, one_client_rows, sides

BATCH = 256
METHODS: tuple[Variant, ...] = (
    *BASELINES,
    ("service JSON", "service", JSON_MEDIA_TYPE),
    ("service binary", "service", SAFETENSORS_MEDIA_TYPE),
)
BUCKET_NAMES = {"short": "short <100", "medium": "medium ~300", "long": "long ~1000"}
TARGETS = (  # name, service variant, baseline variant, threshold
    ("s1_binary_vs_encode_batch", "service binary", "in-process encode_batch", 0.9),
    ("s1_binary_vs_encode_batch_fast", "service binary", "in-process encode_batch_fast", 0.8),
    ("s1_binary_vs_call", "service binary", "in-process transformers __call__(pt)", 1.2),
    ("s1_json_vs_encode_batch", "service JSON", "in-process encode_batch", 0.7),
    ("s1_json_vs_encode_batch_fast", "service JSON", "in-process encode_batch_fast", 0.6),
)


@dataclass(frozen=True)
class Counts:
    cells: tuple[tuple[str, str], ...] = tuple((lang, bucket) for lang in corpus.LANGUAGES for bucket in corpus.BUCKETS)
    rounds: int = 3
    seconds: float = 0.4  # per measurement of a cell
    sweep_batches: tuple[int, ...] = (1, 8, 32, 128, 256, 1024)
    sweep_seconds: float = 0.3


FULL = Counts()
SMOKE = Counts(
    cells=(("zh", "short"), ("en", "long")), rounds=1, seconds=0.05, sweep_batches=(1, 256), sweep_seconds=0.05
)


def measure(settings: Settings) -> dict[str, Any]:
    """Every tokenizer's cells and batch-size sweep, on the run's shared worker and server."""
    counts = settings.counts(FULL, SMOKE)
    section: dict[str, Any] = {"options": OPTIONS_BATCH, "batch": BATCH, "cells": [], "sweep": []}
    for tokenizer in settings.tokenizers:
        pair = sides(settings, tokenizer)
        runs = in_rounds(
            METHODS,
            lambda cell, method, pair=pair: pair.measure(method, "-".join(cell), BATCH, OPTIONS_BATCH, counts.seconds),
            counts.rounds,
            f"{tokenizer}: scenario 1",
            points=counts.cells,
        )
        for ((lang, bucket), (label, where, _)), cell_runs in runs.items():
            figures = {"label": label, "where": where, **aggregate(cell_runs)}
            section["cells"].append({"tokenizer": tokenizer, "language": lang, "bucket": bucket, **figures})
        sweep = in_rounds(
            METHODS,
            lambda batch, method, pair=pair: pair.measure(
                method, "mixed-medium", batch, OPTIONS_BATCH, counts.sweep_seconds
            ),
            counts.rounds,
            f"{tokenizer}: scenario 1 batch-size sweep",
            points=counts.sweep_batches,
        )
        for (batch, (label, _, _)), batch_runs in sweep.items():
            section["sweep"].append({"tokenizer": tokenizer, "batch": batch, "label": label, **aggregate(batch_runs)})
        pair.server.sample_memory("after scenario 1")
    return section


def _groups(section: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, dict[str, Any]]]:
    """(tokenizer, language, bucket) -> variant label -> figures."""
    groups: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}
    for cell in section.get("cells", []):
        groups.setdefault((cell["tokenizer"], cell["language"], cell["bucket"]), {})[cell["label"]] = cell
    return groups


def rows(section: dict[str, Any]) -> list[Row]:
    def texts(cell: dict[str, Any]) -> str:
        return f"{cell['language']} {BUCKET_NAMES[cell['bucket']]}"

    return one_client_rows("1", section.get("cells", []), texts, "texts_per_s")


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    tokenizers = {key[0] for key in _groups(section)}
    for tokenizer in sorted(tokenizers):
        groups = {key: group for key, group in _groups(section).items() if key[0] == tokenizer}
        for name, service, base, threshold in TARGETS:
            per_cell = {
                f"{lang} {bucket}": g[service]["texts_per_s"] / g[base]["texts_per_s"]
                for (_, lang, bucket), g in groups.items()
            }
            description = (
                f"scenario 1, {tokenizer}: {service} / {base}, batches of {BATCH} (geometric mean over the "
                f"{len(per_cell)} text cells)"
            )
            out.append(per_cell_target(f"{name}[{tokenizer}]", description, per_cell, threshold))
    return out


SCENARIO = Scenario(
    "1", "one client, batches of 256: service JSON and binary vs in-process, every text cell", measure, rows, targets
)
