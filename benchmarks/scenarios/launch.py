"""Scenario "launch": a launched service (``TokenizerClient.launch``: a Unix socket) against the same server on TCP
loopback and against tokenizing in the collate_fn (scenario 3's DataLoader cells); one-text round trips and bare
``GET /healthz`` over both sockets; and what a launch costs (the embedded default and Llama 3.2's 128k-token BPE),
beside attaching to a running service and loading the tokenizer in-process. In a process of its own (it forks
DataLoader workers); figures: docs/guides/dataloader.md, "A launched service".
"""

from __future__ import annotations

import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    FORKS_WITH_PARALLELISM_OFF,
    Row,
    Scenario,
    Settings,
    in_rounds,
    in_threads,
    log,
    machine_noise,
    medians,
    process_cpu_seconds,
)
from benchmarks.scenarios import dataloader
from benchmarks.scenarios.dataloader import IN_PROCESS, OPTIONS, InProcessCollate, Variants, load_texts, measure_cells
from benchmarks.scenarios.measuring import shared_server
from service.launch.rendezvous import LAUNCH_DIR_ENV
from service.transport import HTTPTransport, Request, Timeout
from service.wire import HEALTH_PATH
from testkit import assets

ROUND_TRIP_OPTIONS = {"padding": True, "return_tensors": "pt"}
LAUNCHED, TCP = "launched (unix socket)", "tcp loopback"


@dataclass(frozen=True)
class Counts:
    rounds: int = 3
    requests: int = 2000  # one-text requests per round-trip figure
    startup_repeats: int = 3  # fresh launches per tokenizer
    loader: dataloader.Counts = field(default_factory=lambda: dataloader.FULL)


FULL = Counts()
SMOKE = Counts(rounds=1, requests=100, startup_repeats=1, loader=dataloader.Counts((2,), (32,), 1, 20, 1.0))


