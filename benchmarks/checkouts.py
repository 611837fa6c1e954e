"""Scenario 1's one-client measure for two checkouts in one run: before/after a change to the hot path.

    git archive main | tar -x -C /tmp/main-copy          # a copy of the checkout to compare against
    .venv/bin/python -m benchmarks.checkouts --against /tmp/main-copy [--rounds 5] [--seconds 0.4]

Run from the repository root. It starts two servers of the default tokenizer -- this checkout's and the
other's (the same interpreter and packages; only the ``service`` package differs) -- and the in-process
baseline worker, then measures batches of 256 (``padding="longest"``, truncation, ``max_length=128``, as
scenario 1) on every language x length cell: in-process ``encode_batch`` and ``encode_batch_fast``, and each
server's JSON and binary answers decoded into torch tensors. Every round measures every variant on every
cell in rotated order, so machine noise falls on both checkouts alike; the table gives the median texts/s
over rounds and its ratio to in-process ``encode_batch``, per cell and as the geometric mean over cells,
and how many cores other processes used meanwhile (the machine is shared); a second table gives the CPU
each side spent per batch (the server process, all threads; the worker process), which a busy machine
disturbs far less than the rates. Every process it starts is stopped by PID when it ends.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import corpus
from benchmarks.loadgen import JSON_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE
from benchmarks.machine import available_cpus, machine_noise
from benchmarks.processes import BenchServer, InProcessWorker
from benchmarks.progress import log
from benchmarks.scenarios.measuring import OPTIONS_BATCH, rotated
from benchmarks.service_client import ServiceClient
from benchmarks.textsets import write_text_sets

BATCH = 256


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout (a copy of main, say)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.4, help="per measurement")
    parser.add_argument("--set-size", type=int, default=1024, help="texts per cell")
    parser.add_argument("--max-batches", type=int, default=2000, help="per measurement")
    args = parser.parse_args(argv)
    if not (args.against / "service" / "__init__.py").is_file():
        parser.error(f"{args.against} is not a checkout (no service/__init__.py)")

    cells = [f"{language}-{bucket}" for language in corpus.LANGUAGES for bucket in corpus.BUCKETS]
    sets = {cell: corpus.bucket_texts(*cell.split("-"), args.set_size) for cell in cells}
    work = Path(tempfile.mkdtemp(prefix="bench-checkouts-"))
    threads = available_cpus()
    worker = InProcessWorker("default", write_text_sets(sets, work / "texts.json"), work, threads)
    this = BenchServer("default", True, work, variant="this checkout")
    other = BenchServer("default", True, work, variant=f"checkout {args.against.name}", repo=args.against)
    client = ServiceClient()
    variants: tuple[tuple[str, Any, str], ...] = (
        ("in-process encode_batch", worker, "encode_batch"),
        ("in-process encode_batch_fast", worker, "encode_batch_fast"),
        ("this checkout, JSON", this, JSON_MEDIA_TYPE),
        ("this checkout, binary", this, SAFETENSORS_MEDIA_TYPE),
        (f"{args.against.name}, JSON", other, JSON_MEDIA_TYPE),
        (f"{args.against.name}, binary", other, SAFETENSORS_MEDIA_TYPE),
    )
    runs: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    busy: list[float] = []
    started: list[Any] = []
    try:
        for process in (worker, this, other):
            process.start()
            started.append(process)
        log(f"machine noise before measuring: {machine_noise(2.0):.2f} other cores")
        for round_ in range(args.rounds):
            log(f"round {round_ + 1}/{args.rounds}")
            for cell in cells:
                for label, side, what in rotated(variants, round_):
                    if isinstance(side, InProcessWorker):
                        run = side.measure(what, cell, BATCH, OPTIONS_BATCH, args.seconds, args.max_batches)
                    else:
                        batches = corpus.batches_of(sets[cell], BATCH)
                        run = client.measure(side, cell, batches, OPTIONS_BATCH, what, args.seconds, args.max_batches)
                    runs.setdefault((cell, label), []).append(run["texts"] / run["seconds"])
                    cpu.setdefault((cell, label), []).append(1000 * run["cpu"]["watched_cpu_seconds"] / run["batches"])
                    busy.append(run["cpu"]["other_cpu_cores"])
    finally:
        for process in reversed(started):
            process.stop()
    labels = [label for label, _, _ in variants]
    print(table(runs, cells, labels, busy, args, threads))
    print(f"\nCPU per batch of {BATCH} (ms, median over rounds): the server process (all threads), or the worker")
    print(f"{'variant':36} " + " ".join(f"{cell:>10}" for cell in cells))
    for label in labels:
        print(f"{label:36} " + " ".join(f"{statistics.median(cpu[(cell, label)]):10.1f}" for cell in cells))
    return 0


def table(
    runs: dict[tuple[str, str], list[float]],
    cells: list[str],
    labels: list[str],
    busy: list[float],
    args: argparse.Namespace,
    threads: int,
) -> str:
    """Median texts/s per cell and variant, each with its ratio to in-process encode_batch, and the geometric
    mean of those ratios over the cells."""
    base = "in-process encode_batch"
    medians = {key: statistics.median(values) for key, values in runs.items()}
    lines = [
        f"batches of {BATCH}, {OPTIONS_BATCH}, {args.rounds} rounds x {args.seconds}s, median texts/s per cell "
        f"(ratio to in-process encode_batch); {threads} Rust threads; other processes used "
        f"{statistics.median(busy):.2f} cores (median), {max(busy):.2f} (most) meanwhile",
        f"{'variant':36} " + " ".join(f"{cell:>16}" for cell in cells) + f" {'geo. mean':>10}",
    ]
    for label in labels:
        ratios = [medians[(cell, label)] / medians[(cell, base)] for cell in cells]
        cells_text = " ".join(
            f"{medians[(cell, label)]:9.0f} {ratio:5.2f}x" for cell, ratio in zip(cells, ratios, strict=True)
        )
        lines.append(f"{label:36} {cells_text} {statistics.geometric_mean(ratios):9.2f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
