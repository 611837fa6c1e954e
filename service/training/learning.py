"""Phase 2, once: wait for every unit's counts, sum them, and train the model on the sums.

The tokenizers trainers learn from word counts (``feed`` turns text into a map from pre-token to count,
``train`` learns from that map alone), but Python cannot hand them a map. So the summed counts are
*replayed*: each pre-token is fed as many times as it was counted, joined by a separator character that
occurs nowhere in the corpus, through a tokenizer whose normalizer is off and whose pre-tokenizer only
splits at that separator. (A trainer's state does hold its word counts -- counting reads them from there,
see :mod:`.counting` -- but ``train_from_iterator`` replaces them with what it is fed, so they cannot be
handed in that way.) The trainer then builds exactly the map it would have built from the raw corpus
(the counts are exact, see :mod:`.counting`) -- a BPE so trained has the vocabulary, ids and merges of
``train_from_iterator`` on the raw corpus, which the tests check. Replaying costs time in proportion to the
number of pre-token occurrences (a few microseconds each), not to the input size.

``min_frequency`` applies to the global sums: for BPE and WordPiece the trainer applies it, as always, to
the counts of pairs, computed from the replayed (global) counts; the Unigram trainer has no such option, so
for Unigram pre-tokens counted fewer than ``min_frequency`` times over the whole corpus are left out.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..corpus import WorkUnit, read_done, wait_for_done
from ..corpus.progress import Log, duration, human
from .countfiles import merge_files
from .counting import CharStats, check_record, read_chars, unit_base, unit_counts
from .recipes import Recipe
from .vocabulary import VocabularyPlan

#: Characters per replayed text: the trainer splits each text on one of its threads, and smaller texts
#: share the work out better and keep its buffers in cache (64 KiB replays a third faster than 1 MiB).
REPLAY_CHARS = 1 << 16


class CountsMissing(Exception):
    """Some units were not counted in time; the message names them (and their workers when known)."""


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
        return {
            "units": self.units,
            "documents": self.documents,
            "pretokens": self.pretokens,
            "skipped": self.skipped,
        }


def wait_for_counts(
    units: Sequence[WorkUnit],
    counts_dir: Path,
    counting: dict[str, Any],
    *,
    wait_seconds: float,
    log: Log,
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """Every unit's record, once all are done and whole; waits as long as some unit gets done at least
    every ``wait_seconds``. Raises :class:`CountsMissing` naming the units still missing."""
    bases = [unit_base(counts_dir, unit) for unit in units]
    owner = {base: index % workers for index, base in enumerate(bases)} if workers else {}
    last_line = [0.0]

    def on_wait(done: int, total: int, missing: list[Path]) -> None:
        if time.monotonic() - last_line[0] < 10:
            return
        last_line[0] = time.monotonic()
        log(f"train: waiting for counts: {done} of {total} units done (missing {_names(missing, counts_dir, owner)})")

    poll = min(5.0, max(wait_seconds / 10, 0.1))
    wait_for_done(bases, stall_timeout=wait_seconds, poll_interval=poll, on_wait=on_wait)
    records: list[dict[str, Any]] = []
    missing: list[Path] = []
    for unit, base in zip(units, bases, strict=True):
        record = read_done(base)
        if record is None or not check_record(record, unit, base, counting):
            missing.append(base)
        else:
            records.append(record)
    if missing:
        raise CountsMissing(
            f"{len(missing)} of {len(units)} units are not counted after waiting {duration(wait_seconds)} without "
            f"progress: {_names(missing, counts_dir, owner)}. Rerun their workers (a rerun counts only the "
            "unfinished units), then the merge (--phase merge, or worker 0 again); the tokenizer is never "
            "trained on part of the counts"
        )
    return records


def _names(missing: list[Path], counts_dir: Path, owner: dict[Path, int]) -> str:
    shown = [
        str(base.relative_to(counts_dir)) + (f" (worker {owner[base]})" if base in owner else "")
        for base in missing[:5]
    ]
    return ", ".join(shown) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")


def gather(
    records: Sequence[dict[str, Any]], units: Sequence[WorkUnit], counts_dir: Path
) -> tuple[CharStats, CountTotals]:
    """The characters of the whole corpus and the sums of the units' records."""
    stats = CharStats()
    totals = CountTotals()
    for record, unit in zip(records, units, strict=True):
        stats.update(read_chars(counts_dir, unit))
        totals.units += 1
        totals.documents += record["documents"]
        totals.pretokens += record["pretokens"]
        totals.skipped += record["skipped"]
        totals.distinct_upper_bound += record["distinct"]
        totals.count_seconds += record["seconds"]
        totals.count_peak_rss_bytes = max(totals.count_peak_rss_bytes, record.get("peak_rss_bytes", 0))
    return stats, totals


