"""One process's part of a training run (:func:`train`), as the ``train`` step on the sharded-job executor."""

from __future__ import annotations

import contextlib
import platform
import time
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..jobs import CorpusError, DoneRecord, Folder, InputFile, ShardedJob, Step, Storage, Worker, WorkUnit, run_worker
from ..jobs.documents import SKIPPED_EXAMPLES, describe_skipped
from ..jobs.progress import Log, Progress, duration, human, log_to_stderr, peak_rss_bytes
from ..plurals import counted
from ..wire import FINGERPRINT_SCHEME
from .assembly import assemble, read_manifest, save
from .counting import CharStats, CountingSpec, CountStats, count_files, count_units, read_chars
from .learning import MISSING_HINT, CountTotals, Learnt, gather, learn
from .options import TrainConfig
from .recipes import Recipe, RecipeError, build_recipe, json_key
from .vocabulary import VocabularyPlan, check_lower_bound, plan_vocabulary


@dataclass
class CountSummary:
    """What this worker's counting did."""

    units: int  # this worker's
    already_done: int
    counted: int = 0
    documents: int = 0
    pretokens: int = 0
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)  # the first few, as ``path:line: reason``
    input_bytes: int = 0
    processes: int = 1
    seconds: float = 0.0
    peak_rss_bytes: int = 0  # the largest process: this one or a counting process


@dataclass
class TrainSummary:
    """What the merge and training did (or found done already)."""

    out: str
    fingerprint: str
    vocab_size: int
    documents: int
    pretokens: int
    distinct: int
    target_vocab_size: int = 0
    shortfall: str | None = None
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


def train(config: TrainConfig, *, log: Log = log_to_stderr) -> Summary:
    """Run this process's part of ``config``. Everything that can be refused (the recipe, the vocabulary size
    against it, the inputs, the worker index, counts made differently) is refused before any work."""
    started = time.monotonic()
    storage = config.storage(log)
    recipe = build_recipe(
        config.model, config.like, config.revision, config.special_tokens, config.model_max_length, storage
    )
    if config.limit_alphabet is not None and recipe.family == "unigram":
        raise RecipeError("--limit-alphabet applies to BPE and WordPiece; the Unigram trainer keeps every character")
    check_lower_bound(recipe, config.vocab_size)
    files, units, worker = config.plan(storage)
    step = TrainStep(config, recipe, files, storage, log)
    counts = config.phase in ("count", "all")
    report = run_worker(
        step,
        folder=storage.folder(config.counts),
        units=units,
        worker=worker,
        config=config,
        log=log,
        work=counts,
        finish=config.phase == "merge" or (config.phase == "all" and worker.index == 0),
    )
    summary = Summary(worker, config.phase, len(units), training=report.result)
    if counts:
        counted = [record.stats for record in report.committed]
        summary.count = CountSummary(
            units=report.mine,
            already_done=report.already_done,
            counted=len(counted),
            documents=sum(stats.documents for stats in counted),
            pretokens=sum(stats.pretokens for stats in counted),
            skipped=sum(stats.skipped for stats in counted),
            skipped_examples=[example for stats in counted for example in stats.skipped_examples][:SKIPPED_EXAMPLES],
            input_bytes=report.processed_bytes,
            processes=step.processes,
            seconds=report.seconds,
            peak_rss_bytes=max([report.peak_rss_bytes, *(stats.peak_rss_bytes for stats in counted)]),
        )
    summary.seconds = time.monotonic() - started
    return summary


