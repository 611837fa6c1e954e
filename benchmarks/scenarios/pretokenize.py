"""Scenario 6: pre-tokenizing a JSON Lines corpus of real text, default tokenizer -- ``tokenizer-service pretokenize``
against the run's shared server vs the same reader and writer with the Rust tokenizer in-process (``encode_batch``,
``encode_batch_fast``) vs ``datasets.map(num_proc=2)``, each run a process of its own (``benchmarks.pretokenize_runs``),
in interleaved rounds; then the service worker's peak RSS alone on a large corpus (1 GB in the full run, Parquet).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    Row,
    Scenario,
    Settings,
    busy_note,
    call_in_own_process,
    human,
    in_rounds,
    log,
    machine_noise,
    medians,
    target,
)
from benchmarks.processes import tokenizer_dir
from benchmarks.scenarios.measuring import shared_server
from testkit import corpora

LABELS = {
    "service": "service: pretokenize worker (async, ragged binary)",
    "encode_batch": "in-process encode_batch, same reader/writer",
    "encode_batch_fast": "in-process encode_batch_fast, same reader/writer",
    "datasets_map": "datasets.map(num_proc=2), tokenizer in-process",
}


@dataclass(frozen=True)
class Counts:
    corpus_bytes: int = 32 * 2**20  # every method pre-tokenizes this
    rounds: int = 2
    large_bytes: int = 2**30  # the memory case: the service worker alone on this much input
    timeout: float = 3600.0  # per run


FULL, SMOKE = Counts(), Counts(corpus_bytes=512 * 1024, rounds=1, large_bytes=2 * 2**20, timeout=120.0)


def pretokenize_run(what: str, args: list[Any], timeout: float) -> dict[str, Any]:
    """One ``benchmarks.pretokenize_runs`` run in its own process: its figures, with the CPU other processes used
    just before (the run itself busies every core)."""

    noise = machine_noise(0.3)
    result: dict[str, Any] = call_in_own_process("benchmarks.pretokenize_runs:main", *args, timeout=timeout)
    result["other_cpu_cores"] = noise
    result["tokens_per_s"] = result["tokens"] / result["seconds"]
    result["documents_per_s"] = result["documents"] / result["seconds"]
    log(
        f"{what}: {result['tokens_per_s'] / 1e6:.2f}M tokens/s, {result['seconds']:.1f} s, "
        f"peak RSS {result['peak_rss_mb']:.0f} MB"
    )
    return result


def by_variant(runs: dict[str, list[dict[str, Any]]], labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per variant: medians over its rounds, the most memory seen, its label."""
    return {
        name: {**medians(runs[name]), "label": labels[name], "peak_rss_mb": max(r["peak_rss_mb"] for r in runs[name])}
        for name in labels
    }


def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(FULL, SMOKE)
    folder = settings.work_dir / "pretokenize"
    folder.mkdir(exist_ok=True)
    corpus = folder / "corpus.jsonl"
    documents = corpora.write_jsonl(corpus, counts.corpus_bytes, fields=False)
    section: dict[str, Any] = {
        "corpus": {"bytes": corpus.stat().st_size, "documents": documents, "tokenizer": "default"}
    }
    url = shared_server(settings, "default").url
    tokenizer = str(tokenizer_dir("default"))

    def one(method: str, source: Path, output_format: str) -> dict[str, Any]:
        out = folder / f"{method}-out"
        args = [method, str(source), str(out), url, tokenizer, output_format]
        try:
            return pretokenize_run(f"scenario 6: {method}", args, counts.timeout)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    runs = in_rounds(tuple(LABELS), lambda method: one(method, corpus, "flat"), counts.rounds, "scenario 6")
    section["medians"] = by_variant(runs, LABELS)
    corpus.unlink()
    large = folder / "large.jsonl"
    log(f"scenario 6: writing a {counts.large_bytes / 2**20:.0f} MiB corpus for the memory case")
    documents = corpora.write_jsonl(large, counts.large_bytes, seed=7, fields=False)
    section["memory"] = {
        **one("service", large, "parquet"),
        "input_bytes": counts.large_bytes,
        "input_documents": documents,
    }
    large.unlink()
    return section


def rows(section: dict[str, Any]) -> list[Row]:
    if "medians" not in section:
        return []
    corpus, found, memory = section["corpus"], section["medians"], section["memory"]
    out: list[Row] = []
    for method, m in found.items():
        ratio = "baseline" if method == "encode_batch" else ""
        if method == "service":
            pairs = (("encode_batch", "enc"), ("datasets_map", "map"))
            ratio = ", ".join(f"{m['tokens_per_s'] / found[b]['tokens_per_s']:.2f}x {s}" for b, s in pairs)
        out.append(
            {
                "scenario": "6",
                "texts": f"{corpus['bytes'] / 2**20:.0f} MiB JSONL, {corpus['documents']:,} docs",
                "variant": m["label"],
                "rate": human(m["documents_per_s"]) + " docs/s",
                "tokens_rate": m["tokens_per_s"],
                "ratio": ratio,
                "note": "; ".join(
                    filter(None, [f"peak RSS {m['peak_rss_mb']:.0f} MB", busy_note(m["other_cpu_cores"])])
                ),
            }
        )
    variant = f"service worker alone, {memory['format']}"
    row = {"scenario": "6", "texts": f"{memory['input_bytes'] / 2**20:.0f} MiB JSONL", "variant": variant}
    return [*out, {**row, "tokens_rate": memory["tokens_per_s"], "note": f"peak RSS {memory['peak_rss_mb']:.0f} MB"}]


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    if "medians" not in section:
        return []
    found, memory = section["medians"], section["memory"]
    mib = section["corpus"]["bytes"] / 2**20
    what = f"scenario 6: pre-tokenizing {mib:.0f} MiB of JSON Lines, tokens/s of the pretokenize worker"
    service = found["service"]["tokens_per_s"]
    return [
        target(
            "s6_service_vs_encode_batch",
            f"{what} / in-process encode_batch (same reader and writer)",
            service / found["encode_batch"]["tokens_per_s"],
            0.8,
        ),
        target(
            "s6_service_vs_datasets_map",
            f"{what} / datasets.map(num_proc=2)",
            service / found["datasets_map"]["tokens_per_s"],
            1.0,
        ),
        target(
            "s6_worker_peak_rss_mb",
            "scenario 6: peak RSS (VmHWM) of the pretokenize worker on "
            f"{memory['input_bytes'] / 2**20:.0f} MiB, {memory['format']} format",
            memory["peak_rss_mb"],
            500.0,
            higher_is_better=False,
        ),
    ]


SCENARIO = Scenario(
    "6",
    "pre-tokenizing a JSON Lines corpus: the pretokenize worker vs in-process, and its memory",
    measure,
    rows,
    targets,
)
