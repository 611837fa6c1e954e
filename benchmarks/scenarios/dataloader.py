"""Scenario 3: a DataLoader fed through the SDK collator vs tokenizing in-process in the collate_fn, same batches.

In a process of its own (it forks DataLoader workers, and sets ``TOKENIZERS_PARALLELISM=false`` there), against
that process's shared default server and one with a 2 ms gather window.

- **DataLoader**: batches/s of ``DataLoader(texts, batch_size=B, num_workers=W)`` (fork, W in 2 and 4, B in
  32 and 64), ``padding="longest", truncation=True, max_length=128``, with
  ``collate_fn=client.collator(...)`` ("sdk") vs a collate_fn calling the transformers tokenizer loaded in
  the parent with ``TOKENIZERS_PARALLELISM=false`` ("in-process", what training code does today to avoid
  the fork freeze). Same texts, same batches (checked identical). Rounds interleave the variants; medians
  are reported. Also: CPU per batch *inside the worker's collate_fn* (process_time: the HTTP client for
  sdk, the tokenizer for in-process -- the CPU the worker cannot spend feeding the GPU) and the server's
  CPU per batch (utime+stime from /proc). On a small machine the server shares the cores with the
  workers; in a deployment it runs elsewhere.
- **Transports**: client CPU per request (process_time / requests) of the default stdlib transport
  (``HTTPTransport``) vs ``httpx.Client`` (``HTTPXTransport``), one request at a time and from 32 threads,
  for a 1-text and a 64-text request (binary answer); and of the async client's default asyncio-streams
  transport (``AsyncHTTPTransport``) vs ``httpx.AsyncClient`` (``AsyncHTTPXTransport``), 32 concurrent tasks.

Texts: real Chinese product reviews and English paragraphs of the Python docs, interleaved deterministically.
"""

from __future__ import annotations

import functools
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import (
    CLOCK_TICKS,
    FORKS_WITH_PARALLELISM_OFF,
    Row,
    Scenario,
    Settings,
    human,
    in_rounds,
    log,
    medians,
    per_cell_target,
    process_ticks,
)
from benchmarks.processes import BenchServer
from benchmarks.scenarios.measuring import shared_server
from testkit import assets as package_assets

OPTIONS = {"padding": "longest", "truncation": True, "max_length": 128}


@dataclass(frozen=True)
class Counts:
    workers: tuple[int, ...] = (2, 4)
    batch_sizes: tuple[int, ...] = (32, 64)
    rounds: int = 3
    max_batches: int = 300  # per measurement
    seconds: float = 3.0  # per measurement, at most
    transport_requests: int = 320  # per transport figure
    transport_rounds: int = 2


FULL = Counts()
SMOKE = Counts((2,), (64,), rounds=1, max_batches=20, seconds=1.0, transport_requests=16, transport_rounds=1)


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all threads, in seconds."""
    return process_ticks(pid) / CLOCK_TICKS


def load_texts(count: int) -> list[str]:
    zh = package_assets.chinese_reviews()
    en = package_assets.english_paragraphs()
    texts = []
    for i in range(count):  # 3 reviews, 1 paragraph, ...: short texts with some truncated long ones
        texts.append(en[(i // 4) % len(en)] if i % 4 == 3 else zh[(i * 7919) % len(zh)])
    return texts


# -- collate functions (module level: picklable) -----------------------------------------------------------
class InProcessCollate:
    """What training code does today: the tokenizer, loaded in the parent, called in the worker."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, texts: list[str]) -> dict[str, Any]:
        return dict(self.tokenizer(texts, return_tensors="pt", **OPTIONS))


class CpuTimed:
    """Wraps a collate_fn; adds the worker CPU seconds it used to the batch."""

    def __init__(self, inner: Callable[[list[str]], dict[str, Any]]) -> None:
        self.inner = inner

    def __call__(self, texts: list[str]) -> dict[str, Any]:
        started = time.process_time()
        batch = self.inner(texts)
        batch["collate_cpu_seconds"] = time.process_time() - started
        return batch


