"""Scenario 2: concurrent clients (:func:`benchmarks.processes.run_load`) sending one ~300-character text per
request to servers with batching on (the run's shared one), on with a 2 ms gather window, off, and (full run) on
behind uvicorn's own httptools and h11 protocols; vs the in-process rates in batches of 256. Server CPU per request
counts every thread of the server, tokenizing included (the "overhead" target subtracts in-process ``encode_batch``'s).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import orjson

from benchmarks.harness import Row, Scenario, Settings, busy_note, in_rounds, percentiles, target
from benchmarks.processes import LOAD_GENERATOR, SAFETENSORS_MEDIA_TYPE, BenchServer, Load, run_load, start_all
from benchmarks.scenarios.measuring import BASELINES, OPTIONS_BATCH, aggregate, sides, versus

BATCH_IN_PROCESS = 256  # the in-process baselines tokenize the same texts in batches of this size
# mode -> (batching, extra server flags, label); "on" is the run's shared server
MODES: dict[str, tuple[bool, tuple[str, ...], str]] = {
    "on": (True, (), "batching on (default: no gather window)"),
    "on-wait2": (True, ("--batch-wait-ms", "2"), "batching on, --batch-wait-ms 2"),
    "off": (False, (), "batching off"),
    "on-httptools": (True, ("--http-protocol", "httptools"), "batching on, uvicorn httptools (no limits)"),
    "on-h11": (True, ("--http-protocol", "h11"), "batching on, uvicorn h11"),
}


@dataclass(frozen=True)
class Counts:
    modes: tuple[str, ...] = tuple(MODES)
    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    rounds: int = 2
    warmup: float = 0.5
    seconds: float = 1.5
    inprocess_seconds: float = 0.4
    max_requests: int = 50_000


FULL = Counts()
SMOKE = Counts(("on", "off"), (1, 8), rounds=1, warmup=0.1, seconds=0.4, inprocess_seconds=0.05, max_requests=2000)


def summary(runs: list[Load]) -> dict[str, Any]:
    """Median rate of 200 answers over rounds, statuses, pooled latencies, CPU per request and in cores."""
    total = sum(len(r.latencies) for r in runs)
    seconds = sum(r.seconds for r in runs)
    statuses: dict[str, int] = {}
    for run in runs:
        for status, count in run.statuses.items():
            statuses[str(status)] = statuses.get(str(status), 0) + count
    server_cpu, client_cpu = (sum(r.cpu[key] for r in runs) for key in ("watched_cpu_seconds", "client_cpu_seconds"))
    return {
        "rate": statistics.median(r.statuses.get(200, 0) / r.seconds for r in runs),
        "rounds_rate": [round(r.statuses.get(200, 0) / r.seconds, 1) for r in runs],
        "requests": total,
        "statuses": statuses,
        "errors": total - int(statuses.get("200", 0)),
        "latency_ms": percentiles([x for r in runs for x in r.latencies]),
        "server_cpu_ms_per_request": 1000 * server_cpu / max(1, total),
        "client_cpu_ms_per_request": 1000 * client_cpu / max(1, total),
        "server_cpu_cores": server_cpu / seconds,
        "client_cpu_cores": client_cpu / seconds,
        "other_cpu_cores": max(r.cpu["other_cpu_cores"] for r in runs),
    }


def measure(settings: Settings) -> dict[str, Any]:
    """Every tokenizer at every concurrency on every server, and the in-process rates on the same texts."""
    counts = settings.counts(FULL, SMOKE)
    section: dict[str, Any] = {"options": OPTIONS_BATCH, "load_generator": LOAD_GENERATOR, "runs": [], "inprocess": {}}
    for tokenizer in settings.tokenizers:
        pair = sides(settings, tokenizer)
        servers = {"on": pair.server}
        for mode in counts.modes[1:]:
            batching, flags, _ = MODES[mode]
            servers[mode] = BenchServer(
                tokenizer, batching, settings.log_dir, extra_args=flags, variant=" ".join(flags)
            )
        try:
            start_all(list(servers.values())[1:])
            bodies = [orjson.dumps({"texts": [text], **OPTIONS_BATCH}) for text in pair.sets["s2"]]
            for server in servers.values():  # every text once through each server before timing
                for body in bodies[:256]:
                    server.encode(body, SAFETENSORS_MEDIA_TYPE)
            baselines = in_rounds(
                BASELINES,
                lambda method, pair=pair: pair.measure(
                    method, "s2", BATCH_IN_PROCESS, OPTIONS_BATCH, counts.inprocess_seconds
                ),
                counts.rounds,
            )
            loads = in_rounds(
                tuple(servers),
                lambda clients, mode, servers=servers, bodies=bodies: run_load(
                    servers[mode],
                    bodies,
                    concurrency=clients,
                    warmup=counts.warmup,
                    seconds=counts.seconds,
                    max_requests=counts.max_requests,
                ),
                counts.rounds,
                f"{tokenizer}: scenario 2",
                points=counts.concurrency,
            )
        finally:
            for server in list(servers.values())[1:]:
                server.stop()
        inprocess = {}
        for (label, _, _), label_runs in baselines.items():
            figures = aggregate(label_runs)
            figures["cpu_ms_per_text"] = figures["server_or_worker_cpu_ms_per_request"] / BATCH_IN_PROCESS
            inprocess[label] = figures
        section["inprocess"][tokenizer] = inprocess
        for (clients, mode), mode_runs in loads.items():
            figures = {"mode": mode, "label": MODES[mode][2], "server_args": servers[mode].args, **summary(mode_runs)}
            section["runs"].append({"tokenizer": tokenizer, "concurrency": clients, **figures})
        pair.server.sample_memory("after scenario 2")
    return section


def rows(section: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for tokenizer, baselines in section.get("inprocess", {}).items():
        runs = {(r["mode"], r["concurrency"]): r for r in section["runs"] if r["tokenizer"] == tokenizer}
        for (mode, clients), run in sorted(runs.items(), key=lambda item: (item[0][1], list(MODES).index(item[0][0]))):
            off = runs.get(("off", clients))
            vs_off = f"{run['rate'] / off['rate']:.2f}x off, " if mode != "off" and off else ""
            lat = run["latency_ms"]
            note = [f"{run['errors']} non-200"] if run["errors"] else []
            out.append(
                {
                    "scenario": "2",
                    "tokenizer": tokenizer,
                    "texts": "mixed ~300, 1/request",
                    "variant": f"{clients} clients, {run['label']}",
                    "rate": run["rate"],
                    "ratio": vs_off + versus(run["rate"], baselines, "texts_per_s"),
                    "latency": "/".join(f"{lat[k]:.3g}" for k in ("p50", "p90", "p99")),
                    "cpu": f"srv {run['server_cpu_ms_per_request']:.3g} cli {run['client_cpu_ms_per_request']:.3g}",
                    "note": "; ".join([*note, busy_note(run["other_cpu_cores"])]).strip("; "),
                }
            )
        for label, figures in baselines.items():
            out.append(
                {
                    "scenario": "2",
                    "tokenizer": tokenizer,
                    "texts": f"mixed ~300, {BATCH_IN_PROCESS}/call",
                    "variant": f"{label}, batches of {BATCH_IN_PROCESS}",
                    "rate": figures["texts_per_s"],
                    "tokens_rate": figures["tokens_per_s"],
                    "ratio": "baseline",
                    "cpu": f"{figures['cpu_ms_per_text']:.3g} per text",
                    "note": busy_note(figures["other_cpu_cores"]),
                }
            )
    return out


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for tokenizer, baselines in section.get("inprocess", {}).items():
        top = max(r["concurrency"] for r in section["runs"])
        run = {r["mode"]: r for r in section["runs"] if r["tokenizer"] == tokenizer and r["concurrency"] == top}
        enc = baselines[BASELINES[0][0]]
        where = f"scenario 2, {tokenizer}, {top} clients x 1 text"
        on = run["on"]
        if "off" in run:
            out.append(
                target(
                    f"s2_on_vs_off[{tokenizer}]", f"{where}: batching on / off", on["rate"] / run["off"]["rate"], 1.5
                )
            )
        out += [
            target(
                f"s2_on_vs_inprocess[{tokenizer}]",
                f"{where}: batching on / in-process encode_batch in batches of {BATCH_IN_PROCESS}",
                on["rate"] / enc["texts_per_s"],
                0.5,
            ),
            target(
                f"s2_server_cpu_ms_per_request[{tokenizer}]",
                f"{where}, batching on: server CPU ms per request (all its threads, tokenizing included)",
                on["server_cpu_ms_per_request"],
                0.3,
                higher_is_better=False,
            ),
            target(
                f"s2_server_cpu_overhead_ms_per_request[{tokenizer}]",
                f"{where}, batching on: server CPU ms per request minus what in-process encode_batch spends per text",
                on["server_cpu_ms_per_request"] - enc["cpu_ms_per_text"],
                0.3,
                higher_is_better=False,
            ),
        ]
    return out


SCENARIO = Scenario(
    "2", "concurrent clients, one text per request: batching on/off vs in-process rates", measure, rows, targets
)
