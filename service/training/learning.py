"""Phase 2, once: sum every unit's counts and train on the sums. A trainer cannot be handed counts, so the sums
are *replayed* (:class:`Replay`): each pre-token fed as many times as counted, joined by a separator absent from
the corpus, through a tokenizer that only splits there, so the trainer builds exactly the raw corpus's word map
(``docs/guides/train.md``). Unigram has no ``min_frequency``: pre-tokens counted fewer times are left out.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..jobs import DoneRecord, Folder, WorkUnit
from ..jobs.progress import Log, human
from .countfiles import merge_files
from .counting import CharStats, CountStats, count_files, read_chars
from .options import TrainConfig
from .recipes import Recipe
from .vocabulary import VocabularyPlan

#: Characters per replayed text: smaller texts share the trainer's threads better and stay in cache (64 KiB
#: replays a third faster than 1 MiB).
REPLAY_CHARS = 1 << 16

#: What worker 0 says when it gives up waiting for counts (with the missing units before it).
MISSING_HINT = (
    "Rerun their workers (a rerun counts only the unfinished units), then the merge (--phase merge, or worker 0 "
    "again); the tokenizer is never trained on part of the counts."
)


@dataclass
class CountTotals:
    """The sums over every unit's record."""

    units: int = 0
    documents: int = 0
    pretokens: int = 0
    skipped: int = 0
    distinct_upper_bound: int = 0  # the sum of the units' distinct pre-tokens
    count_seconds: float = 0.0  # summed over units (processes and workers run at once)
    count_peak_rss_bytes: int = 0  # the largest counting process

    def describe(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ("units", "documents", "pretokens", "skipped")}


def gather(
    records: Sequence[DoneRecord[CountStats]], units: Sequence[WorkUnit], folder: Folder
) -> tuple[CharStats, CountTotals]:
    """The characters of the whole corpus and the sums of the units' records."""
    stats = CharStats()
    totals = CountTotals()
    for record, unit in zip(records, units, strict=True):
        stats.update(read_chars(folder, unit))
        totals.units += 1
        totals.documents += record.stats.documents
        totals.pretokens += record.stats.pretokens
        totals.skipped += record.stats.skipped
        totals.distinct_upper_bound += record.stats.distinct
        totals.count_seconds += record.stats.seconds
        totals.count_peak_rss_bytes = max(totals.count_peak_rss_bytes, record.stats.peak_rss_bytes)
    return stats, totals


@dataclass
class Replay:
    """The summed counts as texts for the trainer, counting what was fed."""

    counts: Iterable[tuple[str, int]]
    separator: str
    min_count: int
    on_word: Callable[[int], None]  # called with the pre-tokens fed so far, every 65,536
    distinct: int = field(default=0, init=False)  # pre-tokens fed
    left_out: int = field(default=0, init=False)  # distinct pre-tokens under min_count

    def __iter__(self) -> Iterator[str]:
        separator, limit, min_count = self.separator, REPLAY_CHARS, self.min_count
        parts: list[str] = []
        size = 0
        for word, count in self.counts:
            if count < min_count:
                self.left_out += 1
                continue
            self.distinct += 1
            if self.distinct % 65536 == 0:
                self.on_word(self.distinct)
            piece = word + separator
            length = len(piece)
            while count:
                room = max(1, (limit - size) // length)
                taken = min(count, room)
                parts.append(piece * taken)
                size += taken * length
                count -= taken
                if size >= limit:
                    yield "".join(parts)
                    parts, size = [], 0
        if parts:
            yield "".join(parts)


def replay_tokenizer(recipe: Recipe, separator: str) -> Any:
    """The recipe's untrained model with no normalizer and a pre-tokenizer that only splits at ``separator``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    if recipe.family == "unigram":
        tokenizer = Tokenizer(models.Unigram())
    else:
        model = dict(recipe.model)
        model["vocab"] = {}
        if model["type"] == "BPE":
            model["merges"] = []
        tokenizer = Tokenizer.from_str(json.dumps({"version": "1.0", "model": model}))
    tokenizer.pre_tokenizer = pre_tokenizers.CharDelimiterSplit(separator)  # a third faster than Split
    return tokenizer


def make_trainer(recipe: Recipe, plan: VocabularyPlan, vocab_size: int, min_frequency: int, show_progress: bool) -> Any:
    """The recipe's trainer with the plan's seeds and alphabet."""
    from tokenizers import AddedToken, trainers

    special = [AddedToken(**token) for token in recipe.special_tokens]
    seeds = [AddedToken(piece, special=True, normalized=False) for piece in plan.seeds]
    options: dict[str, Any] = {
        "vocab_size": vocab_size,
        "show_progress": show_progress,
        "special_tokens": special + seeds,
        "initial_alphabet": list(plan.initial_alphabet),
    }
    if recipe.family == "unigram":
        return trainers.UnigramTrainer(unk_token=recipe.unk_token, **options)
    options["min_frequency"] = min_frequency
    if plan.limit_alphabet is not None:
        options["limit_alphabet"] = plan.limit_alphabet
    if recipe.suffix:
        options["end_of_word_suffix"] = recipe.suffix
    if recipe.family == "wordpiece":
        return trainers.WordPieceTrainer(continuing_subword_prefix=recipe.prefix or "##", **options)
    if recipe.prefix:
        options["continuing_subword_prefix"] = recipe.prefix
    return trainers.BpeTrainer(**options)


@dataclass
class Learnt:
    tokenizer: Any  # the trained replay tokenizer
    distinct: int
    left_out: int
    seconds: float


def learn(
    recipe: Recipe,
    plan: VocabularyPlan,
    config: TrainConfig,
    folder: Folder,
    units: Sequence[WorkUnit],
    totals: CountTotals,
    log: Log,
) -> Learnt:
    """Merge every unit's count file, replay the sums into the trainer, and train once."""
    show_progress = config.progress == "bar" or (config.progress == "auto" and sys.stderr.isatty())
    scratch = Path(tempfile.mkdtemp(prefix="tokenizer-service-merge-"))
    try:
        # each count file on local disk, remote ones downloaded whole: a dropped connection costs one download
        names = (count_files(unit)[0] for unit in units)
        files = [folder.fetch(name, scratch / "counts" / f"{i:06d}.counts") for i, name in enumerate(names)]
        started = time.monotonic()
        last_line = [started]

        def on_word(fed: int) -> None:
            now = time.monotonic()
            if not show_progress and now - last_line[0] >= 10:
                last_line[0] = now
                most = human(totals.distinct_upper_bound)
                log(f"train: fed {human(fed)} of at most {most} distinct pre-tokens to the trainer")

        replay = Replay(
            merge_files(files, scratch / "rounds"),
            plan.separator,
            min_count=config.min_frequency if recipe.family == "unigram" else 0,
            on_word=on_word,
        )
        tokenizer = replay_tokenizer(recipe, plan.separator)
        trainer = make_trainer(recipe, plan, config.vocab_size, config.min_frequency, show_progress)
        tokenizer.train_from_iterator(replay, trainer=trainer)
        return Learnt(tokenizer, replay.distinct, replay.left_out, time.monotonic() - started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
