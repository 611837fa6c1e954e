"""A launched service (``TokenizerClient.launch``: a Unix socket) against the same server on TCP loopback and
against tokenizing in the collate_fn; one-text round trips over both; and what a launch costs.

    .venv/bin/python -m benchmarks.launch_compare --out bench-results/launch_compare.json
    .venv/bin/python -m benchmarks.launch_compare --smoke --out /tmp/launch.json     # ~1 min

One run, bounded: it launches its own service (in a private launch directory of its own), starts a TCP
server (``python -m service serve`` on 127.0.0.1, a free port), measures, and stops both by PID (also on
error, Ctrl-C or SIGTERM). Both servers serve the embedded default tokenizer with the same settings.

- **Round trips**: one text per request (a review, binary answer as ``return_tensors="pt"``), one request at
  a time and from 8 threads, through the same sync client over the socket and over TCP; and bare
  ``GET /healthz`` through the client's transport (the HTTP exchange without the tokenizer): requests/s, the
  client's CPU and the server's CPU per request. Rounds alternate which socket goes first.
- **DataLoader**: batches/s of ``DataLoader(texts, batch_size=B, num_workers=W)`` (fork; W in 2 and 4, B in
  32 and 64; ``padding="longest", truncation=True, max_length=128``) with the launched client's collator, the
  TCP client's collator, and a collate_fn tokenizing in the worker with ``TOKENIZERS_PARALLELISM=false``
  (what training code does today to dodge the fork freeze). Same texts, same batches (checked identical);
  CPU per batch in the worker's collate_fn and in the server (``benchmarks.dataloader_compare`` measures
  the same way).
- **Start-up**: seconds from ``TokenizerClient.launch(model)`` to a ready service, for the embedded default
  and a large tokenizer (Llama 3.2's 128k-token BPE, 9 MB of tokenizer.json, from a package that ships it),
  each launched afresh several times; beside them, what attaching to the running service costs another
  process (a second local rank), and what loading the same tokenizer in-process costs a fresh interpreter
  (``import transformers`` + ``AutoTokenizer.from_pretrained``).
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.dataloader_compare import (
    OPTIONS,
    InProcessCollate,
    check_identical_batches,
    load_texts,
    measure_cells,
    process_cpu_seconds,
)
from benchmarks.machine import machine_noise
from benchmarks.progress import log, publish
from service.launch.rendezvous import LAUNCH_DIR_ENV
from service.transport import HTTPTransport, Request, Timeout
from service.wire import HEALTH_PATH
from testkit import assets
from testkit.servers import REPO, ServerProcess

ROUND_TRIP_OPTIONS = {"padding": True, "return_tensors": "pt"}


# -- round trips -----------------------------------------------------------------------------------------
def round_trips(call: Callable[[], Any], server_pid: int, requests: int, threads: int) -> dict[str, float]:
    """``requests`` calls (split over ``threads``): requests/s, client and server CPU per request."""
    for _ in range(20):
        call()
    per_thread = max(1, requests // threads)

    def work() -> None:
        for _ in range(per_thread):
            call()

    cpu, server, wall = time.process_time(), process_cpu_seconds(server_pid), time.perf_counter()
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - wall
    total = per_thread * threads
    return {
        "requests_per_s": total / elapsed,
        "client_cpu_us_per_request": 1e6 * (time.process_time() - cpu) / total,
        "server_cpu_us_per_request": 1e6 * (process_cpu_seconds(server_pid) - server) / total,
    }


def round_trip_comparison(clients: dict[str, tuple[Any, int]], text: str, args: argparse.Namespace) -> dict:
    """Per socket: one-text ``/encode`` calls through the client, and bare ``GET /healthz`` through its
    transport (the HTTP exchange alone, no tokenizer), alternating which socket goes first."""
    calls: dict[str, dict[str, Callable[[], Any]]] = {"encode 1 text": {}, "GET /healthz": {}}
    for name, (client, _) in clients.items():
        calls["encode 1 text"][name] = functools.partial(client, text, **ROUND_TRIP_OPTIONS)
        probe = Request("GET", client.urls[0] + HEALTH_PATH, {}, timeout=Timeout())
        calls["GET /healthz"][name] = functools.partial(HTTPTransport().handle_request, probe)
    runs: dict[str, list[dict[str, float]]] = {}
    for round_ in range(args.rounds):
        for kind, by_socket in calls.items():
            for threads in (1, 8):
                names = list(by_socket) if round_ % 2 == 0 else list(reversed(by_socket))
                for name in names:
                    figure = round_trips(by_socket[name], clients[name][1], args.requests, threads)
                    runs.setdefault(f"{kind} | {name} | {threads} thread(s)", []).append(figure)
    result: dict[str, Any] = {
        key: {
            field: statistics.median(run[field] for run in values)
            for field in ("requests_per_s", "client_cpu_us_per_request", "server_cpu_us_per_request")
        }
        | {"rounds": values}
        for key, values in runs.items()
    }
    for kind in calls:
        for threads in (1, 8):
            unix, tcp = (result[f"{kind} | {name} | {threads} thread(s)"] for name in clients)
            result[f"{kind} | ratio unix/tcp | {threads} thread(s)"] = unix["requests_per_s"] / tcp["requests_per_s"]
    return result


# -- DataLoader ------------------------------------------------------------------------------------------
def dataloader_comparison(
    variants: dict[str, tuple[Callable, int | None]], texts: list[str], args: argparse.Namespace
) -> list[dict]:
    check_identical_batches(variants, texts, args.batch_sizes)
    cells = measure_cells(variants, texts, args)
    for cell in cells:
        rate = {name: cell[name]["batches_per_s"] for name in variants}
        cell["ratios"] = {
            "launched / in-process": rate["launched (unix socket)"] / rate["in-process"],
            "tcp / in-process": rate["tcp loopback"] / rate["in-process"],
            "launched / tcp": rate["launched (unix socket)"] / rate["tcp loopback"],
        }
    return cells


# -- start-up --------------------------------------------------------------------------------------------
ATTACH = """
import sys, time
started = time.perf_counter()
from service.client import TokenizerClient
client = TokenizerClient.launch(None if sys.argv[1] == "default" else sys.argv[1], log_level="warning")
print(time.perf_counter() - started, client.service.launched)
"""
IN_PROCESS_LOAD = """
import sys, time
started = time.perf_counter()
from transformers import AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[1])
print(time.perf_counter() - started)
"""


def python_seconds(source: str, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", source, *args], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    return done.stdout.split()


def startup_costs(models: dict[str, Path | None], repeats: int) -> dict[str, Any]:
    from service.client import TokenizerClient
    from service.engine.loading import DEFAULT_TOKENIZER_DIR

    result: dict[str, Any] = {}
    for name, model in models.items():
        launches, attaches, loads = [], [], []
        for _ in range(repeats):
            started = time.perf_counter()
            client = TokenizerClient.launch(str(model) if model else None, log_level="warning")
            launches.append(time.perf_counter() - started)
            assert client.service.launched  # a fresh launch each time: the previous one stopped at shutdown
            seconds, launched = python_seconds(ATTACH, str(model) if model else "default")
            assert launched == "False"
            attaches.append(float(seconds))
            client.shutdown()
            loads.append(float(python_seconds(IN_PROCESS_LOAD, str(model or DEFAULT_TOKENIZER_DIR))[0]))
        result[name] = {
            "launch_seconds": statistics.median(launches),
            "attach_seconds": statistics.median(attaches),
            "in_process_load_seconds": statistics.median(loads),
            "runs": {"launch": launches, "attach": attaches, "in_process_load": loads},
        }
        log(
            f"start-up, {name}: launch {result[name]['launch_seconds']:.2f} s, attach "
            f"{result[name]['attach_seconds']:.2f} s, in-process load {result[name]['in_process_load_seconds']:.2f} s"
        )
    return result


# -- main ------------------------------------------------------------------------------------------------
def print_table(result: dict[str, Any]) -> None:
    noise = result["machine_noise_cores"]
    print(f"\nOther processes used {noise['before']:.2f} cores before the run and {noise['after']:.2f} after it.")
    print(
        "\nOne-text round trips (binary answer), medians of "
        f"{result['settings']['rounds']} rounds: requests/s, client and server CPU per request (us)"
    )
    for key, figures in result["round_trips"].items():
        if "ratio" in key:
            print(f"  {key:<48} {figures:6.2f}x")
        else:
            print(
                f"  {key:<48} {figures['requests_per_s']:8.0f} req/s"
                f"  client {figures['client_cpu_us_per_request']:6.0f}"
                f"  server {figures['server_cpu_us_per_request']:6.0f}"
            )
    print(
        "\nDataLoader batches/s (fork workers; padding=longest, truncation, max_length=128); CPU ms per batch: "
        "'client' = the worker's collate_fn, 'server' = the server process"
    )
    names = ["launched (unix socket)", "tcp loopback", "in-process"]
    header = f"{'workers':>7} {'batch':>5}" + "".join(f" | {n:>22} {'client':>6} {'server':>6}" for n in names)
    print(header + " | launched/in-proc  launched/tcp")
    for cell in result["dataloader"]:
        line = f"{cell['workers']:>7} {cell['batch_size']:>5}"
        for name in names:
            f = cell[name]
            line += f" | {f['batches_per_s']:>22.1f}"
            line += f" {f['collate_cpu_ms_per_batch']:>6.2f} {f['server_cpu_ms_per_batch']:>6.2f}"
        ratios = cell["ratios"]
        print(line + f" | {ratios['launched / in-process']:>15.2f}x {ratios['launched / tcp']:>12.2f}x")
    print("\nStart-up (seconds, medians): launch() to ready / attach from another process / in-process load")
    for name, figures in result["startup"].items():
        print(
            f"  {name:<40} {figures['launch_seconds']:6.2f}  {figures['attach_seconds']:6.2f}  "
            f"{figures['in_process_load_seconds']:6.2f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "launch_compare.json")
    parser.add_argument("--smoke", action="store_true", help="tiny counts, for CI (~1 min)")
    parser.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    parser.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[32, 64])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per figure (median reported)")
    parser.add_argument("--max-batches", type=int, default=300, help="batches per DataLoader measurement, at most")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per DataLoader measurement, at most")
    parser.add_argument("--requests", type=int, default=2000, help="one-text requests per round-trip figure")
    parser.add_argument("--startup-repeats", type=int, default=3, help="fresh launches per tokenizer")
    args = parser.parse_args(argv)
    if args.smoke:
        args.workers, args.batch_sizes, args.rounds, args.max_batches, args.seconds = [2], [32], 1, 20, 1.0
        args.requests, args.startup_repeats = 100, 1

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds like Ctrl-C: the finally stops the servers
    launch_dir = Path(tempfile.mkdtemp(prefix="tsb-", dir="/tmp"))
    os.environ[LAUNCH_DIR_ENV] = str(launch_dir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    texts = load_texts(4096)
    models: dict[str, Path | None] = {"embedded default (WordPiece, 21k tokens)": None}
    if not args.smoke:
        models["Llama 3.2 (byte-level BPE, 128k tokens, 9 MB)"] = assets.large_tokenizer_dir()
    noise_before = machine_noise(2.0)
    started = time.time()
    tcp = ServerProcess(env={"TOKENIZER_SERVICE_LOG_LEVEL": "warning"}, log_path=args.out.with_suffix(".tcp.log"))
    launched = None
    try:
        from transformers import AutoTokenizer

        from service.client import TokenizerClient
        from service.engine.loading import DEFAULT_TOKENIZER_DIR

        log("start-up")
        startup = startup_costs(models, args.startup_repeats)
        log(f"launching the service (launch directory {launch_dir}) and a TCP server on {tcp.url}")
        launched = TokenizerClient.launch(log_level="warning")
        tcp.start()
        tcp_client = TokenizerClient(tcp.url)
        log("round trips")
        clients = {"unix socket": (launched, launched.service.pid), "tcp loopback": (tcp_client, tcp.pid)}
        trips = round_trip_comparison(clients, texts[0], args)
        log("DataLoader")
        variants: dict[str, tuple[Callable, int | None]] = {
            "launched (unix socket)": (launched.collator(**OPTIONS), launched.service.pid),
            "tcp loopback": (tcp_client.collator(**OPTIONS), tcp.pid),
            "in-process": (InProcessCollate(AutoTokenizer.from_pretrained(str(DEFAULT_TOKENIZER_DIR))), None),
        }
        cells = dataloader_comparison(variants, texts, args)
    finally:
        if launched is not None:
            launched.shutdown()
        tcp.stop()
        shutil.rmtree(launch_dir, ignore_errors=True)
    result = {
        "settings": {
            "options": OPTIONS,
            "round_trip_options": {k: str(v) for k, v in ROUND_TRIP_OPTIONS.items()},
            "workers": args.workers,
            "batch_sizes": args.batch_sizes,
            "rounds": args.rounds,
            "requests": args.requests,
            "start_method": "fork",
            "inprocess_tokenizers_parallelism": os.environ.get("TOKENIZERS_PARALLELISM"),
            "smoke": args.smoke,
        },
        "round_trips": trips,
        "dataloader": cells,
        "startup": startup,
        "machine_noise_cores": {"before": noise_before, "after": machine_noise(2.0)},
        "seconds": time.time() - started,
    }
    publish(result, args.out, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