class TrainStep(Step[CountStats, TrainSummary]):
    """A unit's outputs are its pre-token counts (phase 1); the finalize, on worker 0 or ``--phase merge``,
    sums every unit's counts, trains once and writes the tokenizer (phase 2)."""

    name = "train"
    stats_type = CountStats
    conflict_hint = "use another --counts folder, or delete the old counts"
    missing_hint = MISSING_HINT
    progress_prefix = "train: count"
    counted = "pre-tokens"

    def __init__(self, config: TrainConfig, recipe: Recipe, files: list[InputFile], storage: Storage, log: Log):
        self.config = config
        self.recipe = recipe
        self.files = files
        self.storage = storage
        self.log = log
        self.spec = CountingSpec(
            recipe.normalizer, recipe.pre_tokenizer, config.text_field, config.on_bad_record, config.max_words
        )
        self.settings = self.spec.describe()
        self.processes = 1

    def outputs(self, unit: WorkUnit) -> list[str]:
        return count_files(unit)

    def process(self, units: list[WorkUnit], job: ShardedJob[CountStats], progress: Progress) -> None:
        from ..engine.parallelism import available_cpus

        config = self.config
        self.processes = max(1, min(config.processes or available_cpus(), len(units)))
        self.log(
            f"train: {len(units)} to count on {counted(self.processes, 'process', 'processes')}, "
            f"into {job.folder.url()}"
        )
        count_units(
            units, job.folder, self.spec, self.storage, processes=self.processes, progress=progress, commit=job.commit
        )
        if config.limit_alphabet is None:  # this share's alphabet alone can show the vocabulary is too small
            local = CharStats()
            for unit in job.mine():
                local.update(read_chars(job.folder, unit))
            plan_vocabulary(self.recipe, local, config.vocab_size, None)

    def finalize(
        self, job: ShardedJob[CountStats], records: list[DoneRecord[CountStats]], waited: float
    ) -> TrainSummary:
        config, recipe = self.config, self.recipe
        started = time.monotonic() - waited  # the merge began with the wait
        reset_peak_rss()
        gathered = self._gather_counts(job, records, waited)
        out = self.storage.folder(config.out_location)
        done = _already_trained(out, gathered, started, self.log)
        if done is not None:
            return done
        self.log(
            f"train: every unit is counted: {counted(gathered.totals.documents, 'document')}, "
            f"{counted(gathered.totals.pretokens, 'pre-token')}, "
            f"alphabet of {len(gathered.plan.alphabet):,} characters; "
            f"training a {recipe.family} of {config.vocab_size:,} tokens"
        )
        learnt = learn(recipe, gathered.plan, config, job.folder, job.units, gathered.totals, self.log)
        tokenizer = assemble(learnt.tokenizer, recipe, gathered.plan)
        peak = peak_rss_bytes()
        shortfall = _shortfall(recipe, config, tokenizer.get_vocab_size())
        manifest = save(tokenizer, recipe, out, self._manifest(job, gathered, learnt, peak, shortfall))
        result = TrainSummary(
            out.url(),
            manifest["tokenizer"]["fingerprint"],
            manifest["tokenizer"]["vocab_size"],
            gathered.totals.documents,
            gathered.totals.pretokens,
            learnt.distinct + learnt.left_out,
            target_vocab_size=config.vocab_size,
            shortfall=shortfall,
            waited_seconds=waited,
            train_seconds=learnt.seconds,
            seconds=time.monotonic() - started,
            peak_rss_bytes=peak,
        )
        self.log(f"train: wrote {out.url()} ({result.vocab_size:,} tokens, {result.fingerprint})")
        if shortfall:
            self.log(f"train: {shortfall}")
        return result

    def _gather_counts(
        self, job: ShardedJob[CountStats], records: list[DoneRecord[CountStats]], waited: float
    ) -> _Counted:
        """Sum every unit's records and characters, and plan the vocabulary."""
        config, recipe = self.config, self.recipe
        stats, totals = gather(records, job.units, job.folder)
        if totals.pretokens == 0:
            raise CorpusError(f"the corpus holds no text to learn from ({totals.documents:,} documents, all empty)")
        plan = plan_vocabulary(recipe, stats, config.vocab_size, config.limit_alphabet)
        options = {"model": recipe.family, **config.training_options()}
        request = {
            "recipe": recipe.key(),
            "counting": job.settings["key"],
            "units": [unit.describe() for unit in job.units],
            "options": options,
            "versions": versions(),
        }
        return _Counted(totals, plan, options, json_key(request), waited)

    def _manifest(
        self, job: ShardedJob[CountStats], counted: _Counted, learnt: Learnt, peak: int, shortfall: str | None
    ) -> dict[str, Any]:
        config, totals = self.config, counted.totals
        return {
            "created_by": f"tokenizer-service {__version__}",
            "request": counted.request,
            "inputs": {
                "files": [file.describe() for file in self.files],
                "units": len(job.units),
                "unit_bytes": config.unit_bytes,
                "text_field": config.text_field,
                "on_bad_record": config.on_bad_record,
            },
            "counts": {
                **totals.describe(),
                "distinct_pretokens": learnt.distinct + learnt.left_out,
                "left_out_under_min_frequency": learnt.left_out,
                "counting_key": job.settings["key"],
            },
            "options": counted.options,
            "recipe": self.recipe.describe(),
            "vocabulary": {**counted.plan.describe(), "target_vocab_size": config.vocab_size, "shortfall": shortfall},
            "versions": versions(),
            "phases": {
                "count": {
                    "unit_seconds_summed": round(totals.count_seconds, 3),
                    "peak_rss_bytes": totals.count_peak_rss_bytes,
                },
                "merge": {
                    "waited_seconds": round(counted.waited, 3),
                    "train_seconds": round(learnt.seconds, 3),
                    "peak_rss_bytes": peak,
                },
            },
        }


