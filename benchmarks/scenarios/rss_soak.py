"""The RSS soak ("rss"): the default tokenizer's server in a torch-free ``[server]``-only venv (as the container image
runs it; ``benchmarks.server_venv``), its RSS after each of rounds of one client sending batches of 256 then 64
clients sending one text each. The smoke run soaks the run's shared server instead (no venv to build in CI).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from benchmarks import corpus
from benchmarks.harness import Row, Scenario, Settings, log, target
from benchmarks.processes import SAFETENSORS_MEDIA_TYPE, BenchServer, run_load
from benchmarks.scenarios.measuring import OPTIONS_BATCH, TEXTS_FULL, TEXTS_SMOKE, shared_server, text_sets
from benchmarks.server_venv import server_python

CONCURRENCY = 64
PEAK_MB = 300.0


@dataclass(frozen=True)
class Counts:
    rounds: int = 6
    seconds: float = 3.0  # per round: half one-client batches, half 64 concurrent clients
    max_requests: int = 50_000


FULL, SMOKE = Counts(), Counts(rounds=2, seconds=0.4, max_requests=2000)


def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(FULL, SMOKE)
    shared = shared_server(settings, "default")
    if settings.smoke:
        server = shared
    else:
        python = str(server_python())
        server = BenchServer("default", True, settings.log_dir, variant="[server]-only venv, no torch", python=python)
        server.start()
    sets = text_sets(settings.counts(TEXTS_FULL, TEXTS_SMOKE))
    batches = [
        b for name in sorted(sets) if name[:2] in corpus.LANGUAGES for b in corpus.batches_of(sets[name], 256, 4)
    ]
    batches += corpus.batches_of(sets.get("chars-10000", sets["zh-long"]), 25, limit=2)
    bodies = [orjson.dumps({"texts": [text], **OPTIONS_BATCH}) for text in sets["s2"]]
    first = len(server.memory)
    try:
        log(f"RSS soak: {counts.rounds} rounds on {server.name}")
        for round_ in range(counts.rounds):
            deadline = time.perf_counter() + counts.seconds / 2
            sent = 0
            while time.perf_counter() < deadline or sent < len(batches):
                body = orjson.dumps({"texts": batches[sent % len(batches)], **OPTIONS_BATCH})
                server.encode(body, SAFETENSORS_MEDIA_TYPE)
                sent += 1
            half = counts.seconds / 2
            run_load(
                server, bodies, concurrency=CONCURRENCY, warmup=0.0, seconds=half, max_requests=counts.max_requests
            )
            server.sample_memory(f"soak round {round_ + 1}")
    finally:
        if server is not shared:
            server.stop()
    soaked = server.memory[max(0, first - 1) :]
    rss = [m["rss_mb"] for m in soaked]
    servers = [s.describe() for key, s in settings.shared.items() if key.startswith("server:") and s is not server]
    return {
        **server.describe(),
        "memory": soaked,
        "rss_start_mb": rss[0],
        "rss_end_mb": rss[-1],
        "peak_mb": max(m["peak_mb"] for m in soaked),
        "shared_servers": servers,
    }


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    if "peak_mb" not in section:
        return []
    rounds = [m["rss_mb"] for m in section["memory"][1:]]
    half = max(1, len(rounds) // 2)
    early, late = max(rounds[:half]), max(rounds[-half:])
    out = [
        target(
            f"rss_peak_mb[{section['name']}]",
            f"server RSS peak (VmHWM) over the soak, default tokenizer, {section['setup']}",
            section["peak_mb"],
            PEAK_MB,
            higher_is_better=False,
            torch_loaded=section["torch_loaded"],
        ),
        target(
            f"rss_growth_mb[{section['name']}]",
            f"RSS flat under {len(rounds)} rounds of the same load: the highest RSS of the last {half} round(s) minus "
            f"the highest of the first {half}, at most 10% of the latter",
            late - early,
            round(0.10 * early, 1),
            higher_is_better=False,
            rss_after_each_round_mb=[round(x, 1) for x in rounds],
        ),
    ]
    for server in section["shared_servers"]:
        out.append(
            target(
                f"rss_peak_mb[{server['name']}]",
                f"server RSS peak (VmHWM), {server['name']}, the run's shared server in this venv "
                f"(torch {'loaded' if server['torch_loaded'] else 'not loaded'})",
                max(m["peak_mb"] for m in server["memory"]),
                PEAK_MB,
                higher_is_better=False,
            )
        )
    return out


def rows(section: dict[str, Any]) -> list[Row]:
    out = []
    for server in [*section.get("shared_servers", []), section] if "memory" in section else []:
        memory = server["memory"]
        out.append(
            {
                "scenario": "memory",
                "variant": server["name"],
                "note": f"RSS {memory[0]['rss_mb']:.0f} -> {memory[-1]['rss_mb']:.0f} MB, peak "
                f"{max(m['peak_mb'] for m in memory):.0f} MB "
                f"(torch {'loaded' if server['torch_loaded'] else 'absent'})",
            }
        )
    return out


SCENARIO = Scenario(
    "rss", "server memory under rounds of the same mixed load, in a [server]-only venv", measure, rows, targets
)
