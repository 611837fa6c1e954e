"""One worker's pre-tokenization run: its units, many requests in flight, shards written in order.

The flow, for each of this worker's units that is not done yet::

    read documents (streamed) -> batches of texts -> encode, up to `concurrency` batches in flight
                              -> results taken in order -> shard writer -> commit -> .done record

Memory is bounded by the window: at most ``concurrency`` batches (``request_texts`` documents,
``request_chars`` characters each) and their answers exist at once, plus one Parquet row group; files are
never held whole. Batches continue across unit boundaries, so the service never idles between units.
Worker 0 then waits for the other workers' shards and writes the manifest.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..client import RetryPolicy
from ..corpus import (
    CorpusError,
    Document,
    DocumentReader,
    Worker,
    WorkUnit,
    done_path,
    find_inputs,
    plan_units,
    read_done,
    remove_partial,
    resolve_worker,
    wait_for_done,
    write_done,
)
from ..corpus.progress import Log, log_to_stderr, peak_rss_bytes
from .encoders import Encoder, ServiceEncoder, TextsRefused, TokenizerFacts
from .manifest import OutputConflict, build_manifest, check_record, shard_record, write_manifest
from .progress import Progress, duration, human
from .settings import PretokenizeConfig
from .shards import (
    FlatShardWriter,
    ParquetShardWriter,
    ShardWriter,
    import_pyarrow,
    shard_base,
    shard_files,
    token_dtype,
)


@dataclass
class Summary:
    """What a worker did. ``missing`` (worker 0 only): shards not done when it stopped waiting, so the
    manifest was not written."""

    worker: Worker
    units: int  # in the whole plan
    mine: int
    already_done: int
    written: int = 0
    documents: int = 0
    tokens: int = 0
    skipped: int = 0
    seconds: float = 0.0
    manifest: Path | None = None
    missing: list[str] = field(default_factory=list)
    peak_rss_bytes: int = 0


async def pretokenize(
    config: PretokenizeConfig, *, encoder: Encoder | None = None, log: Log = log_to_stderr
) -> Summary:
    """Run this worker's share of ``config`` (see :class:`PretokenizeConfig`); worker 0 also writes the
    manifest. ``encoder``: where ids come from (default: the service at ``config.url``)."""
    started = time.monotonic()
    if config.output_format == "parquet":
        import_pyarrow()  # a client-only install learns which extra it needs before any work
    units = plan_units(find_inputs(config.inputs, exclude=[str(config.out)]), config.unit_bytes)
    worker = resolve_worker(config.shard_index, config.num_shards, config.environ)
    mine = worker.take(units)
    log(
        f"pretokenize: {worker.describe()}: {len(mine)} of {len(units)} units "
        f"({human(sum(u.weight for u in mine), 'B')} of {human(sum(u.weight for u in units), 'B')})"
    )
    own_encoder = encoder is None
    if encoder is None:
        encoder = ServiceEncoder(
            config.url,
            config.encode_options(),
            api_key=config.api_key,
            expected_fingerprint=config.expected_fingerprint,
            retry=RetryPolicy(max_attempts=1000, deadline=config.retry_deadline, backoff_max=10.0),
        )
    try:
        run = _Run(config, encoder, worker, units, log)
        await run.prepare()
        summary = Summary(worker, len(units), len(mine), already_done=0)
        await run.execute(mine, summary)
        if worker.index == 0:
            run.finalize(summary)
    finally:
        if own_encoder:
            await encoder.aclose()
    summary.seconds = time.monotonic() - started
    summary.peak_rss_bytes = peak_rss_bytes()
    return summary


@dataclass
class _UnitJob:
    unit: WorkUnit
    base: Path
    reader: DocumentReader
    weight_before: int  # input weight of this worker's earlier units in this run, for progress
    writer: ShardWriter | None = None


@dataclass
class _Encoded:
    documents: list[Document]
    ids: np.ndarray
    lengths: np.ndarray
    rejected: list[tuple[int, str]]  # (position, reason) of documents the service refused


class _Run:
    def __init__(
        self, config: PretokenizeConfig, encoder: Encoder, worker: Worker, units: list[WorkUnit], log: Log
    ) -> None:
        self.config = config
        self.encoder = encoder
        self.worker = worker
        self.units = units
        self.log = log
        self.out = Path(config.out)

    # -- before any work --------------------------------------------------------------------------------
    async def prepare(self) -> None:
        config = self.config
        text_files = sorted({unit.file.path for unit in self.units if unit.file.format.startswith("txt")})
        if config.keep_fields and text_files:
            raise CorpusError(f"--keep-field: text files have no fields ({', '.join(text_files[:3])})")
        self.facts: TokenizerFacts = await self.encoder.facts()
        facts = self.facts
        self.dtype = token_dtype(facts.vocab_size)
        self.max_id = np.iinfo(self.dtype).max
        self.eos: int | None = None
        if config.append_eos:
            self.eos = config.eos_token_id if config.eos_token_id is not None else facts.special_token_id("eos_token")
            if self.eos is None:
                raise CorpusError(
                    f"--append-eos: the tokenizer ({facts.source}) has no eos_token; name the id to append with "
                    f"--eos-id (its special tokens: {dict(facts.special_token_ids)})"
                )
            if not 0 <= self.eos < facts.vocab_size:
                raise CorpusError(f"--eos-id {self.eos} is not an id of the vocabulary (0..{facts.vocab_size - 1})")
        try:  # options the tokenizer refuses are refused for every document: say so once, up front
            await self.encoder.encode(["tokenizer-service pretokenize: checking the encode options"])
        except TextsRefused as exc:
            raise CorpusError(f"the service refuses these encode options: {exc}") from exc
        self.settings = config.output_settings(self.eos)
        self.max_texts = min(config.request_texts, facts.max_texts_per_request or config.request_texts)
        self.log(
            f"pretokenize: {self.encoder.describe()}: tokenizer {facts.source} ({facts.fingerprint}), "
            f"{facts.vocab_size:,} tokens -> {self.dtype.name}; format {config.output_format}, out {self.out}"
        )
        self.out.mkdir(parents=True, exist_ok=True)
        self._refuse_foreign_records()

    def _refuse_foreign_records(self) -> None:
        """Done records of units outside this plan (other inputs, another --unit-bytes) would make a mixed
        output: refuse before any work."""
        planned = {done_path(shard_base(self.out, unit)) for unit in self.units}
        for path in sorted(self.out.rglob("*.done")):
            if path not in planned:
                raise OutputConflict(
                    f"{self.out} holds shard {path.relative_to(self.out)}, which this run's plan does not have "
                    "(other inputs, or another --unit-bytes): use another --out, or delete the old shards"
                )

    def _is_done(self, unit: WorkUnit) -> bool:
        record = read_done(shard_base(self.out, unit))
        if record is None:
            return False
        return check_record(
            record,
            unit,
            self.out,
            fingerprint=self.facts.fingerprint,
            settings=self.settings,
            output_format=self.config.output_format,
        )

    # -- this worker's units ----------------------------------------------------------------------------
    async def execute(self, mine: list[WorkUnit], summary: Summary) -> None:
        for unit in self.units:  # any shard made differently, by any worker, stops the run now
            if unit not in mine and read_done(shard_base(self.out, unit)) is not None:
                self._is_done(unit)
        todo = [unit for unit in mine if not self._is_done(unit)]
        summary.already_done = len(mine) - len(todo)
        if summary.already_done:
            self.log(f"pretokenize: {summary.already_done} of this worker's {len(mine)} units are done already")
        if not todo:
            return
        config = self.config
        self.progress = Progress(sum(unit.weight for unit in todo), mode=config.progress, interval=config.log_every)
        try:
            await self._pipeline(self._jobs(todo), summary)
        finally:
            self.progress.close()
        if config.progress != "none":
            rate = summary.tokens / max(time.monotonic() - self.progress.started, 1e-9)
            self.log(
                f"pretokenize: wrote {summary.written} shards: {summary.documents:,} documents, "
                f"{summary.tokens:,} tokens ({human(rate)} tokens/s), {summary.skipped:,} records skipped"
            )

    def _jobs(self, todo: list[WorkUnit]) -> Iterator[_UnitJob]:
        before = 0
        for unit in todo:
            base = shard_base(self.out, unit)
            remove_partial([done_path(base), *shard_files(base, self.config.output_format)])
            reader = DocumentReader(
                unit,
                text_field=self.config.text_field,
                keep_fields=self.config.keep_fields,
                on_bad_record=self.config.on_bad_record,
            )
            yield _UnitJob(unit, base, reader, before)
            before += unit.weight

    def _events(self, jobs: Iterator[_UnitJob]) -> Iterator[tuple[_UnitJob, list[Document] | None, int]]:
        """(job, batch, input consumed) for every batch of every unit, then (job, None, weight) at its end."""
        config = self.config
        max_chars = self.facts.max_text_chars
        for job in jobs:
            reader = job.reader
            batch: list[Document] = []
            chars = 0
            for document in reader:
                size = len(document.text)
                if max_chars is not None and size > max_chars:
                    reader.reject(
                        document.position,
                        f"the document has {size:,} characters, over the service's max_text_chars={max_chars:,} "
                        "(documents are never truncated silently): raise the server's --max-text-chars, or split "
                        "such documents",
                    )
                    continue
                if batch and (len(batch) >= self.max_texts or chars + size > config.request_chars):
                    yield job, batch, reader.consumed
                    batch, chars = [], 0
                batch.append(document)
                chars += size
            if batch:
                yield job, batch, reader.consumed
            yield job, None, job.unit.weight

    async def _pipeline(self, jobs: Iterator[_UnitJob], summary: Summary) -> None:
        pending: deque[tuple[_UnitJob, asyncio.Future[_Encoded] | None, int]] = deque()
        self._open_writer: ShardWriter | None = None  # the one shard being written (results come in order)
        try:
            for job, batch, consumed in self._events(jobs):
                task = asyncio.ensure_future(self._encode(batch)) if batch is not None else None
                pending.append((job, task, consumed))
                while len(pending) > self.config.concurrency:
                    await self._consume(*pending.popleft(), summary)
            while pending:
                await self._consume(*pending.popleft(), summary)
        except BaseException:
            tasks = [task for _, task, _ in pending if task is not None]
            for waiting in tasks:
                waiting.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._open_writer is not None:
                self._open_writer.abort()  # its temporary files go; the unit stays not done
            raise

    async def _consume(
        self, job: _UnitJob, task: asyncio.Future[_Encoded] | None, consumed: int, summary: Summary
    ) -> None:
        """Take the next result in order: write a batch into the unit's shard, or close the shard."""
        if job.writer is None:
            job.writer = self._open_writer = self._writer(job)
        if task is not None:
            encoded = await task
            for position, reason in encoded.rejected:
                job.reader.reject(position, reason)
            if encoded.documents:
                ids, lengths = self._finish_ids(encoded, job)
                job.writer.write(ids, lengths, encoded.documents)
                self.progress.advance(len(encoded.documents), len(ids), job.weight_before + consumed)
            return
        writer = job.writer
        writer.commit()
        self._open_writer = None
        reader = job.reader
        write_done(
            job.base,
            shard_record(
                job.unit,
                self.out,
                shard_files(job.base, self.config.output_format),
                documents=writer.documents,
                tokens=writer.tokens,
                skipped=reader.skipped,
                skipped_examples=reader.skipped_examples,
                fingerprint=self.facts.fingerprint,
                settings=self.settings,
                dtype=self.dtype.name,
            ),
        )
        summary.written += 1
        summary.documents += writer.documents
        summary.tokens += writer.tokens
        summary.skipped += reader.skipped
        self.progress.advance(0, 0, job.weight_before + job.unit.weight)

    def _writer(self, job: _UnitJob) -> ShardWriter:
        if self.config.output_format == "flat":
            return FlatShardWriter(job.base, self.dtype)
        metadata = {"fingerprint": self.facts.fingerprint, "shard": job.unit.name}
        return ParquetShardWriter(job.base, self.dtype, self.config.keep_fields, job.reader.field_types, metadata)

    def _finish_ids(self, encoded: _Encoded, job: _UnitJob) -> tuple[np.ndarray, np.ndarray]:
        ids, lengths = encoded.ids, encoded.lengths.astype(np.int64, copy=False)
        if self.eos is not None:
            ids = np.insert(ids, np.cumsum(lengths), self.eos)
            lengths = lengths + 1
        if len(ids) and (int(ids.max()) > self.max_id or int(ids.min()) < 0):
            raise CorpusError(
                f"{job.unit.name}: an id outside 0..{self.max_id} came back for a vocabulary of "
                f"{self.facts.vocab_size:,} tokens; refusing to wrap it into {self.dtype.name}"
            )
        return ids.astype(self.dtype, copy=False), lengths

    async def _encode(self, documents: list[Document]) -> _Encoded:
        """Encode a batch; a refused batch is halved until the refused document is alone (then rejected)."""
        try:
            ids, lengths = await self.encoder.encode([d.text for d in documents])
        except TextsRefused as exc:
            if len(documents) == 1:
                empty = np.zeros(0, dtype=np.int64)
                return _Encoded([], empty, empty, [(documents[0].position, f"refused by the service: {exc}")])
            middle = len(documents) // 2
            first = await self._encode(documents[:middle])
            second = await self._encode(documents[middle:])
            return _Encoded(
                first.documents + second.documents,
                np.concatenate([first.ids, second.ids]),
                np.concatenate([first.lengths, second.lengths]),
                first.rejected + second.rejected,
            )
        if len(lengths) != len(documents) or int(lengths.sum()) != len(ids):
            raise RuntimeError(
                f"{self.encoder.describe()} answered {len(lengths)} rows of {int(lengths.sum())} ids in all, with "
                f"{len(ids)} ids, for {len(documents)} texts"
            )
        return _Encoded(documents, ids, lengths, [])

    # -- worker 0: the manifest -------------------------------------------------------------------------
    def finalize(self, summary: Summary) -> None:
        """Wait for every shard (as long as some shard gets done every ``wait_seconds``), check them all
        against this run, and write the manifest; or leave ``summary.missing`` when some are not done."""
        bases = [shard_base(self.out, unit) for unit in self.units]
        waiting = self.config.wait_seconds

        def on_wait(done: int, total: int, missing: list[Path]) -> None:
            names = ", ".join(str(base.relative_to(self.out)) for base in missing[:3])
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            self.log(
                f"pretokenize: waiting for the other workers: {done} of {total} shards done (missing {names}{more})"
            )

        poll = min(2.0, max(waiting / 10, 0.1))
        wait_for_done(bases, stall_timeout=waiting, poll_interval=poll, on_wait=on_wait)
        records, missing = [], []
        for unit, base in zip(self.units, bases, strict=True):
            record = read_done(base)
            if record is None or not self._is_done(unit):
                missing.append(str(base.relative_to(self.out)))
            else:
                records.append(record)
        if missing:
            summary.missing = missing
            return
        manifest = build_manifest(
            records, tokenizer=self.facts.describe(), settings=self.settings, dtype=self.dtype.name
        )
        summary.manifest = write_manifest(self.out, manifest)
        totals = manifest["totals"]
        self.log(
            f"pretokenize: every shard is done: {summary.manifest} ({totals['shards']} shards, "
            f"{totals['documents']:,} documents, {totals['tokens']:,} tokens, {totals['skipped']:,} skipped)"
        )


def describe_summary(summary: Summary) -> str:
    """The closing line of a worker."""
    rate = summary.tokens / summary.seconds if summary.seconds else 0.0
    parts = [
        f"pretokenize: {summary.worker.describe()} finished in {duration(summary.seconds)}",
        f"{summary.written} shards written, {summary.already_done} already done",
        f"{summary.documents:,} documents, {summary.tokens:,} tokens ({human(rate)} tokens/s)",
        f"peak RSS {summary.peak_rss_bytes / 2**20:.1f} MiB",
    ]
    return "; ".join(parts)
