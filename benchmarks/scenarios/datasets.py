"""Scenario "datasets": ``datasets.map`` (num_proc 1, 2, 4, and streaming) through a launched service against the
transformers tokenizer in-process (``TOKENIZERS_PARALLELISM=true``), on the benchmark corpus, each run in a process
of its own with a fresh datasets cache: seconds of the map, tokens/s and the peak RSS of the processes that ran the
function. Figures: docs/guides/datasets.md.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import Row, Scenario, Settings, call_in_own_process, log, peak_rss_mb
from testkit import corpora

SIDES = ("in-process", "service")


@dataclass(frozen=True)
class Counts:
    corpus_bytes: int = 16 << 20
    maps: tuple[str, ...] = ("1", "2", "4", "stream")  # num_proc, or streaming


FULL, SMOKE = Counts(), Counts(512 << 10, ("2",))


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
        arguments = (side, how, str(corpus), work)
        env = {"TOKENIZERS_PARALLELISM": "true"}
        result: dict[str, Any] = call_in_own_process(
            "benchmarks.scenarios.datasets:one_run", *arguments, timeout=1200, env=env
        )
    return result


def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(FULL, SMOKE)
    corpus = settings.work_dir / "datasets-corpus.jsonl"
    documents = corpora.write_jsonl(corpus, counts.corpus_bytes, fields=False)
    section: dict[str, Any] = {"corpus": {"mib": corpus.stat().st_size / 2**20, "documents": documents}, "rows": {}}
    for how in counts.maps:
        for side in SIDES:
            log(f"datasets: {side}, {how}")
            section["rows"].setdefault(how, {})[side] = run_in_own_process(side, how, corpus)
    return section


def rows(section: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for how, row in section.get("rows", {}).items():
        ours, theirs = row["service"], row["in-process"]
        for side, figures in row.items():
            out.append(
                {
                    "scenario": "datasets",
                    "texts": f"{section['corpus']['mib']:.1f} MiB JSONL",
                    "variant": f"{side}, " + ("streaming" if how == "stream" else f"num_proc={how}"),
                    "tokens_rate": figures["tokens_per_s"],
                    "ratio": "baseline"
                    if side == "in-process"
                    else f"{ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}x in-proc",
                    "note": f"worker peak RSS {figures['worker_peak_rss_mb']:.0f} MB",
                }
            )
    return out


SCENARIO = Scenario(
    "datasets",
    "datasets.map (and streaming map) through a launched service vs the tokenizer in-process",
    measure,
    rows,
    needs_torch=False,
    timeout=(3600.0, 240.0),
)
