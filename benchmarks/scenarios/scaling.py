"""Scaling with the node, measured and modelled: one process's CPU split (the split scenario's), throughput on 1 and
2 cores of 1 replica x 2 threads, 2 replicas x 1 thread and the workaround, on batches of 256 and through the
DataLoader collator, each cell pinned to its cores; and a projection to 16, 64 and 128 cores (``benchmarks.projection``)
under a Rust pool's curve: a calibration's (``--calibration FILE``), else tokenizers #2337's.

    python -m benchmarks.run --scenarios scaling [--rounds 5] [--calibration calibration.json]   # ~10 min on 2 cores
    python -m benchmarks.run --report bench-results/benchmark.json --calibration calibration.json  # re-projected

What each cell pins and counts, the noise and the targets: docs/guides/performance.md, "Scaling with the node".
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks import corpus, projection
from benchmarks.harness import (
    BUSY_CORES,
    ChildProcess,
    CpuProbe,
    Row,
    Scenario,
    Settings,
    busy_note,
    host_facts,
    human,
    in_rounds,
    log,
    machine_noise,
    medians,
    target,
)
from benchmarks.pinning import first_cores, pin, usable_cores
from benchmarks.processes import start_all, tokenizer_dir
from benchmarks.projection import PERFECT, POOL_2337, SPEEDUPS_2337, Costs
from benchmarks.scenarios import cpu_split
from benchmarks.scenarios.cpu_split import BATCH, SPLIT_AND_SCALING, Corpus, Counts
from benchmarks.scenarios.measuring import OPTIONS_BATCH
from service.launch.rendezvous import LAUNCH_DIR_ENV

CORES = (1, 2)
Speedups = tuple[tuple[int, float], ...]  # a pool's rate at t threads over one thread's
BATCHES, COLLATOR = "batches of 256", "DataLoader collator"
PATHS = (BATCHES, COLLATOR)
ONE_REPLICA, TWO_REPLICAS, WORKAROUND = "1 replica x 2 threads", "2 replicas x 1 thread", "workaround"
REPLICAS = {ONE_REPLICA: (1, 2), TWO_REPLICAS: (2, 1)}  # variant -> (replicas, Rust threads each)
VARIANTS = (ONE_REPLICA, TWO_REPLICAS, WORKAROUND)
CLIENTS = 4  # the load generator's threads on the batches path: two calls in flight per replica
WORKERS = 2  # the workaround's processes, and the DataLoader's workers on either side
PROJECTED_CORES = (16, 64, 128)
TARGET_CORES = 64
SPREADING_THRESHOLD = 0.95  # 2 replicas / 1 replica at the same cores, measured
PROJECTED_THRESHOLD = 1.0  # replicas="auto" / the workaround on TARGET_CORES cores, projected


# -- the processes under test ------------------------------------------------------------------------------
class OwnedService(ChildProcess):
    """One variant's launched service, owned by a process of its own (:func:`owner_main`: a process launches one
    service per tokenizer, and the variants are two of one tokenizer); this process calls its replicas with a client
    on their sockets, which spreads the calls as the launched client does. The owner lets go when its input ends."""

    def __init__(self, replicas: int, threads: int, model: str | None, log_path: Path) -> None:
        super().__init__(
            "benchmarks.scenarios.scaling:owner_main", log_path, None, replicas, threads, model or "default"
        )
        self.pids: tuple[int, ...] = ()
        self.client: Any = None

    def start(self, timeout: float = 300.0) -> OwnedService:
        from service.client import TokenizerClient

        super().start()
        launched = self.receive("its launch", timeout)
        self.pids, self.client = tuple(launched["pids"]), TokenizerClient(launched["urls"])
        return self

    def stop(self, timeout: float = 60.0) -> None:
        if self.client is not None:
            self.client.close()
        super().stop(timeout)


def owner_main(replicas: int, threads: int, model: str) -> int:
    """Launch the service, print its URLs and pids, hold it until the input ends, let go."""
    from service.client import TokenizerClient

    client: Any = TokenizerClient.launch(None if model == "default" else model, replicas=replicas, threads=threads)
    try:
        print(json.dumps({"urls": list(client.service.urls), "pids": list(client.service.pids)}), flush=True)
        sys.stdin.read()
    finally:
        client.shutdown()
    return 0


class Bench:
    """One corpus's processes -- its two launched services, the workaround's workers (shared by every corpus), the
    collate functions -- and the measurement of one cell."""

    def __init__(self, row: Corpus, workers: list[ChildProcess], counts: Counts, work_dir: Path, loader: bool) -> None:
        self.row, self.workers, self.counts, self.work_dir = row, workers, counts, work_dir
        self.paths = PATHS if loader else (BATCHES,)
        self.texts = corpus.bucket_texts(row.language, row.bucket, counts.set_size)
        self.batches = corpus.batches_of(self.texts, BATCH)
        model = None if row.tokenizer == "default" else str(tokenizer_dir(row.tokenizer))
        self.services = {
            name: OwnedService(replicas, threads, model, work_dir / f"owner-{replicas}x{threads}-{row.name}.log")
            for name, (replicas, threads) in REPLICAS.items()
        }
        self.collates: dict[str, Any] = {}

    def start(self) -> None:
        """Launch both services, set the workers up on this corpus, check every variant gives the same tensors."""
        import numpy as np
        from transformers import AutoTokenizer

        from benchmarks.scenarios.dataloader import InProcessCollate, check_identical_batches

        batches_file = self.work_dir / f"scaling-{self.row.name}.json"
        batches_file.write_text(json.dumps(self.batches, ensure_ascii=False), "utf-8")
        model_dir = str(tokenizer_dir(self.row.tokenizer))
        for worker in self.workers:
            worker.send({"op": "setup", "tokenizer": model_dir, "batches_file": str(batches_file)})
        log(f"{self.row.name}: launching {', '.join(self.services)}")
        start_all(list(self.services.values()))
        for worker in self.workers:
            worker.receive("setup", 300)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        theirs = tokenizer(self.batches[0], return_tensors="np", **OPTIONS_BATCH)
        for name, service in self.services.items():
            ours = service.client(self.batches[0], return_tensors="np", **OPTIONS_BATCH)
            if list(ours) != list(theirs) or not all(np.array_equal(ours[k], theirs[k]) for k in theirs):
                raise AssertionError(f"{name} and the in-process tokenizer give different arrays on {self.row.name}")
        if COLLATOR in self.paths:
            self.collates = {name: service.client.collator(**OPTIONS_BATCH) for name, service in self.services.items()}
            self.collates[WORKAROUND] = InProcessCollate(tokenizer)
            check_identical_batches(self.collates, WORKAROUND, self.texts, [BATCH])

    def stop(self) -> None:
        for service in self.services.values():
            service.stop()

    def measure(self, cores: list[int], path: str, variant: str) -> dict[str, Any]:
        """One cell: pin its processes and this one to ``cores``, measure for a while."""
        servers = self.services[variant].pids if variant in self.services else ()
        workers = tuple(w.pid for w in self.workers) if variant == WORKAROUND and path == BATCHES else ()
        pin([os.getpid(), *servers, *workers], cores)
        probe = CpuProbe(*servers, *workers, reaped_children=True, cores=cores)
        before = probe.snapshot()
        figures = self._batches(variant) if path == BATCHES else self._loader(variant, servers)
        window = CpuProbe.delta(before, probe.snapshot())
        if path == BATCHES and variant != WORKAROUND:
            figures["server_cpu_ms"] = 1000 * window["watched_cpu_seconds"] / figures["batches"]
            figures["client_cpu_ms"] = 1000 * window["client_cpu_seconds"] / figures["batches"]
        figures |= {"other_cpu_cores": window["other_cpu_cores"], "wall_seconds": window["wall_seconds"]}
        return {**figures, "pinned": ",".join(map(str, cores))}

    def _batches(self, variant: str) -> dict[str, Any]:
        seconds = self.counts.seconds
        if variant == WORKAROUND:
            for worker in self.workers:  # all at once
                worker.send({"op": "measure", "seconds": seconds})
            answers = [worker.receive("measure", seconds + 120) for worker in self.workers]
            return {
                "batches_per_s": sum(a["batches_per_s"] for a in answers),
                "batches": sum(a["batches"] for a in answers),
                "worker_cpu_ms": statistics.mean(a["cpu_ms"] for a in answers),
            }
        client, batches = self.services[variant].client, self.batches

        def send(index: int, n: int) -> None:
            client(batches[(index + n * CLIENTS) % len(batches)], return_tensors="np", **OPTIONS_BATCH)

        return cpu_split.closed_loop(send, CLIENTS, seconds)

    def _loader(self, variant: str, servers: tuple[int, ...]) -> dict[str, Any]:
        from benchmarks.scenarios.dataloader import measure_loader

        counts = self.counts
        figures = measure_loader(
            self.texts, self.collates[variant], WORKERS, BATCH, counts.loader_batches, counts.seconds, servers
        )
        collate = figures["collate_cpu_ms_per_batch"]
        out = {"batches_per_s": figures["batches_per_s"], "batches": figures["batches"]}
        if variant == WORKAROUND:
            return {**out, "worker_cpu_ms": collate}
        return {**out, "server_cpu_ms": figures["server_cpu_ms_per_batch"], "client_cpu_ms": collate}


# -- a corpus: the split, the cells in rounds, the ratios, the model --------------------------------------
def measure_corpus(
    settings: Settings, row: Corpus, workers: list[ChildProcess], counts: Counts, loader: bool, speedups: Speedups
) -> dict[str, Any]:
    """The split (on every usable core), then every cell in interleaved rounds (each pinned to the first N of the
    usable cores); the figures, the ratios and the projection of one corpus."""
    usable = usable_cores()
    pin([os.getpid(), *(w.pid for w in workers)], usable)  # the split's server inherits this process's cores
    split_row = cpu_split.split_of(settings, row, workers[0], counts)
    split = {"server": split_row["server"], "worker": split_row["worker"]}
    bench = Bench(row, workers, counts, settings.work_dir, loader)
    groups = [(cores, path) for cores in CORES for path in bench.paths]
    try:
        bench.start()
        measured = in_rounds(
            VARIANTS,
            lambda group, variant: bench.measure(first_cores(usable, group[0]), group[1], variant),
            counts.rounds,
            f"scaling, {row.name}",
            groups,
        )
    finally:
        pin([os.getpid(), *(w.pid for w in workers)], usable)
        bench.stop()
    cells = [
        {"cores": cores, "path": path, "variant": variant, "rounds": cell}
        for ((cores, path), variant), cell in measured.items()
    ]
    return summarise({"name": row.name, "label": row.label, "split": split, "cells": cells}, speedups)


def summarise(measured: dict[str, Any], speedups: Speedups) -> dict[str, Any]:
    """What one corpus's measurements (its split and each cell's rounds) give: each cell's medians and the model
    beside it, the ratios within rounds, the model's inputs and the projection under the pool's ``speedups``.
    :func:`reproject` redoes it from a saved run's JSON (under the model of this checkout)."""
    cells = sorted(measured["cells"], key=lambda c: (c["cores"], PATHS.index(c["path"]), VARIANTS.index(c["variant"])))
    runs = {(c["cores"], c["path"], c["variant"]): c["rounds"] for c in cells}
    paths = [path for path in PATHS if any(c["path"] == path for c in cells)]
    costs = {path: _costs(measured["split"], cells, path) for path in paths}
    for cell in cells:
        cell["figures"] = {k: v for k, v in medians(cell["rounds"]).items() if k != "rounds"}
        cell["model_batches_per_s"] = _modelled(costs[cell["path"]], cell["cores"], cell["variant"], speedups)
    return {
        **measured,
        "cells": cells,
        "ratios": [_ratios(runs, cores, path) for cores in CORES for path in paths],
        "costs": {path: asdict(costs[path]) for path in paths},
        "projection": [_projected(costs[path], path, speedups) for path in paths],
    }