# -- round trips -----------------------------------------------------------------------------------------
def round_trips(call: Callable[[], Any], server_pid: int, requests: int, threads: int) -> dict[str, float]:
    """``requests`` calls (split over ``threads``): requests/s, client and server CPU per request."""
    for _ in range(20):
        call()
    per_thread = max(1, requests // threads)

    def work(_: int) -> None:
        for _ in range(per_thread):
            call()

    cpu, server, wall = time.process_time(), process_cpu_seconds(server_pid), time.perf_counter()
    in_threads(work, threads)
    elapsed = time.perf_counter() - wall
    total = per_thread * threads
    return {
        "requests_per_s": total / elapsed,
        "client_cpu_us_per_request": 1e6 * (time.process_time() - cpu) / total,
        "server_cpu_us_per_request": 1e6 * (process_cpu_seconds(server_pid) - server) / total,
    }


def round_trip_comparison(clients: dict[str, tuple[Any, int]], text: str, counts: Counts) -> dict:
    """Per socket: one-text ``/encode`` calls through the client, and bare ``GET /healthz`` through its
    transport (the HTTP exchange alone, no tokenizer), in interleaved rounds."""
    calls: dict[str, dict[str, Callable[[], Any]]] = {"encode 1 text": {}, "GET /healthz": {}}
    for name, (client, _) in clients.items():
        calls["encode 1 text"][name] = functools.partial(client, text, **ROUND_TRIP_OPTIONS)
        probe = Request("GET", client.urls[0] + HEALTH_PATH, {}, timeout=Timeout())
        calls["GET /healthz"][name] = functools.partial(HTTPTransport().handle_request, probe)
    variants = [(kind, threads, name) for kind in calls for threads in (1, 8) for name in clients]

    def one(variant: tuple[str, int, str]) -> dict[str, float]:
        kind, threads, name = variant
        return round_trips(calls[kind][name], clients[name][1], counts.requests, threads)

    runs = in_rounds(variants, one, counts.rounds)
    result: dict[str, Any] = {
        f"{kind} | {name} | {threads} thread(s)": medians(runs[(kind, threads, name)])
        for kind, threads, name in variants
    }
    for kind in calls:
        for threads in (1, 8):
            unix, tcp = (result[f"{kind} | {name} | {threads} thread(s)"] for name in clients)
            result[f"{kind} | ratio unix/tcp | {threads} thread(s)"] = unix["requests_per_s"] / tcp["requests_per_s"]
    return result


# -- DataLoader ------------------------------------------------------------------------------------------
def dataloader_comparison(variants: Variants, texts: list[str], counts: Counts) -> list[dict[str, Any]]:
    cells = measure_cells(variants, texts, counts.loader)
    for cell in cells:
        rate = {name: cell[name]["batches_per_s"] for name in variants}
        cell["ratios"] = {
            "launched / in-process": rate[LAUNCHED] / rate[IN_PROCESS],
            "tcp / in-process": rate[TCP] / rate[IN_PROCESS],
            "launched / tcp": rate[LAUNCHED] / rate[TCP],
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
        [sys.executable, "-c", source, *args], capture_output=True, text=True, timeout=300, check=True
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


def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(FULL, SMOKE)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the in-process collate_fn, as it runs without freezing
    launch_dir = Path(tempfile.mkdtemp(prefix="tsb-", dir="/tmp"))
    os.environ[LAUNCH_DIR_ENV] = str(launch_dir)
    texts = load_texts(4096)
    models: dict[str, Path | None] = {"embedded default (WordPiece, 21k tokens)": None}
    if not settings.smoke:
        models["Llama 3.2 (byte-level BPE, 128k tokens, 9 MB)"] = assets.large_tokenizer_dir()
    noise_before = machine_noise(2.0)
    launched = None
    try:
        from transformers import AutoTokenizer

        from service.client import TokenizerClient
        from service.engine.loading import DEFAULT_TOKENIZER_DIR

        log("start-up")
        startup = startup_costs(models, counts.startup_repeats)
        tcp = shared_server(settings, "default")
        log(f"launching the service (launch directory {launch_dir}); the TCP server is {tcp.url}")
        launched = TokenizerClient.launch(log_level="warning")
        tcp_client = TokenizerClient(tcp.url)
        log("round trips")
        clients = {"unix socket": (launched, launched.service.pid), "tcp loopback": (tcp_client, tcp.pid)}
        trips = round_trip_comparison(clients, texts[0], counts)
        log("DataLoader")
        tokenizer = AutoTokenizer.from_pretrained(str(DEFAULT_TOKENIZER_DIR))
        variants: Variants = {
            LAUNCHED: (launched.collator(**OPTIONS), (launched.service.pid,)),
            TCP: (tcp_client.collator(**OPTIONS), (tcp.pid,)),
            IN_PROCESS: (InProcessCollate(tokenizer), ()),
        }
        cells = dataloader_comparison(variants, texts, counts)
    finally:
        if launched is not None:
            launched.shutdown()
        shutil.rmtree(launch_dir, ignore_errors=True)
    return {
        "settings": {"options": OPTIONS, "round_trip_options": {k: str(v) for k, v in ROUND_TRIP_OPTIONS.items()}},
        "round_trips": trips,
        "dataloader": cells,
        "startup": startup,
        "machine_noise_cores": {"before": noise_before, "after": machine_noise(2.0)},
    }


def rows(section: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for key, figures in section.get("round_trips", {}).items():
        if "ratio" not in key:
            cpu = f"cli {figures['client_cpu_us_per_request']:.3g} srv {figures['server_cpu_us_per_request']:.3g} us"
            out.append(
                {"scenario": "launch", "texts": "round trips", "variant": key, "rate": figures["requests_per_s"]}
            )
            out[-1]["cpu"] = cpu
    out += dataloader.loader_rows("launch", section.get("dataloader", []))
    for name, f in section.get("startup", {}).items():
        note = f"attach {f['attach_seconds']:.2f} s; in-process load {f['in_process_load_seconds']:.2f} s"
        out.append(
            {
                "scenario": "launch",
                "texts": "start-up",
                "variant": name,
                "rate": f"launch {f['launch_seconds']:.2f} s",
                "note": note,
            }
        )
    return out


SCENARIO = Scenario(
    "launch",
    "a launched service (Unix socket) vs TCP loopback vs the collate_fn; round trips; start-up costs",
    measure,
    rows,
    process=FORKS_WITH_PARALLELISM_OFF,
    needs_torch=True,
    timeout=(1200.0, 150.0),
)
