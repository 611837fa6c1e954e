"""Training a tokenizer from counts (``tokenizer-service train``) vs ``train_from_iterator`` on the whole corpus
in one process, side by side in one run.

    .venv/bin/python -m benchmarks.train_compare --out bench-results/train_compare.json     # ~3 min here
    .venv/bin/python -m benchmarks.train_compare --smoke --out /tmp/train_compare.json     # < 1 min

The corpus is the whole real corpus of testkit.assets -- ~35k Chinese product reviews, the English paragraphs of
Python's documentation and the docstrings of its standard library (10 MB) -- as four JSON Lines files cut into
1 MiB work units. For each model (byte-level BPE of 32,000 tokens, WordPiece of 21,128), each measurement runs
in its own process (so its peak RSS, VmHWM, is its own):

- **baseline**: ``Tokenizer.train_from_iterator`` over every document, in one process, Rust parallelism on
  (the recipe's normalizer and pre-tokenizer, the same trainer options): the time of the call (reading the
  files excluded), and the process's peak RSS.
- **count**: phase 1 (``--phase count``) over the whole corpus by 1 worker with 1 counting process, by 1 worker
  with 2 counting processes, and by 2 workers (``--shard-index``/``--num-shards``) of 1 process each running at
  once: MB/s of input (the workers' wall time), peak RSS of the largest process.
- **merge+train**: phase 2 (``--phase merge``) on those counts: wait-free sum, replay, training, assembly and
  the save; the training alone; peak RSS.

Each figure comes with the CPU the measured processes used (``CPU s``, user + system, their start-up included),
which a busy machine does not inflate the way it does wall time, and a mark when other processes used more than
a quarter of a core meanwhile. And it checks the result: for BPE, the merged tokenizer's vocabulary, ids and
merges equal the baseline's; for WordPiece (whose trainer breaks ties in hash order, see the README) the share of
tokens in common.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.loadgen import CLOCK_TICKS, busy_ticks
from benchmarks.machine import BUSY_CORES, available_cpus, wait_for_quiet
from benchmarks.progress import log
from testkit.servers import REPO

MODELS = {"byte-level-bpe": 32000, "wordpiece": 21128}
UNIT_BYTES = 1 << 20


def peak_rss_mb() -> float:
    from service.jobs.progress import peak_rss_bytes

    return peak_rss_bytes() / 2**20


# -- the corpus -------------------------------------------------------------------------------------------
def write_corpus(folder: Path, smoke: bool) -> tuple[int, int]:
    """Four JSON Lines files of the real corpus; (bytes, documents)."""
    from testkit import assets

    texts = assets.chinese_reviews() + assets.english_paragraphs() + assets.english_docstrings()
    if smoke:
        texts = texts[::40]
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
def child(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("baseline", "count", "merge"))
    parser.add_argument("corpus", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", required=True)
    parser.add_argument("--vocab-size", type=int, required=True)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--shard-index", type=int)
    parser.add_argument("--num-shards", type=int)
    args = parser.parse_args(argv)
    if args.mode == "baseline":
        print(json.dumps(baseline(args.corpus, args.out, args.model, args.vocab_size)), flush=True)
        return
    from service.training import TrainConfig, train

    config = TrainConfig(
        inputs=(str(args.corpus),),
        out=args.out,
        model=args.model,
        vocab_size=args.vocab_size,
        phase=args.mode,
        unit_bytes=UNIT_BYTES,
        processes=args.processes,
        shard_index=args.shard_index,
        num_shards=args.num_shards,
        progress="none",
    )
    summary = train(config, log=lambda message: None)
    if args.mode == "count":
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


def start(mode: str, corpus: Path, out: Path, model: str, vocab_size: int, *extra: str) -> subprocess.Popen[str]:
    threads = str(available_cpus())
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "true", "RAYON_NUM_THREADS": threads, "RAYON_RS_NUM_CPUS": threads}
    command = [sys.executable, "-m", "benchmarks.train_compare", "--child", mode, str(corpus), str(out)]
    command += ["--model", model, "--vocab-size", str(vocab_size), *extra]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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


def run(mode: str, corpus: Path, out: Path, model: str, vocab_size: int, *extra: str) -> dict[str, Any]:
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
        result = run("count", corpus, folder / f"count-{processes}", model, vocab_size, "--processes", str(processes))
        result["mb_per_s"] = size / 1e6 / result["seconds"]
        counts[label] = result
    log(f"{model}: count, 2 workers x 1 process, at once")
    started = time.perf_counter()
    with Noise() as noise:
        pair = [
            start("count", corpus, folder / "count-2w", model, vocab_size, "--shard-index", str(i), "--num-shards", "2")
            for i in range(2)
        ]
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


def busy(figure: dict[str, Any]) -> str:
    """A mark for a figure taken while other processes used more than BUSY_CORES cores."""
    return " *" if figure.get("other_cpu_cores", 0.0) > BUSY_CORES else ""


def table(results: dict[str, Any], size: int) -> str:
    lines = [
        f"corpus: {size / 1e6:.1f} MB, {results['meta']['documents']:,} documents; {results['meta']['cpus']} CPUs; "
        f"* = other processes used over {BUSY_CORES} cores meanwhile",
        f"{'model':<15} {'measurement':<42} {'seconds':>8} {'MB/s':>7} {'CPU s':>7} {'peak RSS':>9}",
    ]
    for model, figures in results["models"].items():
        base = figures["baseline"]
        lines.append(
            f"{model:<15} {'train_from_iterator, whole corpus, 1 process':<42} {base['seconds']:8.1f} "
            f"{size / 1e6 / base['seconds']:7.2f} {base['cpu_seconds']:7.1f} {base['peak_rss_mb']:7.0f}MB{busy(base)}"
        )
        for label, count in figures["count"].items():
            lines.append(
                f"{'':<15} {'count: ' + label:<42} {count['seconds']:8.1f} {count['mb_per_s']:7.2f} "
                f"{count['cpu_seconds']:7.1f} {count['peak_rss_mb']:7.0f}MB{busy(count)}"
            )
        merge = figures["merge"]
        lines.append(
            f"{'':<15} {'merge+train (training alone ' + format(merge['train_seconds'], '.1f') + ' s)':<42} "
            f"{merge['seconds']:8.1f} {'':>7} {merge['cpu_seconds']:7.1f} {merge['peak_rss_mb']:7.0f}MB{busy(merge)}"
        )
        best = min(c["seconds"] for c in figures["count"].values())
        lines.append(
            f"{'':<15} {'count (best) + merge+train vs baseline':<42} {best + merge['seconds']:8.1f} "
            f"{'':>7} {(best + merge['seconds']) / base['seconds']:8.2f}x"
        )
        check = figures["check"]
        lines.append(
            f"{'':<15} result: vocabulary and ids equal {check['vocab_and_ids_equal']}, merges equal "
            f"{check['merges_equal']}, tokens in common {check['tokens_in_common']:.1%}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        child(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "train_compare.json")
    parser.add_argument("--work-dir", type=Path, default=REPO / ".cache" / "bench-train")
    parser.add_argument("--smoke", action="store_true", help="1/40 of the corpus, small vocabularies")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    args = parser.parse_args(argv)
    import shutil

    shutil.rmtree(args.work_dir, ignore_errors=True)
    corpus = args.work_dir / "corpus"
    size, documents = write_corpus(corpus, args.smoke)
    noise = wait_for_quiet(0 if args.smoke else 60)
    results: dict[str, Any] = {
        "meta": {
            "documents": documents,
            "bytes": size,
            "cpus": available_cpus(),
            "python": platform.python_version(),
            "smoke": args.smoke,
            "other_cpu_cores_at_start": noise,
        },
        "models": {},
    }
    for model in args.models.split(","):
        vocab_size = MODELS[model] if not args.smoke else 2000 if model == "byte-level-bpe" else 3000
        results["models"][model] = measure_model(args.work_dir, corpus, size, model, vocab_size)
    report = table(results, size)
    results["table"] = report
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(report)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
