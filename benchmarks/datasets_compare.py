"""``datasets.map`` through a launched service against ``datasets.map`` with the tokenizer in-process, side by side.

    .venv/bin/python -m benchmarks.datasets_compare --out bench-results/datasets_compare.json
    .venv/bin/python -m benchmarks.datasets_compare --smoke --out /tmp/datasets.json     # < 2 min

The benchmark corpus (``testkit.corpora.write_jsonl``: real Chinese reviews and English prose, 16 MiB; smoke
512 KiB), loaded with ``datasets.load_dataset("json")``, each run in a process of its own with a fresh datasets cache
(no run loads another's result):

- **map**, ``num_proc`` = 1, 2, 4: ``dataset.map(lambda batch: tokenizer(batch["text"]), batched=True,
  num_proc=N)`` with the transformers tokenizer in the process (``TOKENIZERS_PARALLELISM=true``, as a training
  script has it), against ``client.tokenize_function("text").map(dataset, num_proc=N)`` through
  ``TokenizerClient.launch()`` (the embedded default tokenizer; the launch is not timed).
- **streaming**: ``dataset.to_iterable_dataset().map(..., batched=True)`` iterated to the end, the same two
  functions.

Reported per run: seconds of the map (the load excluded), tokens/s, and the peak RSS (VmHWM) of the processes that
ran the function -- the map workers, or the process itself with ``num_proc=1`` and streaming -- their largest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.progress import log, publish
from testkit import corpora
from testkit.servers import REPO

NUM_PROCS = (1, 2, 4)
SIDES = ("in-process", "service")


def peak_rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RecordingPeak:
    """Wraps a map function: after each batch, the peak RSS of the process that ran it, in ``folder/<pid>``."""

    def __init__(self, function: Any, folder: str) -> None:
        self.function = function
        self.folder = folder

    def __call__(self, batch: Any, *args: Any) -> Any:
        result = self.function(batch, *args)
        Path(self.folder, str(os.getpid())).write_text(str(peak_rss_mb()))
        return result


def one_run(side: str, how: str, corpus: str, work: str) -> dict[str, Any]:
    """One map (``how``: a num_proc, or ``stream``) in this process."""
    import datasets

    datasets.disable_progress_bars()
    peaks = Path(work, "peaks")
    peaks.mkdir()
    dataset = datasets.load_dataset("json", data_files=corpus, split="train", cache_dir=str(Path(work, "cache")))
    if side == "service":
        from service.client import TokenizerClient

        client = TokenizerClient.launch()
        function: Any = client.tokenize_function("text")
    else:
        from transformers import AutoTokenizer

        from service.engine.loading import DEFAULT_TOKENIZER_DIR

        tokenizer = AutoTokenizer.from_pretrained(str(DEFAULT_TOKENIZER_DIR))
        tokenizer(dataset["text"][:64])  # a training script has used its tokenizer before it maps

        def function(batch: dict[str, list[Any]], indices: Any = None) -> Any:
            return tokenizer(batch["text"])

    recording = RecordingPeak(function, str(peaks))
    started = time.perf_counter()
    if how == "stream":
        stream = dataset.to_iterable_dataset().map(recording, batched=True, with_indices=True)
        tokens = sum(len(example["input_ids"]) for example in stream)
    else:
        mapped = dataset.map(recording, batched=True, with_indices=True, num_proc=int(how) if how != "1" else None)
        tokens = sum(len(row) for row in mapped.data.column("input_ids").to_pylist())
    seconds = time.perf_counter() - started
    if side == "service":
        client.shutdown()
    worker_peaks = [float(path.read_text()) for path in peaks.iterdir()]
    return {
        "side": side,
        "how": how,
        "seconds": seconds,
        "documents": len(dataset),
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "worker_peak_rss_mb": max(worker_peaks),
        "workers": len(worker_peaks),
    }


def run_in_own_process(side: str, how: str, corpus: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="datasets-compare-") as work:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.datasets_compare", "--run", side, how, str(corpus), work],
            cwd=REPO,
            env={**os.environ, "TOKENIZERS_PARALLELISM": "true"},
            capture_output=True,
            text=True,
            timeout=1200,
        )
    if done.returncode != 0:
        raise RuntimeError(f"{side} {how} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def print_table(result: dict[str, Any]) -> None:
    corpus = result["corpus"]
    print(
        f"\ndatasets.map, {corpus['mib']:.1f} MiB ({corpus['documents']} documents), default tokenizer, "
        f"{result['machine']['cpus']} CPUs"
    )
    print(
        "| map | in-process tokens/s | service tokens/s | service / in-process | worker peak RSS in-process | service |"
    )
    print("|---|---|---|---|---|---|")
    for how, row in result["rows"].items():
        label = "streaming" if how == "stream" else f"num_proc={how}"
        ours, theirs = row["service"], row["in-process"]
        print(
            f"| {label} | {theirs['tokens_per_s'] / 1e6:.2f}M | {ours['tokens_per_s'] / 1e6:.2f}M | "
            f"{ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}x | {theirs['worker_peak_rss_mb']:.0f} MB | "
            f"{ours['worker_peak_rss_mb']:.0f} MB |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.datasets_compare", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench-results/datasets_compare.json"))
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--run", nargs=4, metavar=("SIDE", "HOW", "CORPUS", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        print(json.dumps(one_run(*args.run)))
        return 0
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="datasets-corpus-") as folder:
        corpus = Path(folder, "corpus.jsonl")
        documents = corpora.write_jsonl(corpus, (512 << 10) if args.smoke else (16 << 20), fields=False)
        result: dict[str, Any] = {
            "corpus": {"mib": corpus.stat().st_size / 2**20, "documents": documents},
            "rows": {},
        }
        for how in (*map(str, NUM_PROCS), "stream"):
            for side in SIDES:
                log(f"datasets_compare: {side}, {how}")
                result["rows"].setdefault(how, {})[side] = run_in_own_process(side, how, corpus)
    result["seconds"] = time.time() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    publish(result, args.out, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
