"""Side-by-side benchmark: tokenizer-service against in-process tokenization, same texts, same run.

    .venv/bin/python -m benchmarks.run              # full run: ~8 minutes on 2 cores
    .venv/bin/python -m benchmarks.run --smoke      # every scenario with tiny counts: < 60 s (CI)

It starts the servers itself (``python -m service serve`` on 127.0.0.1, a free port; ``--model DIR`` for
a non-default tokenizer, ``--no-batching`` for the comparison), runs bounded scenarios, prints one table
with absolute figures and the ratios measured in this run, and writes into ``--out-dir``:
``benchmark.json`` (every figure, the per-round values, and a ``targets`` section), ``benchmark.txt`` (the
printed table), four PNG plots (throughput vs batch size, throughput vs concurrency, latency percentiles,
long-text scaling) and the server logs. Every process it starts is stopped by PID when it ends, even on error or Ctrl-C.

Texts: real Chinese product reviews and English prose (package_assets), in three buckets -- short (natural
texts under 100 characters), medium (~300) and long (~1000; consecutive texts joined and cut). Tokenizers:
the embedded default (WordPiece) and Anthropic's byte-level BPE (``--tokenizers`` to choose).

Scenarios, each against its in-process counterpart on the same texts:

1. One client, batches of 256, padding="longest", truncation=True, max_length=128. Service JSON (decoded
   with orjson + numpy into torch tensors) and service binary (``Accept: application/vnd.safetensors``,
   decoded with ``safetensors.torch.load``) vs in-process Rust ``encode_batch`` (padding and truncation
   set on the Rust tokenizer; ``encode_batch_fast`` shown too) and vs transformers
   ``tokenizer(texts, ..., return_tensors="pt")``. Plus a batch-size sweep for the plot.
2. Concurrent clients sending one ~300-character text per request (64, and a 1/4/16/64 sweep), to a
   server with batching on (defaults: no gather window, a batch is whatever queued while the previous one
   ran), one with batching on and a 2 ms gather window (``--batch-wait-ms 2``) and one with batching off, vs the in-process
   rate of ``encode_batch`` in batches of 256. Load generator: a raw asyncio HTTP/1.1 keep-alive client
   (``loadgen.py``, on uvloop). Reports latency percentiles, client CPU (process_time of the load
   generator) and server CPU per request (utime+stime of the server from /proc/<pid>/stat, all threads,
   tokenizing included; "overhead" subtracts the CPU in-process encode_batch spends per text).
3. DataLoader: runs ``benchmarks/dataloader_compare.py`` (owned elsewhere) when it and ``service.client``
   exist, and includes its figures; otherwise the scenario is reported as skipped, with the reason.
4. Long-text scaling: tokens/s vs text length (100 to 50k characters, no truncation), service binary vs
   in-process ``encode_batch``.
Server memory: VmRSS at start, after each scenario and at the end, and VmHWM (peak), from /proc; and a
soak ("rss"): the default tokenizer's server as a ``[server]``-only install runs it (torch absent -- in
this venv transformers would import it, +180 MB), under rounds of the same mixed load, RSS after each.

Fairness: the in-process baselines run in their own process (``inprocess.py``, TOKENIZERS_PARALLELISM=true,
the same number of Rust threads as the server, never forked), not beside the load generator's event loop.
Measurements are interleaved in rounds (each round measures every variant once, in rotated order) and the
median over rounds is reported; ratios are ratios of those medians. Every measurement also records the CPU
used by other processes on the machine ("other cores"); a note flags a figure taken while the machine was
busy; the run first waits (``--wait-quiet``, bounded) for a quiet machine. Counts: every loop is bounded
in iterations and in seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import select
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from benchmarks import corpus, loadgen, report
from benchmarks.loadgen import (
    JSON_MEDIA_TYPE,
    SAFETENSORS_MEDIA_TYPE,
    CpuProbe,
    HttpConnection,
    memory_kib,
    percentiles,
)
from testkit.servers import REPO, ServerProcess

OPTIONS_BATCH = {"padding": "longest", "truncation": True, "max_length": 128}  # scenarios 1 and 2
OPTIONS_LONG = {"padding": "longest", "truncation": False}  # scenario 4: whole texts
BUSY_CORES = 0.25  # other processes using more than this during a measurement: flagged in the table
TARGETS = {
    "s1_binary_vs_encode_batch": 0.9,
    "s1_binary_vs_call": 1.2,
    "s1_json_vs_encode_batch": 0.7,
    "s2_on_vs_off": 1.5,
    "s2_on_vs_inprocess": 0.5,
    "s2_server_cpu_ms_per_request": 0.3,
    "rss_peak_mb": 300.0,
}


@dataclass(frozen=True)
class Profile:
    """How much to measure. Every loop below is bounded by these counts and durations."""

    tokenizers: tuple[str, ...] = ("default", "bytelevel_bpe")
    rounds: int = 3  # scenario 1 cells
    seconds: float = 0.4  # per scenario-1 measurement
    set_size: int = 1024  # texts per scenario-1 cell
    max_batches: int = 20_000  # per measurement, whatever the duration
    sweep_batches: tuple[int, ...] = (1, 8, 32, 128, 256, 1024)
    sweep_rounds: int = 2
    sweep_seconds: float = 0.3
    sweep_set_size: int = 2048
    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    s2_modes: tuple[str, ...] = ("on", "on-wait2", "off")  # keys of S2_MODES
    s2_rounds: int = 2
    s2_warmup: float = 0.5
    s2_seconds: float = 1.5
    s2_max_requests: int = 50_000
    s2_set_size: int = 1024
    long_lengths: tuple[int, ...] = (100, 1_000, 10_000, 50_000)
    long_rounds: int = 2
    long_seconds: float = 0.8
    soak_rounds: int = 6  # RSS soak: rounds of mixed load, RSS read after each
    soak_seconds: float = 3.0  # per round: half one-client batches, half 64 concurrent clients
    dataloader_timeout: float = 300.0
    smoke: bool = False  # passed on to dataloader_compare.py as --smoke


FULL = Profile()
SMOKE = Profile(
    smoke=True, tokenizers=("default",), rounds=1, seconds=0.05, set_size=256, max_batches=8,
    sweep_batches=(1, 32, 256), sweep_rounds=1, sweep_seconds=0.05, sweep_set_size=256,
    concurrency=(1, 8), s2_modes=("on", "off"), s2_rounds=1, s2_warmup=0.1, s2_seconds=0.4, s2_max_requests=2000,
    s2_set_size=64,
    long_lengths=(100, 10_000), long_rounds=1, long_seconds=0.05, soak_rounds=2, soak_seconds=0.4,
    dataloader_timeout=120.0,
)

S1_METHODS = (  # label, where, method or media type
    ("in-process encode_batch", "inprocess", "encode_batch"),
    ("in-process encode_batch_fast", "inprocess", "encode_batch_fast"),
    ("in-process transformers __call__(pt)", "inprocess", "call"),
    ("service JSON", "service", JSON_MEDIA_TYPE),
    ("service binary", "service", SAFETENSORS_MEDIA_TYPE),
)
S4_METHODS = (S1_METHODS[0], S1_METHODS[1], S1_METHODS[4])
# scenario 2: mode -> (batching, extra server flags, label)
S2_MODES = {
    "on": (True, [], "batching on (default: no gather window)"),
    "on-wait2": (True, ["--batch-wait-ms", "2"], "batching on, --batch-wait-ms 2"),
    "off": (False, [], "batching off"),
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def tokenizer_dir(name: str) -> Path:
    if name == "default":
        from service.engine.loading import DEFAULT_TOKENIZER_DIR

        return DEFAULT_TOKENIZER_DIR
    from testkit import assets as package_assets

    dirs = package_assets.tokenizer_dirs()
    if name not in dirs:
        raise SystemExit(f"unknown tokenizer {name!r}: one of default, {', '.join(dirs)}")
    return dirs[name]


def available_cpus() -> int:
    from service.engine.parallelism import available_cpus as cpus

    return cpus()


# -- the processes under test -------------------------------------------------------------------------
class InProcess:
    """The baseline worker (inprocess.py) in its own process, driven over stdin/stdout."""

    def __init__(self, tokenizer: str, texts_file: Path, log_dir: Path, threads: int) -> None:
        self.tokenizer = tokenizer
        self.texts_file = texts_file
        self.log_path = log_dir / f"inprocess-{tokenizer}.log"
        self.threads = threads
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> "InProcess":
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "true", "RAYON_NUM_THREADS": str(self.threads),
               "RAYON_RS_NUM_CPUS": str(self.threads)}
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.inprocess"], cwd=REPO, env=env, text=True,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file)
        self._ask({"op": "setup", "tokenizer": str(tokenizer_dir(self.tokenizer)), "texts_file": str(self.texts_file)},
                  timeout=300)
        return self

    def _ask(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"in-process worker gave no answer to {command.get('op')} in {timeout}s")
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"in-process worker exited ({self.proc.poll()}): {tail}")
        answer = json.loads(line)
        if not answer.pop("ok"):
            raise RuntimeError(f"in-process worker: {answer['error']}")
        return answer

    def measure(self, method: str, set_name: str, batch: int, options: dict[str, Any], seconds: float,
                max_batches: int) -> dict[str, Any]:
        probe = CpuProbe(self.pid)
        before = probe.snapshot()
        answer = self._ask({"op": "measure", "method": method, "set_name": set_name, "batch": batch, "options": options,
                            "seconds": seconds, "max_batches": max_batches}, timeout=seconds + 300)
        answer["cpu"] = CpuProbe.delta(before, probe.snapshot())
        answer["cpu"]["watched_cpu_seconds"] = answer.pop("cpu_seconds")  # the worker's own process_time
        answer["cpu"]["client_cpu_seconds"] = 0.0
        return answer

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()  # by PID
            self.proc.wait(10)


class BenchServer:
    """One ``tokenizer-service serve`` process and one keep-alive connection to it."""

    def __init__(self, tokenizer: str, batching: bool, log_dir: Path, *, env: dict[str, str] | None = None,
                 variant: str = "", extra_args: list[str] | None = None) -> None:
        args = [] if tokenizer == "default" else ["--model", str(tokenizer_dir(tokenizer))]
        if not batching:
            args.append("--no-batching")
        args += extra_args or []
        self.tokenizer = tokenizer
        self.setup = f"batching {'on' if batching else 'off'}" + (f", {variant}" if variant else "")
        self.name = f"{tokenizer}, {self.setup}"
        self.args = args
        slug = self.name.replace(", ", "-").replace(" ", "-")
        self.process = ServerProcess(*args, env=env, log_path=log_dir / f"server-{slug}.log")
        self.conn: HttpConnection | None = None
        self.memory: list[dict[str, Any]] = []
        self.torch_loaded: bool | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return self.process.port

    def start(self) -> "BenchServer":
        self.process.start(timeout=180)
        self.conn = HttpConnection("127.0.0.1", self.port)
        self.sample_memory("start")
        self.torch_loaded = loadgen.maps_library(self.pid, "libtorch")
        return self

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "args": self.args, "setup": self.setup, "torch_loaded": self.torch_loaded,
                "memory": self.memory}

    def sample_memory(self, when: str) -> None:
        kib = memory_kib(self.pid)
        self.memory.append({"when": when, "rss_mb": kib["VmRSS"] / 1024, "peak_mb": kib["VmHWM"] / 1024})

    def stop(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.process.stop()


def start_all(items: list[Any]) -> None:
    """Start servers and workers side by side (each waits for its own readiness)."""
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        for future in [pool.submit(item.start) for item in items]:
            future.result()


# -- measuring the service from one client --------------------------------------------------------------
def _decode_binary(payload: bytes) -> dict[str, Any]:
    from safetensors.torch import load

    return load(payload)


def _decode_json(payload: bytes) -> dict[str, Any]:
    import numpy as np
    import torch

    return {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in orjson.loads(payload).items()}


class ServiceClient:
    """Sequential requests over one keep-alive connection, decoded to torch tensors like a training loop would."""

    def __init__(self) -> None:
        self._tokens: dict[tuple, list[int]] = {}

    def measure(self, server: BenchServer, set_key: str, batches: list[list[str]], options: dict[str, Any],
                accept: str, seconds: float, max_batches: int) -> dict[str, Any]:
        conn = server.conn
        assert conn is not None
        decode = _decode_binary if accept == SAFETENSORS_MEDIA_TYPE else _decode_json

        def one(batch: list[str]) -> dict[str, Any]:
            status, payload = conn.post("/encode", orjson.dumps({"texts": batch, **options}), accept)
            if status != 200:
                raise RuntimeError(f"/encode on {server.name} answered {status}: {payload[:300]!r}")
            return decode(payload)

        key = (server.name, set_key, len(batches[0]), json.dumps(options, sort_keys=True))
        if key not in self._tokens:  # untimed warm-up pass that also counts the real tokens
            self._tokens[key] = [int(one(b)["attention_mask"].sum()) for b in batches]
        else:
            one(batches[0])
        tokens = self._tokens[key]
        probe = CpuProbe(server.pid)
        before = probe.snapshot()
        done = texts = real_tokens = 0
        latencies = []
        start = time.perf_counter()
        while True:
            i = done % len(batches)
            t0 = time.perf_counter()
            one(batches[i])
            latencies.append(time.perf_counter() - t0)
            done += 1
            texts += len(batches[i])
            real_tokens += tokens[i]
            elapsed = time.perf_counter() - start
            if elapsed >= seconds or done >= max_batches:
                break
        cpu = CpuProbe.delta(before, probe.snapshot())
        return {"batches": done, "texts": texts, "tokens": real_tokens, "seconds": elapsed, "cpu": cpu,
                "latencies": latencies}


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median rates over rounds; latencies pooled; CPU per request summed over rounds."""
    batches = sum(r["batches"] for r in runs)
    return {
        "texts_per_s": statistics.median(r["texts"] / r["seconds"] for r in runs),
        "tokens_per_s": statistics.median(r["tokens"] / r["seconds"] for r in runs),
        "rounds_texts_per_s": [round(r["texts"] / r["seconds"], 1) for r in runs],
        "latency_ms": percentiles([x for r in runs for x in r["latencies"]]),
        "requests": batches,
        "server_or_worker_cpu_ms_per_request": 1000 * sum(r["cpu"]["watched_cpu_seconds"] for r in runs) / batches,
        "client_cpu_ms_per_request": 1000 * sum(r["cpu"]["client_cpu_seconds"] for r in runs) / batches,
        "other_cpu_cores": max(r["cpu"]["other_cpu_cores"] for r in runs),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


# -- the run --------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, profile: Profile, out_dir: Path, scenarios: set[str], work_dir: Path) -> None:
        self.profile = profile
        self.out_dir = out_dir
        self.log_dir = out_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.scenarios = scenarios
        self.threads = available_cpus()
        self.client = ServiceClient()
        self.sets = self._build_sets()
        self.work_dir = work_dir
        self.texts_file = work_dir / "texts.json"
        self.texts_file.write_text(json.dumps(self.sets, ensure_ascii=False), "utf-8")
        self.results: dict[str, Any] = {
            "scenario1": {"options": OPTIONS_BATCH, "batch": 256, "cells": [], "sweep": []},
            "scenario2": {"options": OPTIONS_BATCH, "load_generator": loadgen.LOAD_GENERATOR, "runs": [],
                          "inprocess": {}},
            "scenario3": {},
            "scenario4": {"options": OPTIONS_LONG, "points": []},
            "servers": {},
            "rss_soak": {},
        }

    def _build_sets(self) -> dict[str, list[str]]:
        p = self.profile
        sets: dict[str, list[str]] = {}
        for language in corpus.LANGUAGES:
            for bucket in corpus.BUCKETS:
                sets[f"{language}-{bucket}"] = corpus.bucket_texts(language, bucket, p.set_size)
        sets["mixed-medium"] = corpus.mixed_texts("medium", p.sweep_set_size)
        sets["s2"] = corpus.mixed_texts("medium", p.s2_set_size, seed=2)
        for chars in p.long_lengths:
            sets[f"chars-{chars}"] = corpus.mixed_texts(f"chars:{chars}", 2 * self.long_batch(chars), seed=4)
        return sets

    @staticmethod
    def long_batch(chars: int) -> int:
        """Texts per request in scenario 4: ~256k characters per request, 1 to 256 texts."""
        return max(1, min(256, 256_000 // chars))

    def run(self) -> dict[str, Any]:
        for tokenizer in self.profile.tokenizers:
            self.run_tokenizer(tokenizer)
        if "rss" in self.scenarios:
            self.results["rss_soak"] = self.rss_soak()
        else:
            self.results["rss_soak"] = {"skipped": "not selected (--scenarios)"}
        if "3" in self.scenarios:
            self.results["scenario3"] = run_dataloader_compare(self.out_dir, self.profile)
        else:
            self.results["scenario3"] = {"skipped": "not selected (--scenarios)"}
        return self.results

    def run_tokenizer(self, tokenizer: str) -> None:
        worker = InProcess(tokenizer, self.texts_file, self.log_dir, self.threads)
        on = BenchServer(tokenizer, True, self.log_dir)
        others: dict[str, BenchServer] = {}
        if "2" in self.scenarios:
            for mode, (batching, extra, _) in S2_MODES.items():
                if mode != "on" and mode in self.profile.s2_modes:
                    others[mode] = BenchServer(tokenizer, batching, self.log_dir, extra_args=extra,
                                               variant=" ".join(extra))
        started = [worker, on, *others.values()]
        try:
            log(f"{tokenizer}: starting {len(started) - 1} server(s) and the in-process worker")
            start_all(started)
            if "1" in self.scenarios:
                self.scenario1(tokenizer, worker, on)
                on.sample_memory("after scenario 1")
            if "4" in self.scenarios:
                self.scenario4(tokenizer, worker, on)
                on.sample_memory("after scenario 4")
            if others:
                self.scenario2(tokenizer, worker, {"on": on, **others})
                for server in (on, *others.values()):
                    server.sample_memory("after scenario 2")
            for server in (on, *others.values()):
                server.sample_memory("end")
                self.results["servers"][server.name] = server.describe()
        finally:
            for item in started:
                item.stop()

    # -- scenario 1 -------------------------------------------------------------------------------------
    def _measure(self, where: str, what: str, worker: InProcess, server: BenchServer, set_name: str, batch: int,
                 options: dict[str, Any], seconds: float) -> dict[str, Any]:
        max_batches = self.profile.max_batches
        if where == "inprocess":
            return worker.measure(what, set_name, batch, options, seconds, max_batches)
        batches = corpus.batches_of(self.sets[set_name], batch)
        return self.client.measure(server, set_name, batches, options, what, seconds, max_batches)

    def scenario1(self, tokenizer: str, worker: InProcess, server: BenchServer) -> None:
        p = self.profile
        cells = [(lang, bucket) for lang in corpus.LANGUAGES for bucket in corpus.BUCKETS]
        runs: dict[tuple, list] = defaultdict(list)
        for round_ in range(p.rounds):
            log(f"{tokenizer}: scenario 1, round {round_ + 1}/{p.rounds}")
            methods = _rotated(S1_METHODS, round_)
            for lang, bucket in cells:
                for label, where, what in methods:
                    runs[(lang, bucket, label)].append(
                        self._measure(where, what, worker, server, f"{lang}-{bucket}", 256, OPTIONS_BATCH, p.seconds))
        for lang, bucket in cells:
            for label, where, _ in S1_METHODS:
                self.results["scenario1"]["cells"].append(
                    {"tokenizer": tokenizer, "language": lang, "bucket": bucket, "label": label, "where": where,
                     **aggregate(runs[(lang, bucket, label)])})

        sweep: dict[tuple, list] = defaultdict(list)
        for round_ in range(p.sweep_rounds):
            log(f"{tokenizer}: scenario 1 batch-size sweep, round {round_ + 1}/{p.sweep_rounds}")
            for batch in p.sweep_batches:
                for label, where, what in _rotated(S1_METHODS, round_):
                    sweep[(batch, label)].append(
                        self._measure(where, what, worker, server, "mixed-medium", batch, OPTIONS_BATCH, p.sweep_seconds))
        for (batch, label), batch_runs in sweep.items():
            self.results["scenario1"]["sweep"].append(
                {"tokenizer": tokenizer, "batch": batch, "label": label, **aggregate(batch_runs)})

    # -- scenario 2 -------------------------------------------------------------------------------------
    def scenario2(self, tokenizer: str, worker: InProcess, servers: dict[str, BenchServer]) -> None:
        p = self.profile
        texts = self.sets["s2"]
        bodies = [orjson.dumps({"texts": [t], **OPTIONS_BATCH}) for t in texts]
        requests = {
            mode: [loadgen.request_bytes("127.0.0.1", s.port, "/encode", b, SAFETENSORS_MEDIA_TYPE) for b in bodies]
            for mode, s in servers.items()
        }
        for mode, server in servers.items():  # every text once through each server before timing
            for body in bodies[: min(len(bodies), 256)]:
                status, payload = server.conn.post("/encode", body, SAFETENSORS_MEDIA_TYPE)
                if status != 200:
                    raise RuntimeError(f"/encode on {server.name} answered {status}: {payload[:300]!r}")
        inprocess_runs = []
        runs: dict[tuple, list] = defaultdict(list)
        for round_ in range(p.s2_rounds):
            log(f"{tokenizer}: scenario 2, round {round_ + 1}/{p.s2_rounds}")
            inprocess_runs.append(worker.measure("encode_batch", "s2", 256, OPTIONS_BATCH, p.seconds, p.max_batches))
            for concurrency in p.concurrency:
                for mode in _rotated(tuple(servers), round_):
                    server = servers[mode]
                    result = loadgen.run_load("127.0.0.1", server.port, requests[mode], concurrency=concurrency,
                                              warmup=p.s2_warmup, duration=p.s2_seconds,
                                              max_requests=p.s2_max_requests, probe=CpuProbe(server.pid))
                    runs[(mode, concurrency)].append(result)
        inproc = aggregate(inprocess_runs)
        inproc["cpu_ms_per_text"] = inproc["server_or_worker_cpu_ms_per_request"] / 256
        self.results["scenario2"]["inprocess"][tokenizer] = inproc
        for (mode, concurrency), results in runs.items():
            ok = sum(r.statuses.get(200, 0) for r in results)
            total = sum(r.requests for r in results)
            statuses: dict[str, int] = defaultdict(int)
            for r in results:
                for status, count in r.statuses.items():
                    statuses[str(status)] += count
            self.results["scenario2"]["runs"].append({
                "tokenizer": tokenizer, "mode": mode, "label": S2_MODES[mode][2], "server_args": servers[mode].args,
                "concurrency": concurrency,
                "rate": statistics.median(r.statuses.get(200, 0) / r.seconds for r in results),
                "rounds_rate": [round(r.statuses.get(200, 0) / r.seconds, 1) for r in results],
                "requests": total, "statuses": dict(statuses), "errors": total - ok,
                "latency_ms": percentiles([x for r in results for x in r.latencies]),
                "server_cpu_ms_per_request": 1000 * sum(r.cpu["watched_cpu_seconds"] for r in results) / max(1, total),
                "client_cpu_ms_per_request": 1000 * sum(r.cpu["client_cpu_seconds"] for r in results) / max(1, total),
                "client_cpu_cores": sum(r.cpu["client_cpu_seconds"] for r in results) / sum(r.seconds for r in results),
                "server_cpu_cores": sum(r.cpu["watched_cpu_seconds"] for r in results) / sum(r.seconds for r in results),
                "other_cpu_cores": max(r.cpu["other_cpu_cores"] for r in results),
            })

    # -- scenario 4 -------------------------------------------------------------------------------------
    def scenario4(self, tokenizer: str, worker: InProcess, server: BenchServer) -> None:
        p = self.profile
        runs: dict[tuple, list] = defaultdict(list)
        for round_ in range(p.long_rounds):
            log(f"{tokenizer}: scenario 4, round {round_ + 1}/{p.long_rounds}")
            for chars in p.long_lengths:
                for label, where, what in _rotated(S4_METHODS, round_):
                    runs[(chars, label)].append(self._measure(where, what, worker, server, f"chars-{chars}",
                                                              self.long_batch(chars), OPTIONS_LONG, p.long_seconds))
        for (chars, label), point_runs in runs.items():
            self.results["scenario4"]["points"].append(
                {"tokenizer": tokenizer, "chars": chars, "texts_per_request": self.long_batch(chars), "label": label,
                 **aggregate(point_runs)})


    # -- memory -----------------------------------------------------------------------------------------
    def rss_soak(self) -> dict[str, Any]:
        """The default tokenizer's server as a ``[server]``-only install runs it (torch is not installed
        there; here it is hidden from the server with a sitecustomize), under rounds of mixed load: one
        client sending batches of 256 (every scenario-1 text set, and 10k-character texts), then 64
        clients sending one text each. RSS is read after every round."""
        p = self.profile
        site = self.work_dir / "without_torch"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(
            "import sys\n\n# as in a [server]-only install, where torch is absent\n"
            "sys.modules.setdefault('torch', None)\n")
        pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        server = BenchServer("default", True, self.log_dir, env={"PYTHONPATH": pythonpath}, variant="torch not installed")
        batches = [b for name in sorted(self.sets) if name.split("-")[0] in corpus.LANGUAGES
                   for b in corpus.batches_of(self.sets[name], 256, limit=4)]
        batches += corpus.batches_of(self.sets.get("chars-10000", self.sets["zh-long"]), 25, limit=2)
        bodies = [orjson.dumps({"texts": [t], **OPTIONS_BATCH}) for t in self.sets["s2"]]
        try:
            log(f"RSS soak: {p.soak_rounds} rounds on {server.name}")
            server.start()
            requests = [loadgen.request_bytes("127.0.0.1", server.port, "/encode", b, SAFETENSORS_MEDIA_TYPE)
                        for b in bodies]
            for round_ in range(p.soak_rounds):
                deadline = time.perf_counter() + p.soak_seconds / 2
                sent = 0
                while time.perf_counter() < deadline or sent < len(batches):
                    status, payload = server.conn.post("/encode", orjson.dumps({"texts": batches[sent % len(batches)],
                                                                                **OPTIONS_BATCH}),
                                                       SAFETENSORS_MEDIA_TYPE)
                    if status != 200:
                        raise RuntimeError(f"/encode on {server.name} answered {status}: {payload[:300]!r}")
                    sent += 1
                    if sent >= 100_000:
                        break
                loadgen.run_load("127.0.0.1", server.port, requests, concurrency=64, warmup=0.0,
                                 duration=p.soak_seconds / 2, max_requests=p.s2_max_requests, probe=CpuProbe(server.pid))
                server.sample_memory(f"after round {round_ + 1}")
        finally:
            server.stop()
        rss = [m["rss_mb"] for m in server.memory]
        return {**server.describe(),
                "rss_start_mb": rss[0], "rss_end_mb": rss[-1], "peak_mb": max(m["peak_mb"] for m in server.memory),
                "growth_after_first_round_mb": rss[-1] - rss[1] if len(rss) > 1 else 0.0}


def _rotated(items: tuple, shift: int) -> tuple:
    shift %= len(items)
    return items[shift:] + items[:shift]


# -- scenario 3: delegated ------------------------------------------------------------------------------
def run_dataloader_compare(out_dir: Path, profile: Profile) -> dict[str, Any]:
    check = subprocess.run([sys.executable, "-c", "import service.client"], cwd=REPO, capture_output=True, text=True,
                           timeout=120)
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["?"])[-1]
        return {"skipped": f"service.client is not importable ({last})"}
    command = [sys.executable, "-m", "benchmarks.dataloader_compare"]
    usage = subprocess.run([*command, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    flags = usage.stdout
    target = out_dir / "dataloader_compare.json"
    if "--out-dir" in flags:
        command += ["--out-dir", str(out_dir)]
    elif "--out" in flags:
        command += ["--out", str(target)]
    if profile.smoke and "--smoke" in flags:
        command.append("--smoke")
    log(f"scenario 3: {shlex.join(command)}")
    started = time.time()
    log_path = out_dir / "logs" / "dataloader_compare.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(command, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = proc.wait(profile.dataloader_timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # by PID; it stops its own servers in its own cleanup
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)  # its process group: the group this run created for it
                proc.wait(5)
            return {"skipped": f"dataloader_compare.py did not finish in {profile.dataloader_timeout:g}s",
                    "command": command, "log": str(log_path)}
    outcome: dict[str, Any] = {"command": command, "returncode": returncode, "seconds": time.time() - started,
                               "log": str(log_path)}
    if returncode != 0:
        outcome["skipped"] = f"dataloader_compare.py exited with {returncode}; see {log_path}"
        return outcome
    written = target if target.exists() else None
    if written is None:
        fresh = [f for f in out_dir.glob("*.json") if f.name != "benchmark.json" and f.stat().st_mtime >= started]
        written = max(fresh, key=lambda f: f.stat().st_mtime) if fresh else None
    if written is None:
        outcome["skipped"] = "dataloader_compare.py wrote no JSON file into the out-dir"
        return outcome
    outcome["file"] = str(written)
    outcome["data"] = json.loads(written.read_text())
    return outcome


def _dataloader_cells(s3: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-cell figures of dataloader_compare.py's JSON, if it has the shape this run knows."""
    data = s3.get("data")
    cells = data.get("dataloader") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        return []
    needed = {"workers", "batch_size", "in-process", "ratios_vs_inprocess"}
    return [c for c in cells if isinstance(c, dict) and needed <= set(c)]


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, float]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [(prefix, float(value))]
    if isinstance(value, dict):
        return [item for k, v in value.items() for item in _flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list) and len(value) <= 32:
        return [item for i, v in enumerate(value) for item in _flatten(v, f"{prefix}[{i}]")]
    return []


# -- targets and table -----------------------------------------------------------------------------------
def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def evaluate_targets(results: dict[str, Any], profile: Profile) -> list[dict[str, Any]]:
    targets: list[dict[str, Any]] = []

    def add(name: str, description: str, measured: float | None, threshold: float, higher_is_better: bool = True,
            **details: Any) -> None:
        met = None if measured is None else (measured >= threshold if higher_is_better else measured <= threshold)
        targets.append({"target": name, "description": description, "direction": ">=" if higher_is_better else "<=",
                        "threshold": threshold, "measured": None if measured is None else round(measured, 4),
                        "met": met, **details})

    cells = results["scenario1"]["cells"]
    for tok in profile.tokenizers:
        by = defaultdict(dict)
        for c in cells:
            if c["tokenizer"] == tok:
                by[(c["language"], c["bucket"])][c["label"]] = c["texts_per_s"]
        if not by:
            continue
        for key, service, base, base_label in (
            ("s1_binary_vs_encode_batch", "service binary", "in-process encode_batch", "encode_batch"),
            ("s1_binary_vs_call", "service binary", "in-process transformers __call__(pt)", "transformers __call__"),
            ("s1_json_vs_encode_batch", "service JSON", "in-process encode_batch", "encode_batch"),
        ):
            per_cell = {f"{lang} {bucket}": ratio(v.get(service), v.get(base)) for (lang, bucket), v in by.items()}
            values = [r for r in per_cell.values() if r]
            add(f"{key}[{tok}]", f"scenario 1, {tok}: {service} / in-process {base_label}, batches of 256 "
                f"(geometric mean over the {len(values)} text cells)", _geomean(values), TARGETS[key],
                worst=round(min(values), 4) if values else None,
                met_in_every_cell=all(r >= TARGETS[key] for r in values) if values else None,
                per_cell={k: round(v, 4) for k, v in per_cell.items() if v})

    s2 = results["scenario2"]
    top = max(profile.concurrency)
    for tok in profile.tokenizers:
        run = {r["mode"]: r for r in s2["runs"] if r["tokenizer"] == tok and r["concurrency"] == top}
        inproc = s2["inprocess"].get(tok)
        if "on" not in run or "off" not in run or not inproc:
            continue
        on, off = run["on"], run["off"]
        add(f"s2_on_vs_off[{tok}]", f"scenario 2, {tok}, {top} clients x 1 text: batching on / off",
            ratio(on["rate"], off["rate"]), TARGETS["s2_on_vs_off"])
        add(f"s2_on_vs_inprocess[{tok}]", f"scenario 2, {tok}, {top} clients x 1 text: batching on / in-process "
            "encode_batch in batches of 256", ratio(on["rate"], inproc["texts_per_s"]), TARGETS["s2_on_vs_inprocess"])
        add(f"s2_server_cpu_ms_per_request[{tok}]", f"scenario 2, {tok}, {top} clients, batching on: server CPU "
            "ms per request (utime+stime of all its threads, tokenizing included)", on["server_cpu_ms_per_request"],
            TARGETS["s2_server_cpu_ms_per_request"], higher_is_better=False)
        add(f"s2_server_cpu_overhead_ms_per_request[{tok}]", f"scenario 2, {tok}, {top} clients, batching on: server "
            "CPU ms per request minus the CPU in-process encode_batch spends per text (the service's own overhead)",
            on["server_cpu_ms_per_request"] - inproc["cpu_ms_per_text"], TARGETS["s2_server_cpu_ms_per_request"],
            higher_is_better=False, tokenizing_cpu_ms_per_text_in_process=round(inproc["cpu_ms_per_text"], 4))

    soak = results["rss_soak"]
    if "peak_mb" in soak:
        add(f"rss_peak_mb[{soak['name']}]", "server RSS peak (VmHWM) over the soak, default tokenizer, as a "
            "[server]-only install runs it", soak["peak_mb"], TARGETS["rss_peak_mb"], higher_is_better=False,
            rss_start_mb=round(soak["rss_start_mb"], 1), rss_end_mb=round(soak["rss_end_mb"], 1),
            torch_loaded=soak["torch_loaded"])
        rounds = [m["rss_mb"] for m in soak["memory"][1:]]
        half = max(1, len(rounds) // 2)
        early, late = max(rounds[:half]), max(rounds[-half:])
        add(f"rss_growth_mb[{soak['name']}]", f"RSS flat under {len(rounds)} rounds of the same load: the highest "
            f"RSS of the last {half} round(s) minus the highest of the first {half}, at most 10% of the latter",
            late - early, round(0.10 * early, 1), higher_is_better=False,
            rss_after_each_round_mb=[round(x, 1) for x in rounds])
    for name, server in results["servers"].items():
        if name != "default, batching on":  # the server that ran every scenario
            continue
        memory = server["memory"]
        add(f"rss_peak_mb[{name}]", f"server RSS peak (VmHWM), {name}, python -m service serve in this venv "
            f"(torch {'loaded' if server['torch_loaded'] else 'not loaded'})", max(m["peak_mb"] for m in memory),
            TARGETS["rss_peak_mb"], higher_is_better=False, rss_start_mb=round(memory[0]["rss_mb"], 1),
            rss_end_mb=round(memory[-1]["rss_mb"], 1), torch_loaded=server["torch_loaded"])

    s3 = results["scenario3"]
    cells = _dataloader_cells(s3)
    if cells:
        per_cell = {f"{c['workers']} workers, batch {c['batch_size']}": c["ratios_vs_inprocess"]["sdk"]["batches_per_s"]
                    for c in cells if "sdk" in c.get("ratios_vs_inprocess", {})}
        values = list(per_cell.values())
        add("s3_dataloader_vs_collate_fn", "scenario 3: DataLoader batches/s through the SDK collator (default "
            "server) / in-process tokenization in the collate_fn, TOKENIZERS_PARALLELISM=false (geometric mean "
            f"over the {len(values)} cells)", _geomean(values), 1.0, worst=round(min(values), 4) if values else None,
            met_in_every_cell=all(v >= 1.0 for v in values) if values else None,
            per_cell={k: round(v, 4) for k, v in per_cell.items()})
    else:
        targets.append({"target": "s3_dataloader_vs_collate_fn", "description": "scenario 3: >= 1.0x the in-process "
                        "collate_fn baseline", "threshold": 1.0, "measured": None, "met": None,
                        "reason": s3.get("skipped", "dataloader_compare.py reported no 'targets' list")})
    return targets


def _lat(lat: dict[str, float]) -> str:
    return "/".join(f"{lat[k]:.3g}" for k in ("p50", "p90", "p99"))


def build_table(results: dict[str, Any], profile: Profile) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def busy(other: float) -> str:
        return f"busy machine: +{other:.2f} cores" if other > BUSY_CORES else ""

    bucket_names = {"short": "short <100", "medium": "medium ~300", "long": "long ~1000"}
    cells = results["scenario1"]["cells"]
    for tok in profile.tokenizers:
        for lang in corpus.LANGUAGES:
            for bucket in corpus.BUCKETS:
                group = {c["label"]: c for c in cells
                         if (c["tokenizer"], c["language"], c["bucket"]) == (tok, lang, bucket)}
                if not group:
                    continue
                enc = group["in-process encode_batch"]["texts_per_s"]
                call = group["in-process transformers __call__(pt)"]["texts_per_s"]
                for label, _, _ in S1_METHODS:
                    c = group[label]
                    r = c["texts_per_s"]
                    if label == "in-process encode_batch":
                        ratio_text = "baseline"
                    elif label in ("service JSON", "service binary"):
                        ratio_text = f"{r / enc:.2f}x enc, {r / call:.2f}x call"
                    else:
                        ratio_text = f"{r / enc:.2f}x enc"
                    service = c["where"] == "service"
                    rows.append({
                        "scenario": "1", "tokenizer": tok, "texts": f"{lang} {bucket_names[bucket]}", "variant": label,
                        "rate": report.human(r), "tokens_rate": report.human(c["tokens_per_s"]), "ratio": ratio_text,
                        "latency": _lat(c["latency_ms"]),
                        "cpu": (f"srv {c['server_or_worker_cpu_ms_per_request']:.3g} "
                                f"cli {c['client_cpu_ms_per_request']:.3g}" if service else ""),
                        "note": busy(c["other_cpu_cores"]),
                    })
    s2 = results["scenario2"]
    for tok in profile.tokenizers:
        inproc = s2["inprocess"].get(tok)
        runs = {(r["mode"], r["concurrency"]): r for r in s2["runs"] if r["tokenizer"] == tok}
        if not runs or not inproc:
            continue
        for concurrency in profile.concurrency:
            for mode, (_, _, label) in S2_MODES.items():
                if (mode, concurrency) not in runs:
                    continue
                r = runs[(mode, concurrency)]
                off = runs.get(("off", concurrency))
                note = [f"{r['errors']} non-200"] if r["errors"] else []
                if busy(r["other_cpu_cores"]):
                    note.append(busy(r["other_cpu_cores"]))
                rows.append({
                    "scenario": "2", "tokenizer": tok, "texts": "mixed ~300, 1/request",
                    "variant": f"{concurrency} clients, {label}", "rate": report.human(r["rate"]),
                    "ratio": (f"{r['rate'] / off['rate']:.2f}x off, " if mode != "off" and off else "")
                    + f"{r['rate'] / inproc['texts_per_s']:.2f}x in-proc",
                    "latency": _lat(r["latency_ms"]),
                    "cpu": f"srv {r['server_cpu_ms_per_request']:.3g} cli {r['client_cpu_ms_per_request']:.3g}",
                    "note": "; ".join(note),
                })
        rows.append({"scenario": "2", "tokenizer": tok, "texts": "mixed ~300, 256/call",
                     "variant": "in-process encode_batch, batches of 256", "rate": report.human(inproc["texts_per_s"]),
                     "tokens_rate": report.human(inproc["tokens_per_s"]), "ratio": "baseline",
                     "cpu": f"{inproc['cpu_ms_per_text']:.3g} per text", "note": busy(inproc["other_cpu_cores"])})

    s3 = results["scenario3"]
    if s3.get("skipped"):
        rows.append({"scenario": "3", "variant": "DataLoader (dataloader_compare.py)",
                     "note": "skipped: " + s3["skipped"]})
    elif _dataloader_cells(s3):
        for cell in _dataloader_cells(s3):
            local = cell["in-process"]
            label = f"{cell['workers']} workers, batch {cell['batch_size']}"
            rows.append({"scenario": "3", "texts": label, "variant": "in-process collate_fn (parallelism off)",
                         "rate": report.human(local["batches_per_s"]) + " b/s", "ratio": "baseline",
                         "cpu": f"collate {local['collate_cpu_ms_per_batch']:.3g}/batch"})
            for name, ratios in cell["ratios_vs_inprocess"].items():
                figures = cell[name]
                rows.append({"scenario": "3", "texts": label, "variant": f"SDK collator ({name})",
                             "rate": report.human(figures["batches_per_s"]) + " b/s",
                             "ratio": f"{ratios['batches_per_s']:.2f}x in-proc",
                             "cpu": f"collate {figures['collate_cpu_ms_per_batch']:.3g}, srv "
                                    f"{figures['server_cpu_ms_per_batch']:.3g}/batch"})
    else:
        for path, value in _flatten(s3.get("data"))[:40]:
            rows.append({"scenario": "3", "variant": path, "rate": report.human(value),
                         "note": "from dataloader_compare.py"})

    points = results["scenario4"]["points"]
    for tok in profile.tokenizers:
        for chars in profile.long_lengths:
            group = {p["label"]: p for p in points if p["tokenizer"] == tok and p["chars"] == chars}
            if not group:
                continue
            enc = group["in-process encode_batch"]["tokens_per_s"]
            for label, where, _ in S4_METHODS:
                p = group[label]
                rows.append({
                    "scenario": "4", "tokenizer": tok, "texts": f"mixed {chars} chars, {p['texts_per_request']}/req",
                    "variant": label, "rate": report.human(p["texts_per_s"]),
                    "tokens_rate": report.human(p["tokens_per_s"]),
                    "ratio": "baseline" if label == "in-process encode_batch" else f"{p['tokens_per_s'] / enc:.2f}x enc",
                    "latency": _lat(p["latency_ms"]), "note": busy(p["other_cpu_cores"]),
                })

    servers = list(results["servers"].values())
    if "memory" in results["rss_soak"]:
        servers.append({**results["rss_soak"], "setup": results["rss_soak"]["setup"] + " (soak)"})
    for server in servers:
        memory = server["memory"]
        rows.append({"scenario": "RSS", "tokenizer": server["name"].split(",")[0] if "name" in server else "",
                     "variant": f"server, {server['setup']}",
                     "note": f"RSS start {memory[0]['rss_mb']:.0f} MB, end {memory[-1]['rss_mb']:.0f} MB, "
                             f"peak {max(m['peak_mb'] for m in memory):.0f} MB; torch "
                             f"{'loaded' if server['torch_loaded'] else 'not loaded'}"})

    for t in results["targets"]:
        if "target" not in t:
            continue
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        measured = "-" if t["measured"] is None else f"{t['measured']:.3g}"
        extra = f" (worst cell {t['worst']:.2f})" if t.get("worst") is not None else ""
        rows.append({"scenario": "target", "variant": t["target"],
                     "ratio": f"{measured} vs {t.get('direction', '>=')} {t['threshold']:g}{extra}",
                     "note": verdict + (f": {t['reason']}" if t.get("reason") else "")})
    return rows


def machine_noise(seconds: float = 0.5) -> float:
    """Cores busy on this machine outside this process, over a short idle window."""
    probe = CpuProbe()
    before = probe.snapshot()
    time.sleep(seconds)
    return CpuProbe.delta(before, probe.snapshot())["other_cpu_cores"]


def wait_for_quiet(limit: float) -> float:
    """Wait, at most ``limit`` seconds, until other processes use under BUSY_CORES cores; return the last reading."""
    deadline = time.monotonic() + limit
    while True:
        noise = machine_noise(2.0 if limit > 0 else 0.5)
        left = deadline - time.monotonic()
        if noise <= BUSY_CORES or left <= 0:
            return noise
        log(f"other processes are using {noise:.2f} cores; waiting for a quieter machine ({left:.0f} s left)")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="every scenario with tiny counts, default tokenizer only: < 60 s on 2 cores (for CI)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench-results",
                        help="where benchmark.json, the PNG plots and the logs go (default: bench-results/)")
    parser.add_argument("--tokenizers", default=None,
                        help="comma-separated: default, bytelevel_bpe, sentencepiece (default: default,bytelevel_bpe; "
                             "smoke: default)")
    parser.add_argument("--scenarios", default="1,2,3,4,rss",
                        help="comma-separated subset of 1,2,3,4,rss (rss: the memory soak; default: all)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds per scenario (each round measures every variant once; medians are reported)")
    parser.add_argument("--wait-quiet", type=float, default=None, metavar="SECONDS",
                        help="before starting, wait at most this long for other processes to use under "
                             f"{BUSY_CORES} cores (default: 120; smoke: 0)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply every measurement duration by this (e.g. 0.5 for a quicker, noisier run)")
    return parser.parse_args(argv)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the servers


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    profile = SMOKE if args.smoke else FULL
    if args.tokenizers:
        profile = replace(profile, tokenizers=tuple(t.strip() for t in args.tokenizers.split(",") if t.strip()))
    if args.rounds:
        profile = replace(profile, rounds=args.rounds, sweep_rounds=args.rounds, s2_rounds=args.rounds,
                          long_rounds=args.rounds)
    if args.time_scale != 1.0:
        s = args.time_scale
        profile = replace(profile, seconds=profile.seconds * s, sweep_seconds=profile.sweep_seconds * s,
                          s2_seconds=profile.s2_seconds * s, long_seconds=profile.long_seconds * s)
    scenarios = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    out_dir: Path = args.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    started = time.time()
    noise = wait_for_quiet(args.wait_quiet if args.wait_quiet is not None else (0.0 if args.smoke else 120.0))
    if noise > BUSY_CORES:
        log(f"warning: other processes are using {noise:.2f} cores; figures will be noisy")
    meta = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "smoke": args.smoke,
        "cpus": available_cpus(),
        "tokenizers": list(profile.tokenizers),
        "scenarios": sorted(scenarios),
        "profile": asdict(profile),
        "load_generator": loadgen.LOAD_GENERATOR,
        "other_cpu_cores_at_start": round(noise, 3),
        "python": sys.version.split()[0],
        "versions": {name: _version(name) for name in ("tokenizers", "transformers", "torch", "fastapi", "uvicorn",
                                                       "orjson", "safetensors", "numpy")},
    }
    with tempfile.TemporaryDirectory(prefix="tokenizer-bench-") as work:
        bench = Bench(profile, out_dir, scenarios, Path(work))
        results = bench.run()
    results = {"meta": meta, **results}
    results["meta"]["seconds"] = round(time.time() - started, 1)
    results["targets"] = evaluate_targets(results, profile)
    rows = build_table(results, profile)
    results["table"] = rows
    table = report.format_table(rows)
    results["plots"] = report.draw_plots(results, out_dir)
    json_path = out_dir / "benchmark.json"
    json_path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    text = "\n".join([
        f"tokenizer-service benchmark ({'smoke' if args.smoke else 'full'}; {meta['cpus']} CPUs; "
        f"load generator: {loadgen.LOAD_GENERATOR}; {results['meta']['seconds']:.0f} s)",
        "texts/s and tokens/s: medians over rounds; tokens are real (unpadded) tokens; 'enc' = in-process "
        "encode_batch, 'call' = in-process transformers __call__; CPU ms per request: srv = server process "
        "(all threads), cli = this load generator",
        table,
    ])
    (out_dir / "benchmark.txt").write_text(text + "\n", "utf-8")
    print(text)
    print(f"\nwrote {json_path}, benchmark.txt and {', '.join(Path(p).name for p in results['plots'].values())}")
    return 0


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
