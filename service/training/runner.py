"""One process's part of a training run: count its units (phase 1), and -- on worker 0, or with
``--phase merge`` -- wait for every unit, sum the counts and train once (phase 2)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..corpus import CorpusError, InputFile, Worker, WorkUnit, find_inputs, plan_units, read_done, resolve_worker
from ..corpus.progress import Log, Progress, duration, human, log_to_stderr, peak_rss_bytes
from .assembly import assemble, read_manifest, save
from .counting import (
    CharStats,
    CountingSpec,
    check_not_foreign,
    check_record,
    count_units,
    done_record,
    read_chars,
    unit_base,
)
from .learning import gather, learn, unit_count_files, wait_for_counts
from .options import TrainConfig
from .recipes import Recipe, RecipeError, build_recipe
from .vocabulary import check_lower_bound, plan_vocabulary


@dataclass
class CountSummary:
    """What this worker's counting did."""

    units: int  # this worker's
    already_done: int
    counted: int = 0
    documents: int = 0
    pretokens: int = 0
    skipped: int = 0
    input_bytes: int = 0
    processes: int = 1
    seconds: float = 0.0
    peak_rss_bytes: int = 0  # the largest process: this one or a counting process


@dataclass
class TrainSummary:
    """What the merge and training did (or found done already)."""

    out: Path
    fingerprint: str
    vocab_size: int
    documents: int
    pretokens: int
    distinct: int
    already_trained: bool = False
    waited_seconds: float = 0.0
    train_seconds: float = 0.0
    seconds: float = 0.0
    peak_rss_bytes: int = 0


@dataclass
class Summary:
    worker: Worker
    phase: str
    units: int
    count: CountSummary | None = None
    training: TrainSummary | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def train(config: TrainConfig, *, log: Log = log_to_stderr) -> Summary:
    """Run this process's part of ``config`` (see :class:`TrainConfig`). Everything that can be refused is
    refused before any work: the recipe, the vocabulary size against the special tokens and the initial
    alphabet, the inputs, the worker index, counts made differently in the counts directory."""
    started = time.monotonic()
    recipe = build_recipe(config.model, config.like, config.revision, config.special_tokens, config.model_max_length)
    if config.limit_alphabet is not None and recipe.family == "unigram":
        raise RecipeError("--limit-alphabet applies to BPE and WordPiece; the Unigram trainer keeps every character")
    check_lower_bound(recipe, config.vocab_size)
    files = find_inputs(config.inputs)
    units = plan_units(files, config.unit_bytes)
    worker = resolve_worker(config.shard_index, config.num_shards, config.environ)
    spec = CountingSpec(
        recipe.normalizer, recipe.pre_tokenizer, config.text_field, config.on_bad_record, config.max_words
    )
    counting = spec.describe()
    check_not_foreign(config.counts, units)
    summary = Summary(worker, config.phase, len(units))
    if config.phase in ("count", "all"):
        summary.count = _count(config, recipe, worker, units, spec, counting, log)
    if config.phase == "merge" or (config.phase == "all" and worker.index == 0):
        workers = worker.count if config.phase == "all" else None
        summary.training = _merge_and_train(config, recipe, files, units, counting, workers, log)
    elif config.phase == "all":
        summary.notes.append("worker 0 merges the counts and trains")
    summary.seconds = time.monotonic() - started
    return summary


