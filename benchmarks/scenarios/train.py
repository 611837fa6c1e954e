"""Scenario "train": training a tokenizer from counts (``tokenizer-service train``: phase 1 counts, by 1 worker of 1
and of 2 counting processes and by 2 workers at once; phase 2 merges and trains) against ``train_from_iterator`` on
the whole corpus in one process, for a byte-level BPE and a WordPiece, on the real corpus of testkit.assets (10 MB)
in 1 MiB work units. Each measurement runs in a process of its own (its peak RSS is its own), with the CPU it used;
the merged tokenizer is checked against the baseline's. Figures: docs/guides/train.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    CpuProbe,
    Row,
    Scenario,
    Settings,
    available_cpus,
    busy_note,
    child_command,
    log,
    peak_rss_mb,
)

UNIT_BYTES = 1 << 20


@dataclass(frozen=True)
class Counts:
    models: tuple[tuple[str, int], ...] = (("byte-level-bpe", 32000), ("wordpiece", 21128))  # and vocabulary sizes
    corpus_share: int = 1  # every n-th text of the corpus


FULL, SMOKE = Counts(), Counts(models=(("byte-level-bpe", 2000),), corpus_share=40)


# -- the corpus -------------------------------------------------------------------------------------------
def write_corpus(folder: Path, share: int) -> tuple[int, int]:
    """Four JSON Lines files of the real corpus; (bytes, documents)."""
    from testkit import assets

    texts = assets.chinese_reviews() + assets.english_paragraphs() + assets.english_docstrings()
    texts = texts[::share]
    folder.mkdir(parents=True, exist_ok=True)
    files = [open(folder / f"part-{i}.jsonl", "w", encoding="utf-8") for i in range(4)]
    try:
        for i, text in enumerate(texts):
            files[i % 4].write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    finally:
        for stream in files:
            stream.close()
    return sum(path.stat().st_size for path in folder.iterdir()), len(texts)


def read_texts(folder: Path) -> list[str]:
    texts: list[str] = []
    for path in sorted(folder.glob("*.jsonl")):
        with open(path, encoding="utf-8") as lines:
            texts.extend(json.loads(line)["text"] for line in lines)
    return texts


# -- one measurement, in its own process ------------------------------------------------------------------
def child(
    mode: str,
    corpus: str,
    out: str,
    model: str,
    vocab_size: int,
    processes: int = 1,
    shard_index: int | None = None,
    num_shards: int | None = None,
) -> None:
    """One measurement (``baseline``, ``count`` or ``merge``), in a process of its own; prints its JSON line."""
    if mode == "baseline":
        print(json.dumps(baseline(Path(corpus), Path(out), model, vocab_size)), flush=True)
        return
    from service.training import TrainConfig, train

    config = TrainConfig(
        inputs=(corpus,),
        out=Path(out),
        model=model,
        vocab_size=vocab_size,
        phase=mode,
        unit_bytes=UNIT_BYTES,
        processes=processes,
        shard_index=shard_index,
        num_shards=num_shards,
        progress="none",
    )
    summary = train(config, log=lambda message: None)
    if mode == "count":
        assert summary.count is not None
        count = summary.count
        result = {"seconds": count.seconds, "input_bytes": count.input_bytes, "documents": count.documents}
        result |= {"pretokens": count.pretokens, "peak_rss_mb": max(count.peak_rss_bytes / 2**20, peak_rss_mb())}
    else:
        assert summary.training is not None
        trained = summary.training
        result = {"seconds": trained.seconds, "train_seconds": trained.train_seconds, "distinct": trained.distinct}
        result |= {"vocab_size": trained.vocab_size, "peak_rss_mb": peak_rss_mb()}
    print(json.dumps(result), flush=True)


def baseline(corpus: Path, out: Path, model: str, vocab_size: int) -> dict[str, Any]:
    """``train_from_iterator`` on every document, in this process, with the recipe's pipeline and trainer."""
    from testkit.training import reference_tokenizer

    texts = read_texts(corpus)
    started = time.perf_counter()
    tokenizer = reference_tokenizer(model, texts, vocab_size)
    seconds = time.perf_counter() - started
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    return {"seconds": seconds, "documents": len(texts), "peak_rss_mb": peak_rss_mb()}