def _paired(a: list[dict[str, Any]], b: list[dict[str, Any]], cores: int | None = None) -> dict[str, Any]:
    """a / b within each round: the median, and the range over rounds (how noisy the machine was). With ``cores``:
    of each one's batches/s per core other processes left it (``cores`` - theirs), which takes out what sharing
    the cores with other work gave one variant more than the other."""

    def rate(run: dict[str, Any]) -> float:
        value: float = run["batches_per_s"]
        return value if cores is None else value / max(0.05, cores - run["other_cpu_cores"])

    values = [rate(x) / rate(y) for x, y in zip(a, b, strict=True) if y["batches_per_s"]]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}


def _ratios(runs: dict[tuple[int, str, str], list[dict[str, Any]]], cores: int, path: str) -> dict[str, Any]:
    one, two, work = (runs[(cores, path, variant)] for variant in VARIANTS)
    return {
        "cores": cores,
        "path": path,
        "two_vs_one": _paired(two, one),
        "two_vs_one_per_core_left": _paired(two, one, cores),
        "one_vs_workaround": _paired(one, work),
        "two_vs_workaround": _paired(two, work),
    }


def _costs(split: dict[str, Any], cells: list[dict[str, Any]], path: str) -> Costs:
    """The model's inputs for one path: G and R from the split; C, the client side measured in this path's service
    cells (median over variants, cores and rounds); W, the workaround's worker (the split's, for batches of 256; the
    collate_fn's, in the DataLoader)."""
    ours = [run for c in cells if c["path"] == path and c["variant"] != WORKAROUND for run in c["rounds"]]
    theirs = [run for c in cells if c["path"] == path and c["variant"] == WORKAROUND for run in c["rounds"]]
    worker = split["worker"]["cpu_ms"] if path == BATCHES else statistics.median(r["worker_cpu_ms"] for r in theirs)
    return Costs(
        gil_ms=split["server"]["gil_side_ms"],
        rust_ms=split["server"]["rust_pool_ms"],
        client_ms=statistics.median(r["client_cpu_ms"] for r in ours),
        worker_ms=worker,
    )