class Replay:
    """The summed counts as texts for the trainer (see the module docstring), with what was fed."""

    def __init__(
        self,
        counts: Iterable[tuple[str, int]],
        separator: str,
        *,
        min_count: int = 0,
        on_word: Callable[[int], None] | None = None,
    ) -> None:
        self.counts = counts
        self.separator = separator
        self.min_count = min_count
        self.on_word = on_word
        self.distinct = 0  # pre-tokens fed
        self.pretokens = 0  # occurrences fed
        self.left_out = 0  # distinct pre-tokens under min_count

    def __iter__(self) -> Iterator[str]:
        separator, limit, min_count = self.separator, REPLAY_CHARS, self.min_count
        parts: list[str] = []
        size = 0
        for word, count in self.counts:
            if count < min_count:
                self.left_out += 1
                continue
            self.distinct += 1
            self.pretokens += count
            if self.on_word is not None and self.distinct % 65536 == 0:
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
    """A tokenizer with the recipe's (untrained) model, no normalizer, and a pre-tokenizer that only splits
    at ``separator``: fed replayed counts, its trainer sees exactly the counted pre-tokens."""
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
    if recipe.family == "unigram":
        return trainers.UnigramTrainer(
            vocab_size=vocab_size,
            show_progress=show_progress,
            special_tokens=special + seeds,
            initial_alphabet=list(plan.initial_alphabet),
            unk_token=recipe.unk_token,
        )
    options: dict[str, Any] = {
        "vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "show_progress": show_progress,
        "special_tokens": special + seeds,
        "initial_alphabet": list(plan.initial_alphabet),
    }
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
    pretokens: int
    left_out: int
    seconds: float


def learn(
    recipe: Recipe,
    plan: VocabularyPlan,
    count_files: Sequence[Path],
    scratch: Path,
    *,
    vocab_size: int,
    min_frequency: int,
    show_progress: bool,
    log: Log,
    distinct_upper_bound: int,
) -> Learnt:
    """Merge the count files, replay them into the trainer, and train once."""
    started = time.monotonic()
    last_line = [started]

    def on_word(fed: int) -> None:
        now = time.monotonic()
        if not show_progress and now - last_line[0] >= 10:
            last_line[0] = now
            log(f"train: fed {human(fed)} of at most {human(distinct_upper_bound)} distinct pre-tokens to the trainer")

    replay = Replay(
        merge_files(count_files, scratch),
        plan.separator,
        min_count=min_frequency if recipe.family == "unigram" else 0,
        on_word=on_word,
    )
    tokenizer = replay_tokenizer(recipe, plan.separator)
    trainer = make_trainer(recipe, plan, vocab_size, min_frequency, show_progress)
    tokenizer.train_from_iterator(replay, trainer=trainer)
    return Learnt(tokenizer, replay.distinct, replay.pretokens, replay.left_out, time.monotonic() - started)


def unit_count_files(counts_dir: Path, units: Sequence[WorkUnit]) -> list[Path]:
    return [unit_counts(counts_dir, unit) for unit in units]
