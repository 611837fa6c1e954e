"""A DataLoader fed through the SDK collator vs tokenizing in-process in the collate_fn, same batches.

    .venv/bin/python -m benchmarks.dataloader_compare --out bench-results/dataloader_compare.json
    .venv/bin/python -m benchmarks.dataloader_compare --smoke --out /tmp/dl.json     # < 60 s

One run, bounded: it starts its own server (``python -m service serve`` on 127.0.0.1, a free port), measures,
stops the server by PID (also on error, Ctrl-C or SIGTERM) and prints the figures side by side.

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

Texts: real Chinese product reviews and English paragraphs of the Python docs (scripts/package_assets.py),
interleaved deterministically.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.progress import log, publish
from testkit import assets as package_assets
from testkit.servers import REPO, ServerProcess

# In-process tokenization in the workers, the way it can run without freezing: parallelism off. Set before
# anything imports tokenizers (neither testkit module does). (The server sets its own: it turns parallelism on.)
os.environ["TOKENIZERS_PARALLELISM"] = "false"

OPTIONS = {"padding": "longest", "truncation": True, "max_length": 128}


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all threads, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def measure_cells(
    variants: dict[str, tuple[Callable, int | None]], texts: list[str], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One cell per (workers, batch size): each variant's medians over ``args.rounds`` rounds that rotate
    the variants' order. ``variants``: name -> (collate_fn, pid of the server doing the work, if any)."""
    cells = []
    for workers in args.workers:
        for batch_size in args.batch_sizes:
            runs: dict[str, list[dict]] = {name: [] for name in variants}
            for round_ in range(args.rounds):
                order = list(variants)
                order = order[round_ % len(order) :] + order[: round_ % len(order)]  # rotate: no fixed position
                for name in order:
                    collate, pid = variants[name]
                    runs[name].append(
                        measure_loader(texts, collate, workers, batch_size, args.max_batches, args.seconds, pid)
                    )
            cell: dict[str, Any] = {"workers": workers, "batch_size": batch_size, "identical_batches": True}
            for name, values in runs.items():
                cell[name] = {
                    field: statistics.median(v[field] for v in values)
                    for field in ("batches_per_s", "collate_cpu_ms_per_batch", "server_cpu_ms_per_batch")
                } | {"rounds": values}
            log(
                f"workers={workers} batch={batch_size}: "
                + ", ".join(f"{name} {cell[name]['batches_per_s']:.1f} b/s" for name in variants)
            )
            cells.append(cell)
    return cells


