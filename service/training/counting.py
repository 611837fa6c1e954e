"""Phase 1, on every worker: count the pre-tokens of each of its units, exactly, in bounded memory
(``docs/guides/train.md``). A process holding ``max_words`` distinct pre-tokens spills them, sorted, to local
disk; the spills and the rest are merged (:mod:`.countfiles`) into the unit's count file, beside ``.chars.json``
(each character's count and positions in pre-tokens), then its ``.done`` record. Units are counted on a
``spawn`` pool: a forked child would inherit a used Rust pool.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import multiprocessing
import os
import queue
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from ..jobs import DocumentReader, Folder, Storage, WorkUnit
from ..jobs.cli import interrupt_on_sigterm
from ..jobs.progress import Progress, peak_rss_bytes
from .countfiles import merge_files, write_counts
from .recipes import json_key

COUNTS_SUFFIX = ".counts"
CHARS_SUFFIX = ".chars.json"
#: Bump when what a count file means changes: older counts are then refused, not mixed.
COUNTING_VERSION = 1

#: Where a character stands in a pre-token (mask bits): the trainers build different pieces for each.
FIRST, MIDDLE, LAST, ALONE = 1, 2, 4, 8

Report = Callable[[int, int, int], None]  # (documents, pre-tokens) since the last call, input consumed


@dataclass(frozen=True)
class CountStats:
    """What counting a unit found, in its ``.done`` record."""

    documents: int
    pretokens: int
    distinct: int
    alphabet: int
    skipped: int
    skipped_examples: list[str]
    spills: int
    seconds: float
    peak_rss_bytes: int
    pid: int


@dataclass(frozen=True)
class CountingSpec:
    """What decides a unit's counts, and how much a counting process may hold (plain data: it is pickled)."""

    normalizer: dict[str, Any] | None
    pre_tokenizer: dict[str, Any] | None
    text_field: str
    on_bad_record: str
    max_words: int

    def settings(self) -> dict[str, Any]:
        """Everything that changes the counts of a unit (not ``on_bad_record``: a unit counted under one policy is
        the unit counted under the other, see :data:`service.jobs.executor.POLICY_SETTINGS`)."""
        import tokenizers

        return {
            "version": COUNTING_VERSION,
            "tokenizers": tokenizers.__version__,
            "normalizer": self.normalizer,
            "pre_tokenizer": self.pre_tokenizer,
            "text_field": self.text_field,
        }

    def key(self) -> str:
        return json_key(self.settings())

    def describe(self) -> dict[str, Any]:
        return {"key": self.key(), **self.settings(), "on_bad_record": self.on_bad_record}


def count_files(unit: WorkUnit) -> list[str]:
    return [unit.name + COUNTS_SUFFIX, unit.name + CHARS_SUFFIX]


class PreTokenCounter:
    """Counts pre-tokens as a trainer does, by training a WordLevel trainer and reading its state; else (a release
    that hides it) with ``normalize_str`` and ``pre_tokenize_str``, the same counts at half the speed."""

    def __init__(self, normalizer: dict[str, Any] | None, pre_tokenizer: dict[str, Any] | None) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(
            json.dumps(
                {
                    "version": "1.0",
                    "normalizer": normalizer,
                    "pre_tokenizer": pre_tokenizer,
                    "model": {"type": "WordLevel", "vocab": {}, "unk_token": "<unk>"},
                }
            )
        )
        holder = self._tokenizer
        self._normalize = holder.normalizer.normalize_str if holder.normalizer is not None else None
        self._pre_tokenize = holder.pre_tokenizer.pre_tokenize_str if holder.pre_tokenizer is not None else None
        self.by_trainer = self._trainer_words(["a b a"]) is not None

    def _trainer_words(self, texts: Sequence[str]) -> dict[str, int] | None:
        from tokenizers import trainers

        trainer = trainers.WordLevelTrainer(vocab_size=0, show_progress=False)
        self._tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
        state = json.loads(trainer.__getstate__())
        words = state.get("WordLevelTrainer", {}).get("words") if isinstance(state, dict) else None
        return words if isinstance(words, dict) else None

    def count(self, texts: Sequence[str]) -> dict[str, int]:
        """Each distinct pre-token of ``texts`` and its count (never an empty pre-token)."""
        if self.by_trainer:
            words = self._trainer_words(texts)
            if words is None:  # pragma: no cover -- checked at start
                raise RuntimeError("the tokenizers trainer stopped exposing its word counts")
            words.pop("", None)
            return words
        counts: Counter[str] = Counter()
        for text in texts:
            if self._normalize is not None:
                text = self._normalize(text)
            if self._pre_tokenize is None:
                counts.update((text,) if text else ())
            else:
                counts.update(filter(None, map(itemgetter(0), self._pre_tokenize(text))))
        return counts


