"""Scenario 1: one client sending batches, service vs in-process, on every language x length cell.

Batches of 256, ``padding="longest"``, truncation, ``max_length=128``: service JSON and service binary
(decoded into torch tensors) vs in-process Rust ``encode_batch`` (``encode_batch_fast`` shown too) and vs
transformers ``tokenizer(texts, ..., return_tensors="pt")``. Plus a batch-size sweep on mixed ~300-character
texts, for the plot.
"""

from __future__ import annotations

from typing import Any

from benchmarks import corpus
from benchmarks.loadgen import JSON_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE
from benchmarks.profiles import Profile
from benchmarks.scenarios.measuring import OPTIONS_BATCH, Sides, Variant, aggregate

BATCH = 256
METHODS: tuple[Variant, ...] = (
    ("in-process encode_batch", "inprocess", "encode_batch"),
    ("in-process encode_batch_fast", "inprocess", "encode_batch_fast"),
    ("in-process transformers __call__(pt)", "inprocess", "call"),
    ("service JSON", "service", JSON_MEDIA_TYPE),
    ("service binary", "service", SAFETENSORS_MEDIA_TYPE),
)


def empty_results() -> dict[str, Any]:
    """The scenario's section of the results, before any tokenizer is measured."""
    return {"options": OPTIONS_BATCH, "batch": BATCH, "cells": [], "sweep": []}


def measure(results: dict[str, Any], tokenizer: str, profile: Profile, sides: Sides) -> None:
    """Measure one tokenizer's cells and batch-size sweep; append them to ``results`` (this scenario's section)."""
    cells = {(lang, bucket): (f"{lang}-{bucket}", BATCH) for lang in corpus.LANGUAGES for bucket in corpus.BUCKETS}
    runs = sides.measure_in_rounds(
        METHODS, cells, OPTIONS_BATCH, profile.seconds, profile.rounds, f"{tokenizer}: scenario 1"
    )
    for lang, bucket in cells:
        for label, where, _ in METHODS:
            results["cells"].append(
                {
                    "tokenizer": tokenizer,
                    "language": lang,
                    "bucket": bucket,
                    "label": label,
                    "where": where,
                    **aggregate(runs[((lang, bucket), label)]),
                }
            )

    batches = {batch: ("mixed-medium", batch) for batch in profile.sweep_batches}
    sweep = sides.measure_in_rounds(
        METHODS,
        batches,
        OPTIONS_BATCH,
        profile.sweep_seconds,
        profile.sweep_rounds,
        f"{tokenizer}: scenario 1 batch-size sweep",
    )
    for (batch, label), batch_runs in sweep.items():
        results["sweep"].append({"tokenizer": tokenizer, "batch": batch, "label": label, **aggregate(batch_runs)})
