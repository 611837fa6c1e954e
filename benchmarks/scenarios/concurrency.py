"""Scenario 2: concurrent clients sending one ~300-character text per request, batching on and off.

Servers: batching on (defaults: no gather window, a batch is whatever queued while the previous one ran),
batching on with a 2 ms gather window (``--batch-wait-ms 2``, full run only) and batching off, vs the
in-process rates; and (full run only) batching on behind uvicorn's own httptools and h11 protocols instead of
the guarded one, for the per-request cost of the HTTP limits. The in-process rates: ``encode_batch``,
``encode_batch_fast`` and transformers ``__call__`` in batches of 256. Load generator: ``benchmarks.loadgen``
(raw asyncio HTTP/1.1 keep-alive, uvloop). Reports latency percentiles, client CPU (process_time of the load
generator) and server CPU per request (utime+stime of the server from /proc, all threads, tokenizing included).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from benchmarks import loadgen
from benchmarks.loadgen import SAFETENSORS_MEDIA_TYPE, CpuProbe, LoadResult, percentiles
from benchmarks.processes import BenchServer, InProcessWorker
from benchmarks.profiles import Profile
from benchmarks.progress import log
from benchmarks.scenarios import batch_sizes
from benchmarks.scenarios.measuring import OPTIONS_BATCH, aggregate, rotated

BATCH_IN_PROCESS = 256  # the in-process baselines tokenize the same texts in batches of this size
IN_PROCESS = batch_sizes.METHODS[:3]  # encode_batch, encode_batch_fast, transformers __call__
# mode -> (batching, extra server flags, label); "on" is the server every scenario uses
MODES: dict[str, tuple[bool, list[str], str]] = {
    "on": (True, [], "batching on (default: no gather window)"),
    "on-wait2": (True, ["--batch-wait-ms", "2"], "batching on, --batch-wait-ms 2"),
    "off": (False, [], "batching off"),
    # the HTTP protocol's own cost per request: uvicorn's httptools and h11 beside the guarded subclass ("on")
    "on-httptools": (True, ["--http-protocol", "httptools"], "batching on, uvicorn httptools (no limits)"),
    "on-h11": (True, ["--http-protocol", "h11"], "batching on, uvicorn h11"),
}


def empty_results() -> dict[str, Any]:
    """The scenario's section of the results, before any tokenizer is measured."""
    return {
        "options": OPTIONS_BATCH,
        "load_generator": loadgen.LOAD_GENERATOR,
        "runs": [],
        "inprocess": {},
        "inprocess_baselines": {},
    }


def extra_servers(tokenizer: str, profile: Profile, log_dir: Path) -> dict[str, BenchServer]:
    """The servers this scenario needs besides the batching-on one, by mode (not started)."""
    return {
        mode: BenchServer(tokenizer, batching, log_dir, extra_args=extra, variant=" ".join(extra))
        for mode, (batching, extra, _) in MODES.items()
        if mode != "on" and mode in profile.s2_modes
    }


def one_text_bodies(texts: list[str]) -> list[bytes]:
    """One /encode JSON body per text, with the scenario's options."""
    return [orjson.dumps({"texts": [t], **OPTIONS_BATCH}) for t in texts]


def raw_requests(server: BenchServer, bodies: list[bytes]) -> list[bytes]:
    """The bodies as complete HTTP requests for the load generator, asking for the binary answer."""
    return [loadgen.request_bytes("127.0.0.1", server.port, "/encode", b, SAFETENSORS_MEDIA_TYPE) for b in bodies]


def run_load(
    server: BenchServer, requests: list[bytes], *, concurrency: int, warmup: float, duration: float, max_requests: int
) -> LoadResult:
    """``concurrency`` keep-alive clients against ``server``, its CPU read from /proc at the window's edges."""
    return loadgen.run_load(
        "127.0.0.1",
        server.port,
        requests,
        concurrency=concurrency,
        warmup=warmup,
        duration=duration,
        max_requests=max_requests,
        probe=CpuProbe(server.pid),
    )


def measure(
    results: dict[str, Any],
    tokenizer: str,
    profile: Profile,
    worker: InProcessWorker,
    servers: dict[str, BenchServer],
    texts: list[str],
) -> None:
    """Measure one tokenizer at every concurrency on every server, and the in-process rate on the same
    texts; append them to ``results`` (this scenario's section)."""
    bodies = one_text_bodies(texts)
    requests = {mode: raw_requests(server, bodies) for mode, server in servers.items()}
    for server in servers.values():  # every text once through each server before timing
        for body in bodies[: min(len(bodies), 256)]:
            server.encode(body, SAFETENSORS_MEDIA_TYPE)
    inprocess_runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    runs: dict[tuple[str, int], list[LoadResult]] = defaultdict(list)
    for round_ in range(profile.s2_rounds):
        log(f"{tokenizer}: scenario 2, round {round_ + 1}/{profile.s2_rounds}")
        for label, _, method in rotated(IN_PROCESS, round_):
            inprocess_runs[label].append(
                worker.measure(method, "s2", BATCH_IN_PROCESS, OPTIONS_BATCH, profile.seconds, profile.max_batches)
            )
        for concurrency in profile.concurrency:
            for mode in rotated(tuple(servers), round_):
                runs[(mode, concurrency)].append(
                    run_load(
                        servers[mode],
                        requests[mode],
                        concurrency=concurrency,
                        warmup=profile.s2_warmup,
                        duration=profile.s2_seconds,
                        max_requests=profile.s2_max_requests,
                    )
                )
    baselines = {}
    for label, label_runs in inprocess_runs.items():
        figures = aggregate(label_runs)
        figures["cpu_ms_per_text"] = figures["server_or_worker_cpu_ms_per_request"] / BATCH_IN_PROCESS
        baselines[label] = figures
    results["inprocess"][tokenizer] = baselines["in-process encode_batch"]  # what the targets compare with
    results["inprocess_baselines"][tokenizer] = baselines
    for (mode, concurrency), mode_runs in runs.items():
        results["runs"].append(
            {
                "tokenizer": tokenizer,
                "mode": mode,
                "label": MODES[mode][2],
                "server_args": servers[mode].args,
                "concurrency": concurrency,
                **_summary(mode_runs),
            }
        )


def _summary(runs: list[LoadResult]) -> dict[str, Any]:
    """Median rate of 200 answers over rounds, statuses, pooled latencies, CPU per request and in cores."""
    ok = sum(r.statuses.get(200, 0) for r in runs)
    total = sum(r.requests for r in runs)
    statuses: dict[str, int] = defaultdict(int)
    for r in runs:
        for status, count in r.statuses.items():
            statuses[str(status)] += count
    seconds = sum(r.seconds for r in runs)
    return {
        "rate": statistics.median(r.statuses.get(200, 0) / r.seconds for r in runs),
        "rounds_rate": [round(r.statuses.get(200, 0) / r.seconds, 1) for r in runs],
        "requests": total,
        "statuses": dict(statuses),
        "errors": total - ok,
        "latency_ms": percentiles([x for r in runs for x in r.latencies]),
        "server_cpu_ms_per_request": 1000 * sum(r.cpu["watched_cpu_seconds"] for r in runs) / max(1, total),
        "client_cpu_ms_per_request": 1000 * sum(r.cpu["client_cpu_seconds"] for r in runs) / max(1, total),
        "client_cpu_cores": sum(r.cpu["client_cpu_seconds"] for r in runs) / seconds,
        "server_cpu_cores": sum(r.cpu["watched_cpu_seconds"] for r in runs) / seconds,
        "other_cpu_cores": max(r.cpu["other_cpu_cores"] for r in runs),
    }