@dataclass
class CharStats:
    """Each character's total count over counted pre-tokens, and the positions it takes."""

    counts: dict[str, int] = field(default_factory=dict)
    masks: dict[str, int] = field(default_factory=dict)

    def add_words(self, counts: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int]]:
        """Pass ``counts`` through, adding each pre-token's characters on the way."""
        chars, masks = self.counts, self.masks
        for word, count in counts:
            for char in word:
                chars[char] = chars.get(char, 0) + count
            if len(word) == 1:
                masks[word] = masks.get(word, 0) | ALONE
            else:
                masks[word[0]] = masks.get(word[0], 0) | FIRST
                masks[word[-1]] = masks.get(word[-1], 0) | LAST
                for char in word[1:-1]:
                    masks[char] = masks.get(char, 0) | MIDDLE
            yield word, count

    def update(self, other: CharStats) -> None:
        for char, count in other.counts.items():
            self.counts[char] = self.counts.get(char, 0) + count
        for char, mask in other.masks.items():
            self.masks[char] = self.masks.get(char, 0) | mask

    def to_json(self) -> bytes:
        table = {char: [self.counts[char], self.masks.get(char, 0)] for char in sorted(self.counts)}
        return (json.dumps({"chars": table}, ensure_ascii=False, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> CharStats:
        table = json.loads(data)["chars"]
        return cls({c: int(v[0]) for c, v in table.items()}, {c: int(v[1]) for c, v in table.items()})


# -- one unit ---------------------------------------------------------------------------------------------
#: Characters handed to the trainer at once: a call's overhead vanishes, its word map stays small (and never
#: over ``max_words`` characters, so a batch's map is at most half the budget).
BATCH_CHARS = 1 << 20
_COUNTERS: dict[str, PreTokenCounter] = {}


def _counter(spec: CountingSpec) -> PreTokenCounter:
    key = spec.key()
    if key not in _COUNTERS:
        _COUNTERS[key] = PreTokenCounter(spec.normalizer, spec.pre_tokenizer)
    return _COUNTERS[key]


def count_unit(unit: WorkUnit, folder: Folder, spec: CountingSpec, storage: Storage, report: Report) -> CountStats:
    """Count one unit into ``<unit>.counts`` + ``<unit>.chars.json`` of ``folder`` (each whole), spilling into
    a private local directory; its statistics, for the record the caller commits."""
    started = time.monotonic()
    counter = _counter(spec)
    reader = DocumentReader(unit, text_field=spec.text_field, on_bad_record=spec.on_bad_record, storage=storage)
    spill_dir = storage.spool() / f"spill-{os.getpid()}-{hashlib.sha256(unit.name.encode()).hexdigest()[:16]}"
    spills: list[Path] = []
    counts: Counter[str] = Counter()
    documents = pretokens = reported_documents = reported_pretokens = 0
    last_report = time.monotonic()
    try:
        for batch in _batches(reader, min(BATCH_CHARS, max(1024, spec.max_words))):
            words = counter.count(batch)
            counts.update(words)
            documents += len(batch)
            pretokens += sum(words.values())
            if len(counts) >= spec.max_words:
                spills.append(_spill(counts, spill_dir, len(spills)))
                counts = Counter()
            if time.monotonic() - last_report >= 0.2:
                report(documents - reported_documents, pretokens - reported_pretokens, reader.consumed)
                reported_documents, reported_pretokens, last_report = documents, pretokens, time.monotonic()
        stats = CharStats()
        counts_name, chars_name = count_files(unit)
        with folder.writer(counts_name) as stream:
            if spills:
                spills.append(_spill(counts, spill_dir, len(spills)))
                counts = Counter()
                merged = merge_files(spills, spill_dir)
            else:
                merged = ((word, counts[word]) for word in sorted(counts))
            distinct = write_counts(stream, stats.add_words(merged), folder.url(counts_name))
        del counts
        folder.write_bytes(chars_name, stats.to_json())
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)
    report(documents - reported_documents, pretokens - reported_pretokens, unit.weight)
    return CountStats(
        documents=documents,
        pretokens=pretokens,
        distinct=distinct,
        alphabet=len(stats.counts),
        skipped=reader.skipped,
        skipped_examples=reader.skipped_examples,
        spills=max(0, len(spills) - 1),
        seconds=round(time.monotonic() - started, 3),
        peak_rss_bytes=peak_rss_bytes(),
        pid=os.getpid(),
    )


def _batches(reader: DocumentReader, chars: int) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for document in reader:
        batch.append(document.text)
        size += len(document.text)
        if size >= chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _spill(counts: Counter[str], spill_dir: Path, number: int) -> Path:
    spill_dir.mkdir(parents=True, exist_ok=True)
    path = spill_dir / f"{number:06d}{COUNTS_SUFFIX}"
    with open(path, "wb") as stream:
        write_counts(stream, ((word, counts[word]) for word in sorted(counts)), str(path))
    return path


# -- a worker's units, on its processes -------------------------------------------------------------------
_progress_queue: Any = None


def _init_process(progress_queue: Any) -> None:
    global _progress_queue
    _progress_queue = progress_queue
    # one counting process per CPU, each on its own thread, not a Rust pool of its own
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    interrupt_on_sigterm()  # pool.terminate(): the unit being counted leaves no temporary file
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it terminates the pool


def _count_in_process(task: tuple[WorkUnit, Folder, CountingSpec, Storage]) -> tuple[str, CountStats]:
    unit, folder, spec, storage = task

    def report(documents: int, pretokens: int, consumed: int) -> None:
        _progress_queue.put((unit.name, documents, pretokens, consumed))

    return unit.name, count_unit(unit, folder, spec, storage, report)


def count_units(
    units: Sequence[WorkUnit],
    folder: Folder,
    spec: CountingSpec,
    storage: Storage,
    *,
    processes: int,
    progress: Progress,
    commit: Callable[[WorkUnit, CountStats], object],
) -> None:
    """Count ``units`` on ``processes`` processes (in this one when 1), calling ``commit(unit, stats)`` as each
    finishes; the first failure stops the others and is raised."""
    counted: set[str] = set()
    by_name = {unit.name: unit for unit in units}
    consumed: dict[str, int] = {}  # the input consumed of each unit being counted
    finished = 0  # the weight of the units counted

    def advance(name: str, documents: int, pretokens: int, position: int) -> None:
        consumed[name] = position
        progress.advance(documents, pretokens, finished + sum(consumed.values()))

    def done(name: str, stats: CountStats) -> None:
        nonlocal finished
        commit(by_name[name], stats)
        counted.add(name)
        consumed.pop(name, None)
        finished += by_name[name].weight
        progress.advance(0, 0, finished + sum(consumed.values()))

    if processes <= 1 or len(units) <= 1:
        for unit in units:
            done(unit.name, count_unit(unit, folder, spec, storage, functools.partial(advance, unit.name)))
        return
    context = multiprocessing.get_context("spawn")
    messages: Any = context.Queue()  # progress, from the counting processes
    pool = context.Pool(min(processes, len(units)), initializer=_init_process, initargs=(messages,))
    try:
        answers = pool.imap_unordered(_count_in_process, [(u, folder, spec, storage) for u in units])
        while len(counted) < len(units):
            with contextlib.suppress(queue.Empty):
                while True:
                    advance(*messages.get_nowait())
            try:
                name, stats = answers.next(timeout=0.2)  # raises a counting process's exception
            except multiprocessing.TimeoutError:
                continue
            done(name, stats)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def read_chars(folder: Folder, unit: WorkUnit) -> CharStats:
    return CharStats.from_json(folder.read_bytes(count_files(unit)[1]))
