"""Scenario "train": training a tokenizer from counts (``tokenizer-service train``) vs ``train_from_iterator`` on the
whole corpus in one process, side by side in one run (~3 min on 2 cores; its smoke: 1/40 of the corpus, BPE only).

The corpus is the whole real corpus of testkit.assets -- ~35k Chinese product reviews, the English paragraphs of
Python's documentation and the docstrings of its standard library (10 MB) -- as four JSON Lines files cut into
1 MiB work units. For each model (byte-level BPE of 32,000 tokens, WordPiece of 21,128), each measurement runs
in its own process (so its peak RSS, VmHWM, is its own):

- **baseline**: ``Tokenizer.train_from_iterator`` over every document, in one process, Rust parallelism on
  (the recipe's normalizer and pre-tokenizer, the same trainer options): the time of the call (reading the
  files excluded), and the process's peak RSS.
- **count**: phase 1 (``phase="count"``) over the whole corpus by 1 worker with 1 counting process, by 1 worker
  with 2 counting processes, and by 2 workers (``shard_index``/``num_shards``) of 1 process each running at
  once: MB/s of input (the workers' wall time), peak RSS of the largest process.
- **merge+train**: phase 2 (``phase="merge"``) on those counts: wait-free sum, replay, training, assembly and
  the save; the training alone; peak RSS.

Each figure comes with the CPU the measured processes used (``CPU s``, user + system, their start-up included),
which a busy machine does not inflate the way it does wall time, and a mark when other processes used more than
a quarter of a core meanwhile. And it checks the result: for BPE, the merged tokenizer's vocabulary, ids and
merges equal the baseline's; for WordPiece (whose trainer breaks ties in hash order, see the README) the share of
tokens in common.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    CLOCK_TICKS,
    Row,
    Scenario,
    Settings,
    available_cpus,
    busy_note,
    busy_ticks,
    child_command,
    log,
)

UNIT_BYTES = 1 << 20


@dataclass(frozen=True)
class Counts:
    models: tuple[tuple[str, int], ...] = (("byte-level-bpe", 32000), ("wordpiece", 21128))  # and vocabulary sizes
    corpus_share: int = 1  # every n-th text of the corpus


FULL, SMOKE = Counts(), Counts(models=(("byte-level-bpe", 2000),), corpus_share=40)


def peak_rss_mb() -> float:
    from service.jobs.progress import peak_rss_bytes

    return peak_rss_bytes() / 2**20


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
        result = {
            "seconds": count.seconds,
            "input_bytes": count.input_bytes,
            "documents": count.documents,
            "pretokens": count.pretokens,
            "peak_rss_mb": max(count.peak_rss_bytes / 2**20, peak_rss_mb()),
        }
    else:
        assert summary.training is not None
        trained = summary.training
        result = {
            "seconds": trained.seconds,
            "train_seconds": trained.train_seconds,
            "distinct": trained.distinct,
            "vocab_size": trained.vocab_size,
            "peak_rss_mb": peak_rss_mb(),
        }
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


def start(mode: str, corpus: Path, out: Path, model: str, vocab_size: int, *extra: int) -> subprocess.Popen[str]:
    """:func:`child` started; ``extra``: its processes, shard index and shard count."""

    threads = str(available_cpus())
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true", "RAYON_NUM_THREADS": threads, "RAYON_RS_NUM_CPUS": threads}
    command = child_command("benchmarks.scenarios.train:child", mode, str(corpus), str(out), model, vocab_size, *extra)
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, proc.args))} failed ({proc.returncode}): {err[-3000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


class Noise:
    """CPU other processes used while a measurement ran: the machine's busy time minus what this process and
    its children (the measured processes and their counting processes, once waited for) used."""

    def __enter__(self) -> Noise:
        self.wall, self.busy, self.ours = time.perf_counter(), busy_ticks(), self._ours()
        return self

    @staticmethod
    def _ours() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.wall
        busy = (busy_ticks() - self.busy) / CLOCK_TICKS
        self.cpu_seconds = self._ours() - self.ours  # the measured processes' CPU (user + system)
        self.other_cores = max(0.0, busy - self.cpu_seconds) / wall if wall > 0 else 0.0


def run(mode: str, corpus: Path, out: Path, model: str, vocab_size: int, *extra: int) -> dict[str, Any]:
    started = time.perf_counter()
    with Noise() as noise:
        result = finish(start(mode, corpus, out, model, vocab_size, *extra))
    result["wall_seconds"] = time.perf_counter() - started
    result["other_cpu_cores"] = noise.other_cores
    result["cpu_seconds"] = noise.cpu_seconds
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
    log(f"{model}: baseline train_from_iterator, one process")
    base = run("baseline", corpus, folder / "baseline", model, vocab_size)
    counts: dict[str, Any] = {}
    for label, processes in (("1 worker x 1 process", 1), ("1 worker x 2 processes", 2)):
        log(f"{model}: count, {label}")
        result = run("count", corpus, folder / f"count-{processes}", model, vocab_size, processes)
        result["mb_per_s"] = size / 1e6 / result["seconds"]
        counts[label] = result
    log(f"{model}: count, 2 workers x 1 process, at once")
    started = time.perf_counter()
    with Noise() as noise:
        pair = [start("count", corpus, folder / "count-2w", model, vocab_size, 1, i, 2) for i in range(2)]
        results = [finish(proc) for proc in pair]
    wall = time.perf_counter() - started
    counts["2 workers x 1 process"] = {
        "seconds": max(r["seconds"] for r in results),
        "wall_seconds": wall,
        "input_bytes": sum(r["input_bytes"] for r in results),
        "mb_per_s": size / 1e6 / max(r["seconds"] for r in results),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        "other_cpu_cores": noise.other_cores,
        "cpu_seconds": noise.cpu_seconds,
    }
    log(f"{model}: merge+train on the counts")
    merge = run("merge", corpus, folder / "count-1", model, vocab_size)
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
        texts = f"{size / 1e6:.1f} MB, {section['meta']['documents']:,} docs"

        def row(
            variant: str,
            figure: dict[str, Any],
            ratio: str = "",
            note: str = "",
            model: str = model,
            texts: str = texts,
        ) -> Row:
            cpu = f"{figure['cpu_seconds']:.3g} s CPU, peak RSS {figure['peak_rss_mb']:.0f} MB"
            notes = "; ".join(filter(None, [note, busy_note(figure["other_cpu_cores"])]))
            return {
                "scenario": "train",
                "tokenizer": model,
                "texts": texts,
                "variant": variant,
                "rate": f"{figure['seconds']:.3g} s",
                "ratio": ratio,
                "cpu": cpu,
                "note": notes,
            }

        out.append(row("train_from_iterator, whole corpus, 1 process", base, "baseline"))
        out += [
            row(f"count: {label}", count, f"{count['mb_per_s']:.3g} MB/s") for label, count in figures["count"].items()
        ]
        best = min(c["seconds"] for c in figures["count"].values())
        total = f"count (best) + merge+train vs baseline {(best + merge['seconds']) / base['seconds']:.2f}x"
        checked = f"vocabulary and ids equal {check['vocab_and_ids_equal']}, merges equal {check['merges_equal']}"
        out.append(row(f"merge+train (training alone {merge['train_seconds']:.1f} s)", merge, total, checked))
    return out


SCENARIO = Scenario(
    "train",
    "training a tokenizer from counts (tokenizer-service train) vs train_from_iterator in one process",
    measure,
    rows,
    timeout=(3600.0, 150.0),
)
