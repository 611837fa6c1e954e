"""Scenario 6: pre-tokenizing a corpus -- ``tokenizer-service pretokenize`` vs doing it in-process.

One JSON Lines corpus of real text (``testkit.corpora``: Chinese reviews and English prose, documents of
one to four texts), the default tokenizer, the same cores. Each run is its own process
(``python -m benchmarks.pretokenize_runs``), so imports and memory are its own; the runs are interleaved in
rounds (each round runs every method once, in rotated order) and the median per method is reported:

- ``service``: the pretokenize worker against a server of this run (flat format);
- ``encode_batch`` / ``encode_batch_fast``: the same reading and writing with the Rust tokenizer in the
  worker's process (Rust parallelism on);
- ``datasets_map``: ``load_dataset("json")`` + ``Dataset.map(tokenizer, batched=True, num_proc=2)``.

Then the memory case: the service worker alone on a large corpus (1 GB in the full run) in the Parquet
format (the default, whose writer needs the most memory): its peak RSS (VmHWM) against the 500 MB target.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.machine import machine_noise
from benchmarks.processes import BenchServer, tokenizer_dir
from benchmarks.profiles import Profile
from benchmarks.progress import log
from testkit import corpora
from testkit.servers import REPO

METHODS = ("service", "encode_batch", "encode_batch_fast", "datasets_map")
LABELS = {
    "service": "service: pretokenize worker (async, ragged binary)",
    "encode_batch": "in-process encode_batch, same reader/writer",
    "encode_batch_fast": "in-process encode_batch_fast, same reader/writer",
    "datasets_map": "datasets.map(num_proc=2), tokenizer in-process",
}


def empty_results() -> dict[str, Any]:
    return {"runs": [], "medians": {}, "memory": {}}


def run(profile: Profile, log_dir: Path, work_dir: Path) -> dict[str, Any]:
    """Every round of the comparison, then the memory case; the scenario's results (with ``failed`` and the
    reason if a run crashed or timed out: the whole benchmark then fails)."""
    return guarded("6", empty_results(), lambda results: _run(results, profile, log_dir, work_dir))


def guarded(scenario: str, results: dict[str, Any], body: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """``body(results)``, then ``results``; a run that crashed or timed out is recorded as ``failed``."""
    try:
        body(results)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        log(f"scenario {scenario} failed: {exc}")
        results["failed"] = str(exc)
    return results


def _run(results: dict[str, Any], profile: Profile, log_dir: Path, work_dir: Path) -> None:
    folder = work_dir / "pretokenize"
    folder.mkdir(exist_ok=True)
    corpus = folder / "corpus.jsonl"
    documents = corpora.write_jsonl(corpus, profile.pretok_bytes, fields=False)
    results["corpus"] = {"bytes": corpus.stat().st_size, "documents": documents, "tokenizer": "default"}
    server = BenchServer("default", True, log_dir, variant="pre-tokenization")
    try:
        log(f"scenario 6: pre-tokenizing {corpus.stat().st_size / 2**20:.0f} MiB, {profile.pretok_rounds} round(s)")
        server.start()
        url = f"http://127.0.0.1:{server.port}"
        for round_ in range(profile.pretok_rounds):
            shift = round_ % len(METHODS)
            for method in METHODS[shift:] + METHODS[:shift]:
                results["runs"].append(_one_run(method, corpus, folder / f"{method}-{round_}", url, "flat", profile))
        results["medians"] = medians(results["runs"], "method", LABELS)
        corpus.unlink()
        results["memory"] = _memory_case(profile, folder, url)
        server.sample_memory("end")
        results["server"] = server.describe()
    finally:
        server.stop()


def _one_run(method: str, corpus: Path, out: Path, url: str, output_format: str, profile: Profile) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    args = [method, str(corpus), str(out), "--url", url, "--tokenizer", str(tokenizer_dir("default"))]
    result = measured_run(f"scenario 6: {method}", [*args, "--format", output_format], profile)
    shutil.rmtree(out, ignore_errors=True)
    return result


def medians(runs: list[dict[str, Any]], key: str, labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per variant (``run[key]``, in ``labels``' order): the median time and rates over its rounds, the most
    memory and the busiest machine seen."""
    result = {}
    for variant, label in labels.items():
        mine = [r for r in runs if r[key] == variant]
        result[variant] = {
            "label": label,
            "seconds": statistics.median(r["seconds"] for r in mine),
            "tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in mine),
            "documents_per_s": statistics.median(r["documents"] / r["seconds"] for r in mine),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in mine),
            "other_cpu_cores": max(r["other_cpu_cores"] for r in mine),
            "tokens": mine[0]["tokens"],
        }
    return result


def measured_run(what: str, args: list[str], profile: Profile) -> dict[str, Any]:
    """One ``python -m benchmarks.pretokenize_runs ARGS`` in its own process: its JSON line, with the CPU
    other processes used just before (the run itself busies every core)."""
    noise = machine_noise(0.3)
    command = [sys.executable, "-m", "benchmarks.pretokenize_runs", *args]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=profile.pretok_timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{what}: exit {done.returncode}: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["other_cpu_cores"] = noise
    log(
        f"{what}: {result['tokens'] / result['seconds'] / 1e6:.2f}M tokens/s, "
        f"{result['seconds']:.1f} s, peak RSS {result['peak_rss_mb']:.0f} MB"
    )
    return result


def _memory_case(profile: Profile, folder: Path, url: str) -> dict[str, Any]:
    big = folder / "large.jsonl"
    log(f"scenario 6: writing a {profile.pretok_rss_bytes / 2**20:.0f} MiB corpus for the memory case")
    started = time.perf_counter()
    documents = corpora.write_jsonl(big, profile.pretok_rss_bytes, seed=7, fields=False)
    log(f"scenario 6: written in {time.perf_counter() - started:.0f} s; pre-tokenizing it through the service")
    result = _one_run("service", big, folder / "large-out", url, "parquet", profile)
    big.unlink()
    return {**result, "input_bytes": profile.pretok_rss_bytes, "input_documents": documents}
