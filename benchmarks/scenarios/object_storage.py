"""Scenario 7: pre-tokenizing from and to object storage -- the same job on local files and on a real
S3-protocol server on 127.0.0.1 (moto's server mode, in this process), side by side in one run.

The same JSON Lines corpus, the same server (the default tokenizer), the same pretokenize worker
(``python -m benchmarks.pretokenize_runs service``, its own process), flat format: once with the corpus and
the shards on the local disk, once with the corpus read from ``s3://`` (ranged GETs) and every shard uploaded
whole to ``s3://`` (spooled to local disk first), interleaved in rounds, medians reported. The loopback store
costs CPU on the same 2 cores (moto is Python), so the ratio is a lower bound of what a real store gives.
Then the memory case: the worker's peak RSS on a larger corpus, local and from/to S3 (Parquet, the format whose
writer needs the most memory), against the bound of scenario 6 (500 MB).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.processes import BenchServer
from benchmarks.profiles import Profile
from benchmarks.progress import log
from benchmarks.scenarios.pretokenize import guarded, measured_run, medians
from testkit import corpora
from testkit.objectstore import LoopbackS3

WHERE = ("local", "s3")
LABELS = {"local": "pretokenize worker, local files", "s3": "pretokenize worker, s3:// in and out (loopback)"}


def empty_results() -> dict[str, Any]:
    return {"runs": [], "medians": {}, "memory": {}}


def run(profile: Profile, log_dir: Path, work_dir: Path) -> dict[str, Any]:
    """Every round, then the memory case; the scenario's results (``failed`` and why, if a run failed)."""
    return guarded("7", empty_results(), lambda results: _run(results, profile, log_dir, work_dir))


def _run(results: dict[str, Any], profile: Profile, log_dir: Path, work_dir: Path) -> None:
    folder = work_dir / "object-storage"
    folder.mkdir(exist_ok=True)
    server = BenchServer("default", True, log_dir, variant="object storage")
    with LoopbackS3() as s3:
        fs = s3.filesystem()
        for bucket in ("bench-corpus", "bench-tokens"):
            if not fs.exists(bucket):
                fs.mkdir(bucket)
        corpus = folder / "corpus.jsonl"
        documents = corpora.write_jsonl(corpus, profile.pretok_bytes, fields=False)
        fs.put_file(str(corpus), "bench-corpus/corpus.jsonl")
        results["corpus"] = {"bytes": corpus.stat().st_size, "documents": documents, "tokenizer": "default"}
        options = json.dumps({"endpoint_url": s3.direct_endpoint})  # no relay: nothing staged here
        try:
            rounds = profile.pretok_rounds
            log(f"scenario 7: {corpus.stat().st_size / 2**20:.0f} MiB, local and s3://, {rounds} round(s)")
            server.start()
            url = f"http://127.0.0.1:{server.port}"
            for round_ in range(profile.pretok_rounds):
                for where in WHERE[round_ % 2 :] + WHERE[: round_ % 2]:
                    source = str(corpus) if where == "local" else "s3://bench-corpus/corpus.jsonl"
                    out = str(folder / f"out-{round_}") if where == "local" else f"s3://bench-tokens/out-{round_}"
                    results["runs"].append(_one_run(where, source, out, url, "flat", options, profile))
                    _remove(out, folder, s3)
            results["medians"] = medians(results["runs"], "where", LABELS)
            corpus.unlink()
            results["memory"] = _memory_case(profile, folder, url, options, s3)
            results["server"] = server.describe()
        finally:
            server.stop()


def _one_run(
    where: str, source: str, out: str, url: str, output_format: str, options: str, profile: Profile
) -> dict[str, Any]:
    args = ["service", source, out, "--url", url, "--format", output_format, "--storage-options", options]
    return {**measured_run(f"scenario 7: {where}", args, profile), "where": where}


def _remove(out: str, folder: Path, s3: LoopbackS3) -> None:
    if out.startswith("s3://"):
        s3.filesystem().rm(out.removeprefix("s3://"), recursive=True)
    else:
        shutil.rmtree(out, ignore_errors=True)


def _memory_case(profile: Profile, folder: Path, url: str, options: str, s3: LoopbackS3) -> dict[str, Any]:
    big = folder / "large.jsonl"
    size = profile.storage_rss_bytes
    log(f"scenario 7: the memory case, {size / 2**20:.0f} MiB, local and s3://")
    documents = corpora.write_jsonl(big, size, seed=7, fields=False)
    s3.filesystem().put_file(str(big), "bench-corpus/large.jsonl")
    memory: dict[str, Any] = {"input_bytes": size, "input_documents": documents, "format": "parquet"}
    for where in WHERE:
        source = str(big) if where == "local" else "s3://bench-corpus/large.jsonl"
        out = str(folder / "large-out") if where == "local" else "s3://bench-tokens/large-out"
        memory[where] = _one_run(where, source, out, url, "parquet", options, profile)
        _remove(out, folder, s3)
    big.unlink()
    s3.filesystem().rm("bench-corpus/large.jsonl")
    return memory