def reset_peak_rss() -> None:
    """Start this process's peak RSS (VmHWM) afresh, for a phase's own (Linux only)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


def versions() -> dict[str, str]:
    import tokenizers
    import transformers

    return {
        "tokenizer-service": __version__,
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "fingerprint_scheme": str(FINGERPRINT_SCHEME),  # a manifest's fingerprint is of the scheme it was made by
    }


@dataclass
class _Counted:
    totals: CountTotals
    plan: VocabularyPlan
    options: dict[str, Any]
    request: str  # the key of everything that goes into the tokenizer
    waited: float


def _already_trained(out: Folder, counted: _Counted, started: float, log: Log) -> TrainSummary | None:
    """The summary of the tokenizer ``out`` holds when it was made from this very request, else None."""
    existing = read_manifest(out)
    if existing is None or existing.get("request") != counted.request:
        return None
    log(f"train: {out.url()} already holds this tokenizer ({existing['tokenizer']['fingerprint']}); nothing to do")
    counts, vocabulary = existing["counts"], existing.get("vocabulary", {})
    return TrainSummary(
        out.url(),
        existing["tokenizer"]["fingerprint"],
        existing["tokenizer"]["vocab_size"],
        counts["documents"],
        counts["pretokens"],
        counts["distinct_pretokens"],
        target_vocab_size=vocabulary.get("target_vocab_size", 0),
        shortfall=vocabulary.get("shortfall"),
        already_trained=True,
        waited_seconds=counted.waited,
        seconds=time.monotonic() - started,
    )


def _shortfall(recipe: Recipe, config: TrainConfig, reached: int) -> str | None:
    if reached >= config.vocab_size:
        return None
    if recipe.family == "unigram":
        why = "the corpus holds no more distinct pieces"
    else:
        cut = f" counted at least --min-frequency {config.min_frequency} times" if config.min_frequency > 1 else ""
        why = f"the corpus has no more pairs to merge{cut} (every pre-token is one token already)"
    return (
        f"the vocabulary has {reached:,} tokens, not the {config.vocab_size:,} asked for (--vocab-size): {why}; "
        "train on a bigger corpus, or ask for fewer tokens"
    )


def describe_summary(summary: Summary) -> str:
    """The closing lines: what each phase did, its time and peak memory."""
    lines = [f"train: {summary.worker.describe()}, phase {summary.phase}: finished in {duration(summary.seconds)}"]
    count = summary.count
    if count is not None:
        rate = count.input_bytes / count.seconds if count.seconds and count.counted else 0.0
        processes = counted(count.processes, "process", "processes")
        lines.append(
            f"  count: {counted(count.counted, 'unit')} counted, {count.already_done} done already; "
            f"{counted(count.documents, 'document')}, {counted(count.pretokens, 'pre-token')}, "
            f"{human(count.input_bytes, 'B')} at {human(rate, 'B')}/s on {processes}, {duration(count.seconds)}; "
            f"peak RSS {count.peak_rss_bytes / 2**20:.0f} MiB"
        )
        if count.skipped:
            lines.append(f"  skipped: {describe_skipped(count.skipped, count.skipped_examples)}")
    trained = summary.training
    if trained is not None:
        if trained.already_trained:
            lines.append(f"  train: already done: {trained.out} ({trained.vocab_size:,} tokens, {trained.fingerprint})")
        else:
            lines.append(
                f"  merge+train: {counted(trained.documents, 'document')}, {counted(trained.pretokens, 'pre-token')}, "
                f"{trained.distinct:,} distinct -> {trained.vocab_size:,} tokens in {duration(trained.seconds)} "
                f"(waited {duration(trained.waited_seconds)}, trained {duration(trained.train_seconds)}); "
                f"peak RSS {trained.peak_rss_bytes / 2**20:.0f} MiB"
            )
            lines.append(f"  tokenizer: {trained.out} ({trained.fingerprint})")
        if trained.shortfall:
            lines.append(f"  note: {trained.shortfall}")
    if summary.phase == "all" and trained is None:
        lines.append("  worker 0 merges the counts and trains")
    return "\n".join(lines)