# -- phase 1 ----------------------------------------------------------------------------------------------
def _count(
    config: TrainConfig,
    recipe: Recipe,
    worker: Worker,
    units: list[WorkUnit],
    spec: CountingSpec,
    counting: dict[str, Any],
    log: Log,
) -> CountSummary:
    from ..engine.parallelism import available_cpus

    started = time.monotonic()
    mine = worker.take(units)
    for unit in units:  # counts made differently, by any worker, stop the run now
        if unit not in mine and (record := read_done(unit_base(config.counts, unit))) is not None:
            check_record(record, unit, unit_base(config.counts, unit), counting)
    todo = [unit for unit in mine if done_record(unit, config.counts, counting) is None]
    report = CountSummary(units=len(mine), already_done=len(mine) - len(todo))
    processes = max(1, min(config.processes or available_cpus(), len(todo)))
    log(
        f"train: {worker.describe()}: {len(mine)} of {len(units)} units ({human(sum(u.weight for u in mine), 'B')} of "
        f"{human(sum(u.weight for u in units), 'B')}), {report.already_done} counted already; "
        f"{len(todo)} to count on {processes} process{'es' if processes > 1 else ''}, into {config.counts}"
    )
    if todo:
        progress = Progress(
            sum(unit.weight for unit in todo),
            mode=config.progress,
            interval=config.log_every,
            prefix="train: count",
            counted="pre-tokens",
        )
        try:
            records = count_units(todo, config.counts, spec, processes=processes, progress=progress)
        finally:
            progress.close()
        report.counted = len(records)
        report.processes = processes
        report.documents = sum(r["documents"] for r in records)
        report.pretokens = sum(r["pretokens"] for r in records)
        report.skipped = sum(r["skipped"] for r in records)
        report.input_bytes = sum(unit.weight for unit in todo)
        report.peak_rss_bytes = max(r["peak_rss_bytes"] for r in records)
        if config.limit_alphabet is None:  # this share's alphabet alone can show the vocabulary is too small
            local = CharStats()
            for unit in mine:
                local.update(read_chars(config.counts, unit))
            plan_vocabulary(recipe, local, config.vocab_size, None)
    report.seconds = time.monotonic() - started
    report.peak_rss_bytes = max(report.peak_rss_bytes, peak_rss_bytes())
    return report


