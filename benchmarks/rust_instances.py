"""The Rust side of one process: one tokenizer instance with its rayon pool against several instances, each
driven by a thread of its own with parallelism off (what TEI and tokenizers #1900 do), at equal cores.

    .venv/bin/python -m benchmarks.rust_instances                  # 1 and 2 cores, the four corpora: ~3 min
    .venv/bin/python -m benchmarks.rust_instances --cores 1,2,4 --rounds 15
    .venv/bin/python -m benchmarks.rust_instances --smoke --out /tmp/instances.json     # ~15 s

Run from the repository root. Each variant at each core count is a process of its own, pinned to the first N
cores (``os.sched_setaffinity``, as ``taskset -c 0..N-1`` does), its parallelism set before ``tokenizers`` is
imported, and started once per corpus; it encodes batches of 256 texts with ``encode_batch_fast`` and truncation
at 128 tokens (the Rust call the engine makes for ``padding="longest", truncation=True, max_length=128``; the
encodings dropped as the engine drops them) for a fixed time when asked:

- **pool**: one instance, ``TOKENIZERS_PARALLELISM=true`` and ``RAYON_NUM_THREADS=N``, one thread calling it
  (the engine today: one tokenizer thread, Rust's pool inside each call);
- **instances, a batch each**: N instances, parallelism off, N threads each encoding whole batches of its own
  (several batches in flight: what N engine threads would do under enough concurrent load);
- **instances, a batch split**: N instances, parallelism off, each batch cut into N parts encoded at once by
  the N threads and joined (one batch at a time, as a single client sees it).

The machine is shared, so the measurements are short and many: each round measures every variant once, in
rotated order, and a variant's ratio to the pool is the median over rounds of its ratio to the pool measured
in the same round (a drift of the machine's load falls on both). Texts per second are medians over rounds;
also the process's CPU per batch. Corpora as ``benchmarks.cpu_split``. The measured processes end when their
input ends (killed by PID if they linger).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

VARIANTS = ("pool", "instances, a batch each", "instances, a batch split")
BATCH = 256
MAX_LENGTH = 128


# -- the measured process --------------------------------------------------------------------------------
class Measured:
    """The measured process's side: pinned to ``cores`` cores, parallelism as ``variant`` needs, its instances
    loaded and warm; :meth:`measure` encodes for a while."""

    def __init__(self, variant: str, cores: int, tokenizer_file: str, batches_file: str) -> None:
        os.sched_setaffinity(0, set(range(cores)))  # before any thread starts: they inherit it
        self.variant = variant
        pooled = variant == "pool"
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if pooled else "false"
        os.environ["RAYON_NUM_THREADS"] = str(cores)
        from tokenizers import Tokenizer

        self.batches: list[list[str]] = json.loads(Path(batches_file).read_text("utf-8"))
        self.count = 1 if pooled else cores
        self.instances = [Tokenizer.from_file(tokenizer_file) for _ in range(self.count)]
        for instance in self.instances:
            instance.enable_truncation(MAX_LENGTH)
            for batch in self.batches:  # warm up: caches, and the pool's threads
                instance.encode_batch_fast(batch)
        count = self.count
        self.parts = [[batch[i::count] for i in range(count)] for batch in self.batches]

    def measure(self, seconds: float) -> dict[str, Any]:
        count, instances, batches = self.count, self.instances, self.batches
        done = [0] * count
        deadline = time.perf_counter() + seconds
        cpu_before = time.process_time()
        started = time.perf_counter()
        if self.variant == "instances, a batch split":
            parts = self.parts
            barrier = threading.Barrier(count)
            stop = threading.Event()

            def split_worker(index: int) -> None:
                instance, n = instances[index], 0
                while True:
                    barrier.wait()  # every part of one batch at once
                    if stop.is_set():
                        return
                    instance.encode_batch_fast(parts[n % len(parts)][index])
                    n += 1
                    done[index] = n
                    if index == 0 and time.perf_counter() >= deadline:
                        stop.set()
                    barrier.wait()

            target: Any = split_worker
        else:

            def worker(index: int) -> None:
                instance, n = instances[index], index
                while time.perf_counter() < deadline:
                    instance.encode_batch_fast(batches[n % len(batches)])
                    n += 1
                    done[index] += 1

            target = worker
        threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        batches_done = done[0] if self.variant == "instances, a batch split" else sum(done)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
        return {
            "batches": batches_done,
            "texts_per_s": batches_done * BATCH / elapsed,
            "cpu_ms_per_batch": 1000 * cpu / max(1, batches_done),
        }


def child_main(variant: str, cores: int, tokenizer_file: str, batches_file: str) -> int:
    """Answer one JSON line per line read (the seconds to measure for); ends at the end of its input."""
    measured = Measured(variant, cores, tokenizer_file, batches_file)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(measured.measure(float(line))), flush=True)
    return 0


class Child:
    """One measured process (``--child``), started once per corpus and cell, driven over stdin/stdout."""

    def __init__(self, variant: str, cores: int, tokenizer_file: Path, batches_file: Path) -> None:
        command = [sys.executable, "-m", "benchmarks.rust_instances", "--child", variant, str(cores)]
        command += [str(tokenizer_file), str(batches_file)]
        self.name = f"{variant} on {cores} core(s)"
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._answer(120)

    def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"{self.name}: no answer (exit {self.proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def measure(self, seconds: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{seconds}\n")
        self.proc.stdin.flush()
        return self._answer(seconds + 60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # by PID
                self.proc.wait(5)


# -- the run ---------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.rust_instances",
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help="one corpus, short measurements (for CI)")
    parser.add_argument("--cores", default=None, help="comma-separated core counts (default: 1 and all usable)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seconds", type=float, default=0.6, help="per measurement")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures here, as JSON")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        variant, cores, tokenizer_file, batches_file = args.child
        return child_main(variant, int(cores), tokenizer_file, batches_file)

    import tempfile

    from benchmarks import corpus
    from benchmarks.cpu_split import CORPORA
    from benchmarks.machine import available_cpus, machine_noise
    from benchmarks.processes import tokenizer_dir
    from benchmarks.progress import log
    from benchmarks.scenarios.measuring import rotated

    usable = available_cpus()
    cores = [int(c) for c in args.cores.split(",")] if args.cores else sorted({1, usable})
    if max(cores) > len(os.sched_getaffinity(0)):
        parser.error(f"--cores {max(cores)}: this process may run on {len(os.sched_getaffinity(0))} cores")
    rows = CORPORA[:1] if args.smoke else CORPORA
    rounds, seconds = (1, 0.3) if args.smoke else (args.rounds, args.seconds)
    noise = machine_noise(1.0)
    runs: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="rust-instances-") as scratch:
        files = {}
        for row in rows:
            texts = corpus.bucket_texts(row.language, row.bucket, BATCH if args.smoke else 4 * BATCH)
            batches_file = Path(scratch) / f"{row.name}.json"
            batches_file.write_text(json.dumps(corpus.batches_of(texts, BATCH), ensure_ascii=False), "utf-8")
            files[row.name] = (tokenizer_dir(row.tokenizer) / "tokenizer.json", batches_file)
            log(f"{row.name}: starting {len(cores) * len(VARIANTS)} measured processes")
            children = {(n, variant): Child(variant, n, *files[row.name]) for n in cores for variant in VARIANTS}
            try:
                for round_ in range(rounds):
                    for n in cores:
                        for variant in rotated(VARIANTS, round_ + n):
                            runs.setdefault((row.name, n, variant), []).append(children[(n, variant)].measure(seconds))
            finally:
                for measured in children.values():
                    measured.stop()
    results: dict[str, Any] = {
        "meta": {"cpus": usable, "rounds": rounds, "seconds": seconds, "other_cpu_cores_at_start": noise},
        "cells": [],
    }
    for row in rows:
        for n in cores:
            pool = statistics.median(r["texts_per_s"] for r in runs[(row.name, n, "pool")])
            for variant in VARIANTS:
                cell = runs[(row.name, n, variant)]
                rate = statistics.median(r["texts_per_s"] for r in cell)
                pooled = runs[(row.name, n, "pool")]
                paired = [r["texts_per_s"] / p["texts_per_s"] for r, p in zip(cell, pooled, strict=True)]
                results["cells"].append(
                    {
                        "corpus": row.name,
                        "label": row.label,
                        "cores": n,
                        "variant": variant,
                        "texts_per_s": rate,
                        "vs_pool": statistics.median(paired),
                        "vs_pool_of_medians": rate / pool,
                        "cpu_ms_per_batch": statistics.median(r["cpu_ms_per_batch"] for r in cell),
                        "rounds_texts_per_s": [round(r["texts_per_s"]) for r in cell],
                    }
                )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        f"encode_batch_fast, batches of {BATCH}, truncation {MAX_LENGTH}; texts/s, median over {meta['rounds']} "
        f"round(s) of {meta['seconds']:g} s (vs pool: median of the ratios within a round); {meta['cpus']} usable "
        f"CPUs, other processes used {meta['other_cpu_cores_at_start']:.2f} cores at the start",
        f"{'corpus':48} {'cores':>5}  {'variant':26} {'texts/s':>9} {'vs pool':>8} {'CPU ms/batch':>13}",
    ]
    for cell in results["cells"]:
        lines.append(
            f"{cell['label']:48} {cell['cores']:>5}  {cell['variant']:26} {cell['texts_per_s']:9.0f} "
            f"{cell['vs_pool']:7.2f}x {cell['cpu_ms_per_batch']:13.1f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