def _modelled(costs: Costs, cores: float, variant: str, speedups: Speedups) -> float:
    """What the model says a measured cell should give on ``cores`` cores."""
    if variant == WORKAROUND:
        return projection.workaround(costs, cores)
    replicas, threads = REPLICAS[variant]
    return projection.processes(costs, replicas, threads, cores, projection.pool(costs, speedups))


def _projected(costs: Costs, path: str, speedups: Speedups) -> dict[str, Any]:
    """Per projected core count: one process, replicas='auto' (the planner's plan) and the workaround, under the
    pool's curve, and under a perfect pool beside it (the best case)."""
    points = []
    for cores in PROJECTED_CORES:
        work = projection.workaround(costs, cores)
        point: dict[str, Any] = {"cores": cores, "workaround": work}
        for key, curve in (("", projection.pool(costs, speedups)), ("perfect_pool", projection.pool(costs, PERFECT))):
            plan = projection.auto_plan(costs, cores, curve)
            one, auto = projection.one_process(costs, cores, curve), projection.replicas_auto(costs, cores, curve)
            figures = {
                "one_process": one,
                "auto": auto,
                "auto_replicas": plan.replicas,
                "auto_threads": plan.threads,
                "one_vs_workaround": one / work,
                "auto_vs_workaround": auto / work,
            }
            point.update(figures) if not key else point.update({key: figures})
        points.append(point)
    return {"path": path, "fed_cores": costs.fed_cores, "points": points}