# -- DataLoader --------------------------------------------------------------------------------------------
def measure_loader(
    texts: list[str],
    collate: Callable,
    workers: int,
    batch_size: int,
    max_batches: int,
    seconds: float,
    server_pids: int | Sequence[int] | None,
) -> dict[str, Any]:
    """Batches/s of one DataLoader over ``texts`` (its first ``2 x workers`` batches not counted: the workers'
    start-up), the CPU per batch inside the workers' ``collate`` and of the servers doing the work, if any
    (one pid or several: a launched service's replicas)."""
    from torch.utils.data import DataLoader

    pids = () if server_pids is None else (server_pids,) if isinstance(server_pids, int) else tuple(server_pids)

    warmup = 2 * workers  # the first batches pay for the worker start-up (fork, first connection)
    needed = (warmup + max_batches) * batch_size
    data = (texts * (needed // len(texts) + 1))[:needed]
    loader = DataLoader(
        data,
        batch_size=batch_size,
        num_workers=workers,
        multiprocessing_context="fork",
        collate_fn=CpuTimed(collate),
        prefetch_factor=2,
    )
    iterator = iter(loader)
    for _ in range(warmup):
        next(iterator)
    cpu: list[float] = []
    server_before = sum(map(process_cpu_seconds, pids))
    started = time.perf_counter()
    for batch in iterator:
        cpu.append(batch["collate_cpu_seconds"])
        if len(cpu) >= max_batches or time.perf_counter() - started >= seconds:
            break
    elapsed = time.perf_counter() - started
    server_cpu = sum(map(process_cpu_seconds, pids)) - server_before
    del iterator  # shuts the workers down
    return {
        "batches": len(cpu),
        "seconds": elapsed,
        "batches_per_s": len(cpu) / elapsed,
        "collate_cpu_ms_per_batch": 1000 * statistics.mean(cpu),
        "server_cpu_ms_per_batch": 1000 * server_cpu / len(cpu),
    }


def check_identical_batches(
    variants: dict[str, tuple[Callable, int | None]], texts: list[str], batch_sizes: list[int]
) -> None:
    """Every variant's collate_fn gives the in-process tensors (same keys, same order, same values)."""
    import torch

    for batch_size in batch_sizes:
        sample = texts[:batch_size]
        theirs = variants["in-process"][0](sample)
        for name, (collate, _) in variants.items():
            ours = collate(sample)
            if list(ours) != list(theirs) or not all(torch.equal(ours[k], theirs[k]) for k in theirs):
                raise AssertionError(f"{name} and in-process batches differ (batch size {batch_size})")


def measure_cells(variants: dict[str, tuple[Callable, int | None]], texts: list[str], counts: Counts) -> list[dict]:
    """One cell per (workers, batch size): each variant's medians over rounds that rotate the variants' order.
    ``variants``: name -> (collate_fn, pid of the server doing the work, if any)."""
    cells = []
    for workers in counts.workers:
        for batch_size in counts.batch_sizes:

            def one(name: str, workers: int = workers, batch_size: int = batch_size) -> dict[str, Any]:
                collate, pid = variants[name]
                return measure_loader(texts, collate, workers, batch_size, counts.max_batches, counts.seconds, pid)

            runs = in_rounds(list(variants), one, counts.rounds)
            cell: dict[str, Any] = {"workers": workers, "batch_size": batch_size, "identical_batches": True}
            cell |= {name: medians(values) for name, values in runs.items()}
            log(
                f"workers={workers} batch={batch_size}: "
                + ", ".join(f"{n} {cell[n]['batches_per_s']:.1f} b/s" for n in variants)
            )
            cells.append(cell)
    return cells


def dataloader_comparison(servers: dict[str, BenchServer], counts: Counts, texts: list[str]) -> list[dict]:
    from transformers import AutoTokenizer

    from service.client import TokenizerClient
    from service.engine.loading import DEFAULT_TOKENIZER_DIR

    tokenizer = AutoTokenizer.from_pretrained(str(DEFAULT_TOKENIZER_DIR))
    clients = {name: TokenizerClient(server.url) for name, server in servers.items()}
    # name -> (collate_fn, pid of the server doing the work, if any)
    variants: dict[str, tuple[Callable, int | None]] = {
        name: (client.collator(**OPTIONS), servers[name].pid) for name, client in clients.items()
    }
    variants["in-process"] = (InProcessCollate(tokenizer), None)
    check_identical_batches(variants, texts, list(counts.batch_sizes))
    cells = []
    for cell in measure_cells(variants, texts, counts):
        local = cell["in-process"]
        cell["ratios_vs_inprocess"] = {
            name: {
                "batches_per_s": cell[name]["batches_per_s"] / local["batches_per_s"],
                "collate_cpu": cell[name]["collate_cpu_ms_per_batch"] / local["collate_cpu_ms_per_batch"],
            }
            for name in clients
        }
        cells.append(cell)
    for client in clients.values():
        client.close()
    return cells


# -- transports --------------------------------------------------------------------------------------------
SYNC_TRANSPORTS = {  # name in the table: the SDK's class
    "stdlib http.client (HTTPTransport, default)": "HTTPTransport",
    "httpx.Client (HTTPXTransport)": "HTTPXTransport",
}
ASYNC_TRANSPORTS = {
    "asyncio streams (AsyncHTTPTransport, default)": "AsyncHTTPTransport",
    "httpx.AsyncClient (AsyncHTTPXTransport)": "AsyncHTTPXTransport",
}


def transport_comparison(url: str, counts: Counts, texts: list[str]) -> dict[str, Any]:
    """Client CPU per request of each transport, one request at a time and from 32 threads (sync) or 32 tasks
    (async), for 1 and 64 texts; in interleaved rounds, medians."""
    import asyncio

    from service import client as sdk

    payloads = {"1 text": texts[:1], "64 texts": texts[:64]}
    warmup, total = min(20, counts.transport_requests // 4), counts.transport_requests

    def timed(work: Callable[[], object], requests: int) -> dict[str, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        work()
        per = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
        return {"requests": requests} | {f"{k}_ms_per_request": 1000 * v / requests for k, v in per.items()}

    async def concurrent(transport: Any, payload: list[str], tasks: int) -> dict[str, float]:
        async with sdk.AsyncTokenizerClient(url, transport=transport) as client:
            for _ in range(warmup):
                await client(payload, return_tensors="pt", **OPTIONS)
            per_task = max(1, total // tasks)

            async def work() -> None:
                for _ in range(per_task):
                    await client(payload, return_tensors="pt", **OPTIONS)

            cpu, wall = time.process_time(), time.perf_counter()
            await asyncio.gather(*(work() for _ in range(tasks)))
            per = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
            return {"requests": per_task * tasks} | {
                f"{k}_ms_per_request": 1000 * v / (per_task * tasks) for k, v in per.items()
            }

    def one(variant: tuple[str, str, int]) -> dict[str, float]:
        name, label, parallel = variant
        if name in ASYNC_TRANSPORTS:
            return asyncio.run(concurrent(getattr(sdk, ASYNC_TRANSPORTS[name])(), payloads[label], parallel))
        client = sdk.TokenizerClient(url, transport=getattr(sdk, SYNC_TRANSPORTS[name])())
        call = functools.partial(client, payloads[label], return_tensors="pt", **OPTIONS)
        for _ in range(warmup):
            call()
        per_thread = max(1, total // parallel)

        def work() -> None:
            for _ in range(per_thread):
                call()

        def in_threads() -> None:
            threads = [threading.Thread(target=work) for _ in range(parallel)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

        figure = timed(in_threads, per_thread * parallel)
        client.close()
        return figure

    variants = [(name, label, n) for name in SYNC_TRANSPORTS for label in payloads for n in (1, 32)]
    variants += [(name, label, 32) for name in ASYNC_TRANSPORTS for label in payloads]
    runs = in_rounds(variants, one, counts.transport_rounds, "scenario 3: transports")
    unit = {name: "thread(s)" for name in SYNC_TRANSPORTS} | {name: "tasks" for name in ASYNC_TRANSPORTS}
    return {f"{name} | {label} | {n} {unit[name]}": medians(rounds) for (name, label, n), rounds in runs.items()}


def measure(settings: Settings) -> dict[str, Any]:
    """The transports, then the DataLoader cells, against this scenario's own two servers."""
    counts = settings.counts(FULL, SMOKE)
    # In-process tokenization in the workers, the way it can run without freezing: parallelism off (this process
    # is the scenario's own; the servers set their own).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    texts = load_texts(4096)
    wait2 = BenchServer("default", True, settings.log_dir, extra_args=("--batch-wait-ms", "2"), variant="wait 2 ms")
    try:
        # the process's shared default server, and one that holds a lone request 2 ms back for company
        servers = {"sdk": shared_server(settings, "default"), "sdk, --batch-wait-ms 2": wait2.start()}
        log("scenario 3: transports")
        transports = transport_comparison(servers["sdk"].url, counts, texts)
        log("scenario 3: DataLoader")
        cells = dataloader_comparison(servers, counts, texts)
    finally:
        wait2.stop()
    settings_ = {
        "options": OPTIONS,
        "texts": len(texts),
        "start_method": "fork",
        "inprocess_tokenizers_parallelism": "false",
    }
    return {"settings": settings_, "dataloader": cells, "transports": transports}


def rows(section: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for cell in section.get("dataloader", []):
        local, label = cell["in-process"], f"{cell['workers']} workers, batch {cell['batch_size']}"
        out.append(
            {
                "scenario": "3",
                "texts": label,
                "variant": "in-process collate_fn (parallelism off)",
                "rate": human(local["batches_per_s"]) + " b/s",
                "ratio": "baseline",
                "cpu": f"collate {local['collate_cpu_ms_per_batch']:.3g}/batch",
            }
        )
        for name, ratios in cell["ratios_vs_inprocess"].items():
            figures = cell[name]
            collate, server = figures["collate_cpu_ms_per_batch"], figures["server_cpu_ms_per_batch"]
            out.append(
                {
                    "scenario": "3",
                    "texts": label,
                    "variant": f"SDK collator ({name})",
                    "rate": human(figures["batches_per_s"]) + " b/s",
                    "ratio": f"{ratios['batches_per_s']:.2f}x in-proc",
                    "cpu": f"collate {collate:.3g} + srv {server:.3g} = {collate + server:.3g}/batch",
                }
            )
    for key, figure in section.get("transports", {}).items():
        cpu, wall = figure["cpu_ms_per_request"], figure["wall_ms_per_request"]
        out.append(
            {"scenario": "3", "texts": "transports", "variant": key, "cpu": f"{cpu:.3g} client, {wall:.3g} ms wall"}
        )
    return out


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    cells = section.get("dataloader", [])
    per_cell = {
        f"{c['workers']} workers, batch {c['batch_size']}": c["ratios_vs_inprocess"]["sdk"]["batches_per_s"]
        for c in cells
    }
    description = (
        "scenario 3: DataLoader batches/s through the SDK collator (default server) / in-process tokenization in the "
        f"collate_fn, TOKENIZERS_PARALLELISM=false (geometric mean over the {len(per_cell)} cells)"
    )
    return [per_cell_target("s3_dataloader_vs_collate_fn", description, per_cell, 1.0)] if cells else []


SCENARIO = Scenario(
    "3",
    "DataLoader through the SDK collator vs the tokenizer in the collate_fn; the client transports' CPU",
    measure,
    rows,
    targets,
    process=FORKS_WITH_PARALLELISM_OFF,
    needs_torch=True,
    timeout=(600.0, 120.0),
)
