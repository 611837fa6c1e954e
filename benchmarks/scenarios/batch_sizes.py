"""Scenario 1: one client sending batches, service vs in-process, on every language x length cell.

Batches of 256, ``padding="longest"``, truncation, ``max_length=128``: service JSON and service binary
(decoded into torch tensors) vs in-process Rust ``encode_batch`` (``encode_batch_fast`` shown too) and vs
transformers ``tokenizer(texts, ..., return_tensors="pt")``. Plus a batch-size sweep on mixed ~300-character
texts, for the plot.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from benchmarks import corpus
from benchmarks.loadgen import JSON_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE
from benchmarks.profiles import Profile
from benchmarks.progress import log
from benchmarks.scenarios.measuring import OPTIONS_BATCH, Sides, Variant, aggregate, rotated

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
    cells = [(lang, bucket) for lang in corpus.LANGUAGES for bucket in corpus.BUCKETS]
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for round_ in range(profile.rounds):
        log(f"{tokenizer}: scenario 1, round {round_ + 1}/{profile.rounds}")
        methods = rotated(METHODS, round_)
        for lang, bucket in cells:
            for label, where, what in methods:
                runs[(lang, bucket, label)].append(
                    sides.measure(where, what, f"{lang}-{bucket}", BATCH, OPTIONS_BATCH, profile.seconds)
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
                    **aggregate(runs[(lang, bucket, label)]),
                }
            )

    sweep: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for round_ in range(profile.sweep_rounds):
        log(f"{tokenizer}: scenario 1 batch-size sweep, round {round_ + 1}/{profile.sweep_rounds}")
        for batch in profile.sweep_batches:
            for label, where, what in rotated(METHODS, round_):
                sweep[(batch, label)].append(
                    sides.measure(where, what, "mixed-medium", batch, OPTIONS_BATCH, profile.sweep_seconds)
                )
    for (batch, label), batch_runs in sweep.items():
        results["sweep"].append({"tokenizer": tokenizer, "batch": batch, "label": label, **aggregate(batch_runs)})
