"""Scenario 7: pre-tokenizing from and to object storage -- the same pretokenize worker (flat format) on local
files and on ``s3://`` of a real S3-protocol server on 127.0.0.1 (moto, ``testkit.objectstore``), tokens/s side
by side in interleaved rounds, then its peak RSS on a larger corpus (256 MiB in the full run), local and s3://.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import Row, Scenario, Settings, in_rounds, log, target
from benchmarks.scenarios.measuring import shared_server
from benchmarks.scenarios.pretokenize import by_variant, medians_rows, memory_row, pretokenize_run
from testkit import corpora
from testkit.objectstore import LoopbackS3

LABELS = {"local": "pretokenize worker, local files", "s3": "pretokenize worker, s3:// in and out (loopback)"}


@dataclass(frozen=True)
class Counts:
    corpus_bytes: int = 32 * 2**20
    rounds: int = 2
    large_bytes: int = 256 * 2**20  # the memory case, local and s3:// (uploaded to moto first)
    timeout: float = 3600.0


FULL, SMOKE = Counts(), Counts(corpus_bytes=512 * 1024, rounds=1, large_bytes=2 * 2**20, timeout=120.0)


def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(FULL, SMOKE)
    folder = settings.work_dir / "object-storage"
    folder.mkdir(exist_ok=True)
    url = shared_server(settings, "default").url
    with LoopbackS3() as s3:
        fs = s3.filesystem()
        for bucket in ("bench-corpus", "bench-tokens"):
            if not fs.exists(bucket):
                fs.mkdir(bucket)
        options = json.dumps({"endpoint_url": s3.direct_endpoint})  # no relay: nothing staged here

        def one(where: str, name: str, output_format: str) -> dict[str, Any]:
            local = where == "local"
            source = str(folder / name) if local else f"s3://bench-corpus/{name}"
            out = str(folder / "out") if local else "s3://bench-tokens/out"
            args = ["service", source, out, url, None, output_format, options]
            try:
                return pretokenize_run(f"scenario 7: {where}", args, counts.timeout)
            finally:
                shutil.rmtree(out, ignore_errors=True) if local else fs.rm("bench-tokens/out", recursive=True)

        corpus = folder / "corpus.jsonl"
        documents = corpora.write_jsonl(corpus, counts.corpus_bytes, fields=False)
        fs.put_file(str(corpus), "bench-corpus/corpus.jsonl")
        section: dict[str, Any] = {"corpus": {"bytes": corpus.stat().st_size, "documents": documents}}
        runs = in_rounds(tuple(LABELS), lambda where: one(where, "corpus.jsonl", "flat"), counts.rounds, "scenario 7")
        section["medians"] = by_variant(runs, LABELS)
        log(f"scenario 7: the memory case, {counts.large_bytes / 2**20:.0f} MiB, local and s3://")
        documents = corpora.write_jsonl(folder / "large.jsonl", counts.large_bytes, seed=7, fields=False)
        fs.put_file(str(folder / "large.jsonl"), "bench-corpus/large.jsonl")
        section["memory"] = {"input_bytes": counts.large_bytes, "input_documents": documents, "format": "parquet"}
        section["memory"] |= {where: one(where, "large.jsonl", "parquet") for where in LABELS}
    return section


def rows(section: dict[str, Any]) -> list[Row]:
    if "medians" not in section:
        return []
    local, memory = section["medians"]["local"], section["memory"]

    def ratio(where: str, m: dict[str, Any]) -> str:
        return "baseline" if where == "local" else f"{m['tokens_per_s'] / local['tokens_per_s']:.2f}x local"

    out = medians_rows("7", section, ratio)
    for where in LABELS:
        out.append(memory_row("7", f"worker alone, {where}, parquet", memory["input_bytes"], memory[where]))
    return out


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    if "medians" not in section:
        return []
    found, memory = section["medians"], section["memory"]
    return [
        target(
            "s7_s3_vs_local",
            f"scenario 7: pre-tokenizing {section['corpus']['bytes'] / 2**20:.0f} MiB of JSON Lines, tokens/s of the "
            "pretokenize worker from and to s3:// (loopback moto) / the same job on local files",
            found["s3"]["tokens_per_s"] / found["local"]["tokens_per_s"],
            0.8,
        ),
        target(
            "s7_s3_worker_peak_rss_mb",
            "scenario 7: peak RSS (VmHWM) of the pretokenize worker from and to s3:// on "
            f"{memory['input_bytes'] / 2**20:.0f} "
            f"MiB of JSON Lines, parquet (local: {memory['local']['peak_rss_mb']:.0f} MB)",
            memory["s3"]["peak_rss_mb"],
            500.0,
            higher_is_better=False,
        ),
    ]


SCENARIO = Scenario(
    "7", "pre-tokenizing from and to s3:// (loopback moto) vs local files, and its memory", measure, rows, targets
)