# -- phase 2 ----------------------------------------------------------------------------------------------
def reset_peak_rss() -> bool:
    """Start this process's peak RSS (VmHWM) afresh, so that a phase reports its own (Linux only)."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return True
    except OSError:
        return False


def versions() -> dict[str, str]:
    import tokenizers
    import transformers

    return {
        "tokenizer-service": __version__,
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
    }


def _request_key(recipe: Recipe, units: list[WorkUnit], counting: dict[str, Any], options: dict[str, Any]) -> str:
    request = {
        "recipe": recipe.key(),
        "counting": counting["key"],
        "units": [unit.describe() for unit in units],
        "options": options,
        "versions": versions(),
    }
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _merge_and_train(
    config: TrainConfig,
    recipe: Recipe,
    files: list[InputFile],
    units: list[WorkUnit],
    counting: dict[str, Any],
    workers: int | None,
    log: Log,
) -> TrainSummary:
    started = time.monotonic()
    reset_peak_rss()
    for scratch in config.counts.glob(".merge-*") if config.counts.is_dir() else []:
        shutil.rmtree(scratch, ignore_errors=True)  # what an interrupted merge left (one merge runs at a time)
    records = wait_for_counts(
        units, config.counts, counting, wait_seconds=config.wait_seconds, log=log, workers=workers
    )
    waited = time.monotonic() - started
    stats, totals = gather(records, units, config.counts)
    if totals.pretokens == 0:
        raise CorpusError(f"the corpus holds no text to learn from ({totals.documents:,} documents, all empty)")
    plan = plan_vocabulary(recipe, stats, config.vocab_size, config.limit_alphabet)
    options = {"model": recipe.family, **config.training_options()}
    request = _request_key(recipe, units, counting, options)
    existing = read_manifest(config.out)
    if existing is not None and existing.get("request") == request:
        log(f"train: {config.out} already holds this tokenizer ({existing['tokenizer']['fingerprint']}); nothing to do")
        counts = existing["counts"]
        return TrainSummary(
            config.out,
            existing["tokenizer"]["fingerprint"],
            existing["tokenizer"]["vocab_size"],
            counts["documents"],
            counts["pretokens"],
            counts["distinct_pretokens"],
            already_trained=True,
            waited_seconds=waited,
            seconds=time.monotonic() - started,
        )
    show_progress = config.progress == "bar" or (config.progress == "auto" and sys.stderr.isatty())
    log(
        f"train: every unit is counted: {totals.documents:,} documents, {totals.pretokens:,} pre-tokens, alphabet of "
        f"{len(plan.alphabet):,} characters; training a {recipe.family} of {config.vocab_size:,} tokens"
    )
    learnt = learn(
        recipe,
        plan,
        unit_count_files(config.counts, units),
        config.counts / f".merge-{os.getpid()}",
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        show_progress=show_progress,
        log=log,
        distinct_upper_bound=totals.distinct_upper_bound,
    )
    tokenizer = assemble(learnt.tokenizer, recipe, plan)
    peak = peak_rss_bytes()
    manifest = save(
        tokenizer,
        recipe,
        config.out,
        {
            "created_by": f"tokenizer-service {__version__}",
            "request": request,
            "inputs": {
                "files": [file.describe() for file in files],
                "units": len(units),
                "unit_bytes": config.unit_bytes,
                "text_field": config.text_field,
                "on_bad_record": config.on_bad_record,
            },
            "counts": {
                **totals.describe(),
                "distinct_pretokens": learnt.distinct + learnt.left_out,
                "left_out_under_min_frequency": learnt.left_out,
                "counting_key": counting["key"],
            },
            "options": options,
            "recipe": recipe.describe(),
            "vocabulary": plan.describe(),
            "versions": versions(),
            "phases": {
                "count": {
                    "unit_seconds_summed": round(totals.count_seconds, 3),
                    "peak_rss_bytes": totals.count_peak_rss_bytes,
                },
                "merge": {
                    "waited_seconds": round(waited, 3),
                    "train_seconds": round(learnt.seconds, 3),
                    "peak_rss_bytes": peak,
                },
            },
        },
    )
    result = TrainSummary(
        config.out,
        manifest["tokenizer"]["fingerprint"],
        manifest["tokenizer"]["vocab_size"],
        totals.documents,
        totals.pretokens,
        learnt.distinct + learnt.left_out,
        waited_seconds=waited,
        train_seconds=learnt.seconds,
        seconds=time.monotonic() - started,
        peak_rss_bytes=peak,
    )
    log(f"train: wrote {config.out} ({result.vocab_size:,} tokens, {result.fingerprint})")
    return result


def describe_summary(summary: Summary) -> str:
    """The closing lines: documents, distinct pre-tokens, vocabulary size, time and peak memory per phase."""
    lines = [f"train: {summary.worker.describe()}, phase {summary.phase}: finished in {duration(summary.seconds)}"]
    count = summary.count
    if count is not None:
        rate = count.input_bytes / count.seconds if count.seconds and count.counted else 0.0
        processes = f"{count.processes} process{'es' if count.processes > 1 else ''}"
        lines.append(
            f"  count: {count.counted} units counted, {count.already_done} done already; {count.documents:,} "
            f"documents, {count.pretokens:,} pre-tokens, {human(count.input_bytes, 'B')} at {human(rate, 'B')}/s "
            f"on {processes}, {duration(count.seconds)}; peak RSS {count.peak_rss_bytes / 2**20:.0f} MiB"
        )
    trained = summary.training
    if trained is not None:
        if trained.already_trained:
            lines.append(f"  train: already done: {trained.out} ({trained.vocab_size:,} tokens, {trained.fingerprint})")
        else:
            lines.append(
                f"  merge+train: {trained.documents:,} documents, {trained.pretokens:,} pre-tokens, "
                f"{trained.distinct:,} distinct -> {trained.vocab_size:,} tokens in {duration(trained.seconds)} "
                f"(waited {duration(trained.waited_seconds)}, trained {duration(trained.train_seconds)}); "
                f"peak RSS {trained.peak_rss_bytes / 2**20:.0f} MiB"
            )
            lines.append(f"  tokenizer: {trained.out} ({trained.fingerprint})")
    lines.extend(f"  {note}" for note in summary.notes)
    return "\n".join(lines)