# -- targets --------------------------------------------------------------------------------------------------
def conclude(results: dict[str, Any]) -> dict[str, Any]:
    """The run's targets, the model and the pool's curve it projects with, added to ``results``."""
    return {
        **results,
        "targets": evaluate(results["corpora"]),
        "model": projection.MODEL,
        "assumptions": list(projection.ASSUMPTIONS),
        "pool": pool_of(results["meta"])[0],
    }


def evaluate(corpora: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row: 2 replicas / 1 replica measured at each core count (as measured, and per core other processes left
    each), and replicas='auto' / the workaround projected on TARGET_CORES cores."""
    targets = []

    def add(name: str, kind: str, value: float, threshold: float) -> None:
        targets.append({"target": name, "kind": kind, "measured": value, "threshold": threshold})
        targets[-1]["met"] = value >= threshold

    for row in corpora:
        for ratios in row["ratios"]:
            name = f"scaling_2_replicas_vs_1[{row['name']}, {ratios['path']}, {ratios['cores']} cores]"
            add(name, "measured", ratios["two_vs_one"]["median"], SPREADING_THRESHOLD)
            add(name, "measured, per core left", ratios["two_vs_one_per_core_left"]["median"], SPREADING_THRESHOLD)
        for projected in row["projection"]:
            point = next(p for p in projected["points"] if p["cores"] == TARGET_CORES)
            name = f"scaling_auto_vs_workaround_{TARGET_CORES}_cores[{row['name']}, {projected['path']}]"
            add(name, "projection", point["auto_vs_workaround"], PROJECTED_THRESHOLD)
    return targets


def pool_of(meta: dict[str, Any]) -> tuple[str, Speedups]:
    """(what the pool's curve is, its speedups) of a run: a calibration's where the run was given one, else #2337's."""
    given = meta.get("pool")
    if given is None:
        return POOL_2337, SPEEDUPS_2337
    return given["name"], tuple((int(t), float(s)) for t, s in given["speedups"])


def calibration_pool(path: Path) -> dict[str, Any]:
    """The pool's curve of a calibration: ``tokenizer-service calibrate --json``'s output or a kept record."""
    from service.calibration.measure import Calibration

    document = json.loads(path.read_text())
    body = document.get("calibration") or document.get("body", {}).get("calibration")
    if body is None:
        raise ValueError(f"{path}: neither `tokenizer-service calibrate --json`'s output nor a kept calibration")
    calibration = Calibration.from_json(body)
    if calibration.busy:  # noise, and since a busy calibration stops at its first busy probe, maybe part of a curve
        raise ValueError(
            f"{path}: a busy calibration ({'; '.join(calibration.busy)}): nothing is projected from it; calibrate "
            "on a quieter machine, or with --max-spread/--max-others relaxed"
        )
    curve = calibration.measurement.curve
    return {
        "name": f"measured by tokenizer-service calibrate on {calibration.cores} cores of {calibration.cpu_model} "
        f"({calibration.measured_at}, {path.name})",
        "speedups": [[t, curve.speedup(t)] for t, _ in curve.points],
    }


# -- the scenario -------------------------------------------------------------------------------------------
def reproject(section: dict[str, Any], calibration: Path) -> dict[str, Any]:
    """A saved run's section projected again, with ``calibration``'s pool curve (``--report ... --calibration``)."""
    if "corpora" not in section:
        return section
    meta = {**section["meta"], "pool": calibration_pool(calibration)}
    speedups = pool_of(meta)[1]
    return conclude({**section, "meta": meta, "corpora": [summarise(row, speedups) for row in section["corpora"]]})


def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(cpu_split.FULL, cpu_split.SMOKE)
    cores = usable_cores()
    if len(cores) < max(CORES):
        raise RuntimeError(f"this process may run on {len(cores)} core(s); the measurement needs {max(CORES)}")
    # a DataLoader of 2 workers pinned to 1 core is a cell on purpose: torch's warning about it says nothing new
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    loader = importlib.util.find_spec("torch") is not None
    meta: dict[str, Any] = {
        "cpus": len(cores),
        "cores": cores,
        "cpu_model": host_facts()["cpu_model"],
        "counts": asdict(counts),
        "options": OPTIONS_BATCH,
        "batch": BATCH,
        "clients": CLIENTS,
        "workers": WORKERS,
        "other_cpu_cores_at_start": machine_noise(1.0),
        "dataloader": "measured" if loader else "skipped: torch is not installed",
        **({"pool": calibration_pool(settings.calibration)} if settings.calibration else {}),
    }
    os.environ[LAUNCH_DIR_ENV] = str(settings.work_dir / "launch")  # private: never attach to another run's service
    workers = [cpu_split.one_worker(settings.work_dir, index) for index in range(WORKERS)]
    speedups = pool_of(meta)[1]
    try:
        corpora = [
            measure_corpus(settings, cpu_split.BY_NAME[name], workers, counts, loader, speedups)
            for name in counts.corpora
        ]
    finally:
        for worker in workers:
            worker.stop()
    return conclude({"meta": meta, "corpora": corpora})


def rows(section: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for row in section.get("corpora", []):
        server, worker = row["split"]["server"], row["split"]["worker"]
        out.append(
            {
                "scenario": "scaling",
                "texts": f"256 x {row['label']}",
                "variant": "split: one serve process (measured)",
                "ratio": f"(G+R)/G = {row['projection'][0]['fed_cores']:.1f} cores fed",
                "cpu": f"G {server['gil_side_ms']:.3g} + R {server['rust_pool_ms']:.3g}, "
                f"W {worker['cpu_ms']:.3g}/batch",
                "note": busy_note(server["other_cpu_cores"]),
            }
        )
        cells = {(c["cores"], c["path"], c["variant"]): c for c in row["cells"]}
        for ratios in row["ratios"]:
            cores, path = ratios["cores"], ratios["path"]
            group = [cells[(cores, path, variant)] for variant in VARIANTS]
            others = max(c["figures"]["other_cpu_cores"] for c in group)
            two = ratios["two_vs_one"]
            out.append(
                {
                    "scenario": "scaling",
                    "texts": f"{row['name']}, {path}",
                    "variant": f"measured, {cores} core(s): 1r x 2t / 2r x 1t / workaround",
                    "rate": " / ".join(human(c["figures"]["batches_per_s"]) for c in group) + " b/s",
                    "ratio": f"2r {two['median']:.2f}x 1r [{two['min']:.2f}-{two['max']:.2f}], "
                    f"{ratios['one_vs_workaround']['median']:.2f}x / "
                    f"{ratios['two_vs_workaround']['median']:.2f}x workaround",
                    "cpu": f"client {statistics.mean(c['figures']['client_cpu_ms'] for c in group[:2]):.3g}/batch",
                    "note": f"others used {others:.2f} of the {cores} core(s)" if others > BUSY_CORES else "",
                }
            )
        for projected in row["projection"]:
            for point in projected["points"]:
                out.append(
                    {
                        "scenario": "scaling",
                        "texts": f"{row['name']}, {projected['path']}",
                        "variant": f"PROJECTION, {point['cores']} cores: one process / auto "
                        f"({point['auto_replicas']} x {point['auto_threads']}) / workaround",
                        "rate": " / ".join(human(point[k]) for k in ("one_process", "auto", "workaround")) + " b/s",
                        "ratio": f"auto {point['auto_vs_workaround']:.2f}x, "
                        f"one {point['one_vs_workaround']:.2f}x workaround",
                        "note": "projection (model below), not measured",
                    }
                )
    if "model" in section:
        note = f"{section['model']}; pool: {section['pool']}; assumptions: " + "; ".join(section["assumptions"])
        out.append({"scenario": "scaling", "variant": "projection model", "note": note})
    return out


SPREADING = "batches/s of 2 replicas x 1 thread / 1 replica x 2 threads at the same cores (1 and 2), measured here"
PER_CORE_LEFT = f"{SPREADING}, per core other processes left each variant"
PROJECTED = f"a PROJECTION (benchmarks.projection's model): replicas='auto' / the workaround on {TARGET_CORES} cores"
SCALING_TARGETS = (  # name, kind of the rows (evaluate's), threshold, description
    ("scaling_2_replicas_vs_1", "measured", SPREADING_THRESHOLD, SPREADING),
    ("scaling_2_replicas_vs_1_per_core_left", "measured, per core left", SPREADING_THRESHOLD, PER_CORE_LEFT),
    ("scaling_auto_vs_workaround_projected", "projection", PROJECTED_THRESHOLD, PROJECTED),
)


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, kind, threshold, description in SCALING_TARGETS:
        of_kind = [row for row in section.get("targets", []) if row["kind"] == kind]
        if of_kind:
            worst = min(of_kind, key=lambda row: row["measured"])
            per_cell = {row["target"]: round(row["measured"], 4) for row in of_kind}
            every = all(r["met"] for r in of_kind)
            about = f"scenario scaling, {description}, every row (the worst row shown)"
            out.append(target(name, about, worst["measured"], threshold, met_in_every_cell=every, per_cell=per_cell))
    return out


SCENARIO = Scenario(
    "scaling",
    "replicas vs the workaround pinned to 1 and 2 cores, and a projection to 16-128 cores with its model",
    measure,
    rows,
    targets,
    process=SPLIT_AND_SCALING,
    timeout=(1800.0, 150.0),
)