def dataloader_comparison(servers: dict[str, ServerProcess], args: argparse.Namespace, texts: list[str]) -> list[dict]:
    from transformers import AutoTokenizer

    from service.client import TokenizerClient
    from service.engine.loading import DEFAULT_TOKENIZER_DIR

    tokenizer = AutoTokenizer.from_pretrained(str(args.tokenizer or DEFAULT_TOKENIZER_DIR))
    clients = {name: TokenizerClient(server.url) for name, server in servers.items()}
    # name -> (collate_fn, pid of the server doing the work, if any)
    variants: dict[str, tuple[Callable, int | None]] = {
        name: (client.collator(**OPTIONS), servers[name].pid) for name, client in clients.items()
    }
    variants["in-process"] = (InProcessCollate(tokenizer), None)
    check_identical_batches(variants, texts, args.batch_sizes)
    cells = []
    for cell in measure_cells(variants, texts, args):
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
def _cpu_per_request(call: Callable[[], Any], requests: int, threads: int) -> dict[str, float]:
    for _ in range(min(20, requests)):
        call()
    per_thread = max(1, requests // threads)

    def work() -> None:
        for _ in range(per_thread):
            call()

    cpu, wall = time.process_time(), time.perf_counter()
    if threads == 1:
        work()
    else:
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
    total = per_thread * threads
    return {
        "requests": total,
        "cpu_ms_per_request": 1000 * (time.process_time() - cpu) / total,
        "wall_ms_per_request": 1000 * (time.perf_counter() - wall) / total,
    }


def transport_comparison(url: str, args: argparse.Namespace, texts: list[str]) -> dict[str, Any]:
    import asyncio

    from service.client import (
        AsyncHTTPTransport,
        AsyncHTTPXTransport,
        AsyncTokenizerClient,
        HTTPTransport,
        HTTPXTransport,
        TokenizerClient,
    )

    payloads = {"1 text": texts[:1], "64 texts": texts[:64]}
    results: dict[str, Any] = {}
    for _ in range(args.transport_rounds):  # interleaved rounds; medians below
        for name, transport in (
            ("stdlib http.client (HTTPTransport, default)", HTTPTransport),
            ("httpx.Client (HTTPXTransport)", HTTPXTransport),
        ):
            client = TokenizerClient(url, transport=transport())
            for label, payload in payloads.items():
                for threads in (1, 32):
                    figure = _cpu_per_request(
                        functools.partial(client, payload, return_tensors="pt", **OPTIONS),
                        args.transport_requests,
                        threads,
                    )
                    results.setdefault(f"{name} | {label} | {threads} thread(s)", []).append(figure)
            client.close()

        async def concurrent(transport: Any, payload: list[str], tasks: int) -> dict[str, float]:
            async with AsyncTokenizerClient(url, transport=transport) as client:
                for _ in range(20):
                    await client(payload, return_tensors="pt", **OPTIONS)
                per_task = max(1, args.transport_requests // tasks)

                async def work() -> None:
                    for _ in range(per_task):
                        await client(payload, return_tensors="pt", **OPTIONS)

                cpu, wall = time.process_time(), time.perf_counter()
                await asyncio.gather(*(work() for _ in range(tasks)))
                total = per_task * tasks
                return {
                    "requests": total,
                    "cpu_ms_per_request": 1000 * (time.process_time() - cpu) / total,
                    "wall_ms_per_request": 1000 * (time.perf_counter() - wall) / total,
                }

        for name, transport in (
            ("asyncio streams (AsyncHTTPTransport, default)", AsyncHTTPTransport),
            ("httpx.AsyncClient (AsyncHTTPXTransport)", AsyncHTTPXTransport),
        ):
            for label, payload in payloads.items():
                figure = asyncio.run(concurrent(transport(), payload, 32))
                results.setdefault(f"{name} | {label} | 32 tasks", []).append(figure)
    return {
        key: {
            "cpu_ms_per_request": statistics.median(r["cpu_ms_per_request"] for r in runs),
            "wall_ms_per_request": statistics.median(r["wall_ms_per_request"] for r in runs),
            "rounds": runs,
        }
        for key, runs in results.items()
    }


# -- main --------------------------------------------------------------------------------------------------
def print_table(result: dict[str, Any]) -> None:
    print(
        "\nDataLoader batches/s (fork workers; padding=longest, truncation, max_length=128; medians of "
        f"{result['settings']['rounds']} rounds). CPU in ms per batch: 'client' = the worker's collate_fn "
        "(HTTP client for the SDK, the tokenizer in-process), 'server' = the server process."
    )
    names = [k for k in result["dataloader"][0]["ratios_vs_inprocess"]]
    header = f"{'workers':>7} {'batch':>5} | {'in-process':>10}"
    for name in names:
        header += f" | {name + ' b/s':>16} {'ratio':>5} {'client':>6} {'server':>6}"
    print(header + f" | {'in-proc CPU':>11}")
    for cell in result["dataloader"]:
        line = f"{cell['workers']:>7} {cell['batch_size']:>5} | {cell['in-process']['batches_per_s']:>10.1f}"
        for name in names:
            figures = cell[name]
            line += (
                f" | {figures['batches_per_s']:>16.1f} {cell['ratios_vs_inprocess'][name]['batches_per_s']:>5.2f}"
                f" {figures['collate_cpu_ms_per_batch']:>6.2f} {figures['server_cpu_ms_per_batch']:>6.2f}"
            )
        print(line + f" | {cell['in-process']['collate_cpu_ms_per_batch']:>11.2f}")
    print("\nClient CPU per request (process_time / requests; binary answer)")
    for key, figure in result["transports"].items():
        print(f"  {key:<70} {figure['cpu_ms_per_request']:6.3f} ms CPU  {figure['wall_ms_per_request']:7.3f} ms wall")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "bench-results" / "dataloader_compare.json",
        help="where to write the JSON results",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny counts, for CI (< 60 s)")
    parser.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    parser.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[32, 64])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per cell (median reported)")
    parser.add_argument("--max-batches", type=int, default=300, help="batches per measurement, at most")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement, at most")
    parser.add_argument("--transport-requests", type=int, default=320, help="requests per transport figure")
    parser.add_argument("--transport-rounds", type=int, default=2, help="interleaved rounds of transport figures")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="a HuggingFace tokenizer directory (default: the embedded default tokenizer)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.workers, args.batch_sizes, args.rounds = [2], [64], 1
        args.max_batches, args.seconds, args.transport_requests, args.transport_rounds = 30, 1.0, 64, 1

    # SIGTERM (a harness's timeout) unwinds like Ctrl-C, so the finally below stops the server.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    texts = load_texts(4096)
    server_args = ["--model", str(args.tokenizer)] if args.tokenizer else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    env = {"TOKENIZER_SERVICE_LOG_LEVEL": "warning"}
    servers = {  # the default server, and one that holds a lone request 2 ms back for company
        "sdk": ServerProcess(*server_args, env=env, log_path=args.out.with_suffix(".server.log")),
        "sdk, --batch-wait-ms 2": ServerProcess(
            *server_args, "--batch-wait-ms", "2", env=env, log_path=args.out.with_suffix(".server-wait2.log")
        ),
    }
    started = time.time()
    try:
        for name, server in servers.items():
            log(f"starting the server '{name}' on {server.url}")
            server.start()
        log("transports")
        transports = transport_comparison(servers["sdk"].url, args, texts)
        log("DataLoader")
        cells = dataloader_comparison(servers, args, texts)
    finally:
        for server in servers.values():
            server.stop()
    result = {
        "settings": {
            "options": OPTIONS,
            "workers": args.workers,
            "batch_sizes": args.batch_sizes,
            "rounds": args.rounds,
            "max_batches": args.max_batches,
            "seconds": args.seconds,
            "tokenizer": str(args.tokenizer or "embedded default"),
            "texts": len(texts),
            "start_method": "fork",
            "inprocess_tokenizers_parallelism": "false",
            "smoke": args.smoke,
        },
        "dataloader": cells,
        "transports": transports,
        "seconds": time.time() - started,
    }
    publish(result, args.out, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
