"""Scenario 3: a DataLoader fed through the SDK collator vs tokenizing in-process in the collate_fn, same batches.

In a process of its own (it forks DataLoader workers, ``TOKENIZERS_PARALLELISM=false`` there), against that
process's shared default server on TCP, one with a 2 ms gather window, and a launched service (a Unix socket):
batches/s of ``DataLoader(texts, batch_size=B, num_workers=W)`` (fork), with the CPU per batch inside the worker's
collate_fn and in the server (from /proc). Texts: real Chinese reviews and English paragraphs, interleaved.
(Measured elsewhere: the transports' CPU per request by ``benchmarks/dataloader_compare.py`` at commit d64e1e6, a
launch's start-up and one-text round trips by ``benchmarks/scenarios/launch.py`` at commit 2064602.)
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    FORKS_WITH_PARALLELISM_OFF,
    Row,
    Scenario,
    Settings,
    human,
    in_rounds,
    log,
    medians,
    per_cell_target,
    process_cpu_seconds,
)
from benchmarks.processes import BenchServer
from benchmarks.scenarios.measuring import shared_server
from service.launch.rendezvous import LAUNCH_DIR_ENV
from testkit import assets as package_assets

OPTIONS = {"padding": "longest", "truncation": True, "max_length": 128}
IN_PROCESS = "in-process"  # the variant every other is compared with
LAUNCHED = "sdk, launched on a unix socket"
# A variant of a DataLoader comparison: name -> (collate_fn, the pids of the servers doing the work)
Variants = dict[str, tuple[Callable[[list[Any]], dict[str, Any]], Sequence[int]]]


@dataclass(frozen=True)
class Counts:
    workers: tuple[int, ...] = (2, 4)
    batch_sizes: tuple[int, ...] = (32, 64)
    rounds: int = 3
    max_batches: int = 300  # per measurement
    seconds: float = 3.0  # per measurement, at most


FULL = Counts()
SMOKE = Counts((2,), (64,), rounds=1, max_batches=20, seconds=1.0)


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

    def __init__(self, inner: Callable[[list[Any]], dict[str, Any]]) -> None:
        self.inner = inner

    def __call__(self, items: list[Any]) -> dict[str, Any]:
        started = time.process_time()
        batch = self.inner(items)
        batch["collate_cpu_seconds"] = time.process_time() - started
        return batch


# -- DataLoader --------------------------------------------------------------------------------------------
def measure_loader(
    items: list[Any],
    collate: Callable[[list[Any]], dict[str, Any]],
    workers: int,
    batch_size: int,
    max_batches: int,
    seconds: float,
    server_pids: Sequence[int],
) -> dict[str, Any]:
    """Batches/s of one DataLoader over ``items`` (its first ``2 x workers`` batches not counted: the workers'
    start-up), the CPU per batch inside the workers' ``collate`` and of the servers doing the work, if any."""
    from torch.utils.data import DataLoader

    warmup = 2 * workers  # the first batches pay for the worker start-up (fork, first connection)
    needed = (warmup + max_batches) * batch_size
    data = (items * (needed // len(items) + 1))[:needed]
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
    server_before = sum(map(process_cpu_seconds, server_pids))
    started = time.perf_counter()
    for batch in iterator:
        cpu.append(batch["collate_cpu_seconds"])
        if len(cpu) >= max_batches or time.perf_counter() - started >= seconds:
            break
    elapsed = time.perf_counter() - started
    server_cpu = sum(map(process_cpu_seconds, server_pids)) - server_before
    del iterator  # shuts the workers down
    return {
        "batches": len(cpu),
        "seconds": elapsed,
        "batches_per_s": len(cpu) / elapsed,
        "collate_cpu_ms_per_batch": 1000 * statistics.mean(cpu),
        "server_cpu_ms_per_batch": 1000 * server_cpu / len(cpu),
    }


def check_identical_batches(collates: dict[str, Any], reference: str, items: list[Any], batch_sizes: list[int]) -> None:
    """Every collate_fn gives ``reference``'s tensors (same keys, same order, same values)."""
    import torch

    for batch_size in batch_sizes:
        theirs = collates[reference](items[:batch_size])
        for name, collate in collates.items():
            ours = collate(items[:batch_size])
            if list(ours) != list(theirs) or not all(torch.equal(ours[k], theirs[k]) for k in theirs):
                raise AssertionError(f"{name} and {reference} batches differ (batch size {batch_size})")


def measure_cells(variants: Variants, items: list[Any], counts: Counts) -> list[dict[str, Any]]:
    """The variants' collate_fns give the same batches; then one cell per (workers, batch size): each variant's
    medians over rounds that rotate the variants' order."""
    collates = {name: collate for name, (collate, _) in variants.items()}
    check_identical_batches(collates, IN_PROCESS, items, list(counts.batch_sizes))
    cells = []
    for workers in counts.workers:
        for batch_size in counts.batch_sizes:

            def one(name: str, workers: int = workers, batch_size: int = batch_size) -> dict[str, Any]:
                collate, pids = variants[name]
                return measure_loader(items, collate, workers, batch_size, counts.max_batches, counts.seconds, pids)

            runs = in_rounds(list(variants), one, counts.rounds)
            cell: dict[str, Any] = {"workers": workers, "batch_size": batch_size, "identical_batches": True}
            cell |= {name: medians(values) for name, values in runs.items()}
            rates = {name: cell[name]["batches_per_s"] for name in variants}
            cell["vs_in_process"] = {name: rate / rates[IN_PROCESS] for name, rate in rates.items()}
            log(f"workers={workers} batch={batch_size}: " + ", ".join(f"{n} {r:.1f} b/s" for n, r in rates.items()))
            cells.append(cell)
    return cells


def measure(settings: Settings) -> dict[str, Any]:
    """The DataLoader cells, against this scenario's own servers."""
    from transformers import AutoTokenizer

    from service.client import TokenizerClient
    from service.engine.loading import DEFAULT_TOKENIZER_DIR

    counts = settings.counts(FULL, SMOKE)
    # In-process tokenization in the workers, the way it can run without freezing: parallelism off (this process
    # is the scenario's own; the servers set their own).
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    launch_dir = Path(tempfile.mkdtemp(prefix="tsb-", dir="/tmp"))  # short: it holds a Unix socket's path
    os.environ[LAUNCH_DIR_ENV] = str(launch_dir)  # a private service, never one another run started
    texts = load_texts(4096)
    wait2 = BenchServer("default", True, settings.log_dir, extra_args=("--batch-wait-ms", "2"), variant="wait 2 ms")
    clients: dict[str, Any] = {}
    try:
        # the process's shared default server, one that holds a lone request 2 ms back for company, a launched one
        servers = {"sdk": shared_server(settings, "default"), "sdk, --batch-wait-ms 2": wait2.start()}
        clients = {name: TokenizerClient(server.url) for name, server in servers.items()}
        clients[LAUNCHED] = TokenizerClient.launch(log_level="warning")
        pids = {name: (server.pid,) for name, server in servers.items()} | {LAUNCHED: clients[LAUNCHED].service.pids}
        variants: Variants = {name: (client.collator(**OPTIONS), pids[name]) for name, client in clients.items()}
        variants[IN_PROCESS] = (InProcessCollate(AutoTokenizer.from_pretrained(str(DEFAULT_TOKENIZER_DIR))), ())
        log("scenario 3: DataLoader")
        cells = measure_cells(variants, texts, counts)
    finally:
        for name, client in clients.items():
            if name == LAUNCHED:
                client.shutdown()  # the launched service stops with its one user
            else:
                client.close()
        wait2.stop()
        shutil.rmtree(launch_dir, ignore_errors=True)
    described = {"options": OPTIONS, "texts": len(texts), "start_method": "fork"}
    return {"settings": {**described, "inprocess_tokenizers_parallelism": "false"}, "dataloader": cells}


def loader_rows(scenario: str, cells: list[dict[str, Any]], label: Callable[[str], str] = str) -> list[Row]:
    """A row per variant of every DataLoader cell (scenarios 3 and 8): batches/s, against in-process."""
    out: list[Row] = []
    for cell in cells:
        for name, ratio in cell["vs_in_process"].items():
            figures = cell[name]
            collate, server = figures["collate_cpu_ms_per_batch"], figures["server_cpu_ms_per_batch"]
            out.append(
                {
                    "scenario": scenario,
                    "texts": f"DataLoader, {cell['workers']} workers, batch {cell['batch_size']}",
                    "variant": label(name),
                    "rate": human(figures["batches_per_s"]) + " b/s",
                    "ratio": "baseline" if name == IN_PROCESS else f"{ratio:.2f}x in-proc",
                    "cpu": f"collate {collate:.3g} + srv {server:.3g} = {collate + server:.3g}/batch",
                }
            )
    return out


def rows(section: dict[str, Any]) -> list[Row]:
    def label(name: str) -> str:
        return "in-process collate_fn (parallelism off)" if name == IN_PROCESS else f"SDK collator ({name})"

    return loader_rows("3", section.get("dataloader", []), label)


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    cells = section.get("dataloader", [])
    per_cell = {f"{c['workers']} workers, batch {c['batch_size']}": c["vs_in_process"]["sdk"] for c in cells}
    description = (
        "scenario 3: DataLoader batches/s through the SDK collator (default server) / in-process tokenization in the "
        f"collate_fn, TOKENIZERS_PARALLELISM=false (geometric mean over the {len(per_cell)} cells)"
    )
    return [per_cell_target("s3_dataloader_vs_collate_fn", description, per_cell, 1.0)] if cells else []


SCENARIO = Scenario(
    "3",
    "DataLoader through the SDK collator vs the tokenizer in the collate_fn",
    measure,
    rows,
    targets,
    process=FORKS_WITH_PARALLELISM_OFF,
    needs_torch=True,
    timeout=(600.0, 120.0),
)