def start(mode: str, corpus: Path, out: Path, model: str, vocab_size: int, *shards: int) -> subprocess.Popen[str]:
    """:func:`child` started, Rust parallelism on; ``shards``: its processes, shard index and shard count."""
    threads = str(available_cpus())
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true", "RAYON_NUM_THREADS": threads, "RAYON_RS_NUM_CPUS": threads}
    command = child_command("benchmarks.scenarios.train:child", mode, str(corpus), str(out), model, vocab_size, *shards)
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, proc.args))} failed ({proc.returncode}): {err[-3000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def measured(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()``'s figures, with its wall time, the CPU of the processes it waited for (user + system, their
    start-up included: a busy machine does not inflate it the way it does wall time) and the CPU others used."""
    probe = CpuProbe(reaped_children=True)
    before = probe.snapshot()
    result = work()
    window = CpuProbe.delta(before, probe.snapshot())
    result["wall_seconds"] = window["wall_seconds"]
    result["cpu_seconds"] = window["client_cpu_seconds"] + window["children_cpu_seconds"]
    result["other_cpu_cores"] = window["other_cpu_cores"]
    return result


# -- the comparison ---------------------------------------------------------------------------------------
def compare_tokenizers(ours: Path, theirs: Path) -> dict[str, Any]:
    a = json.loads((ours / "tokenizer.json").read_text("utf-8"))["model"]
    b = json.loads((theirs / "tokenizer.json").read_text("utf-8"))["model"]
    common = len(set(a["vocab"]) & set(b["vocab"]))
    return {
        "vocab_and_ids_equal": a["vocab"] == b["vocab"],
        "merges_equal": a.get("merges") == b.get("merges") if "merges" in a else None,
        "tokens_in_common": common / max(1, len(b["vocab"])),
    }


def measure_model(work: Path, corpus: Path, size: int, model: str, vocab_size: int) -> dict[str, Any]:
    folder = work / model

    def run(mode: str, out: Path, *shards: int) -> dict[str, Any]:
        return measured(lambda: finish(start(mode, corpus, out, model, vocab_size, *shards)))

    def two_workers() -> dict[str, Any]:
        pair = [start("count", corpus, folder / "count-2w", model, vocab_size, 1, i, 2) for i in range(2)]
        results = [finish(proc) for proc in pair]
        return {
            "seconds": max(r["seconds"] for r in results),
            "input_bytes": sum(r["input_bytes"] for r in results),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        }

    log(f"{model}: baseline train_from_iterator, one process")
    base = run("baseline", folder / "baseline")
    counts: dict[str, Any] = {}
    for label, processes in (("1 worker x 1 process", 1), ("1 worker x 2 processes", 2)):
        log(f"{model}: count, {label}")
        counts[label] = run("count", folder / f"count-{processes}", processes)
    log(f"{model}: count, 2 workers x 1 process, at once")
    counts["2 workers x 1 process"] = measured(two_workers)
    for result in counts.values():
        result["mb_per_s"] = size / 1e6 / result["seconds"]
    log(f"{model}: merge+train on the counts")
    merge = run("merge", folder / "count-1")
    check = compare_tokenizers(folder / "count-1", folder / "baseline")
    return {"baseline": base, "count": counts, "merge": merge, "check": check}


def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(FULL, SMOKE)
    work = settings.work_dir / "train"
    shutil.rmtree(work, ignore_errors=True)
    corpus = work / "corpus"
    size, documents = write_corpus(corpus, counts.corpus_share)
    models = {model: measure_model(work, corpus, size, model, vocab) for model, vocab in counts.models}
    return {"meta": {"documents": documents, "bytes": size, "cpus": available_cpus()}, "models": models}


def rows(section: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    size = section.get("meta", {}).get("bytes", 0)
    for model, figures in section.get("models", {}).items():
        base, merge, check = figures["baseline"], figures["merge"], figures["check"]
        best = min(c["seconds"] for c in figures["count"].values())
        lines = [("train_from_iterator, whole corpus, 1 process", base, "baseline", "")]
        lines += [(f"count: {label}", c, f"{c['mb_per_s']:.3g} MB/s", "") for label, c in figures["count"].items()]
        total = f"count (best) + merge+train vs baseline {(best + merge['seconds']) / base['seconds']:.2f}x"
        checked = f"vocabulary and ids equal {check['vocab_and_ids_equal']}, merges equal {check['merges_equal']}"
        lines.append((f"merge+train (training alone {merge['train_seconds']:.1f} s)", merge, total, checked))
        for variant, figure, ratio, note in lines:
            out.append(
                {
                    "scenario": "train",
                    "tokenizer": model,
                    "texts": f"{size / 1e6:.1f} MB, {section['meta']['documents']:,} docs",
                    "variant": variant,
                    "rate": f"{figure['seconds']:.3g} s",
                    "ratio": ratio,
                    "cpu": f"{figure['cpu_seconds']:.3g} s CPU, peak RSS {figure['peak_rss_mb']:.0f} MB",
                    "note": "; ".join(filter(None, [note, busy_note(figure["other_cpu_cores"])])),
                }
            )
    return out


SCENARIO = Scenario(
    "train",
    "training a tokenizer from counts (tokenizer-service train) vs train_from_iterator in one process",
    measure,
    rows,
    timeout=(3600.0, 150.0),
)
