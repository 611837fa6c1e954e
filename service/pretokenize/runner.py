"""One worker's pre-tokenization run, the ``pretokenize`` step on the sharded-job executor: documents (streamed)
-> batches, ``concurrency`` in flight (across units: the service never idles between them) -> results in order ->
shard writer -> ``.done`` record; worker 0 then writes the manifest. Memory: the window and one Parquet row group.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import numpy as np

from ..jobs import (
    AsyncStep,
    CorpusError,
    Document,
    DocumentReader,
    DoneRecord,
    ShardedJob,
    Storage,
    Worker,
    WorkUnit,
    arun_worker,
)
from ..jobs.documents import SKIPPED_EXAMPLES, describe_skipped
from ..jobs.progress import Log, Progress, duration, human, log_to_stderr, peak_rss_bytes
from ..plurals import counted
from .encoders import Encoder, ServiceEncoder, TextsRefused
from .manifest import ShardStats, build_manifest, totals, write_manifest
from .settings import PretokenizeConfig
from .shards import FlatShardWriter, MegatronShardWriter, ParquetShardWriter, ShardWriter, shard_files, token_dtype

#: Sent before any work: options refused for every conversation (no generation markers, no such template) are said once.
PROBE_CONVERSATION = [
    {"role": "user", "content": "tokenizer-service pretokenize: checking the chat options"},
    {"role": "assistant", "content": "ok"},
]
MISSING_HINT = (
    "No manifest yet: run worker 0 again once the other workers have finished; it skips done shards and writes "
    "the manifest."
)


@dataclass
class Summary:
    """What a worker did; ``manifest`` (worker 0): where the manifest was written."""

    worker: Worker
    units: int  # in the whole plan
    mine: int
    already_done: int = 0
    written: int = 0
    documents: int = 0
    tokens: int = 0
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)  # the first few, as ``path:line: reason``
    seconds: float = 0.0
    manifest: str | None = None
    peak_rss_bytes: int = 0


async def pretokenize(
    config: PretokenizeConfig, *, encoder: Encoder | None = None, log: Log = log_to_stderr
) -> Summary:
    """Run this worker's share of ``config``; worker 0 also waits for the others and writes the manifest (else
    :class:`~service.jobs.UnitsMissing`). ``encoder``: where ids come from (default: the service at ``config.url``)."""
    started = time.monotonic()
    config.check_installed()  # a client-only install learns which extra it needs before any work
    storage = config.storage(log)
    _, units, worker = config.plan(storage)
    async with AsyncExitStack() as stack:
        if encoder is None:
            encoder = ServiceEncoder(
                config.url,
                config.encode_options(),
                api_key=config.api_key,
                expected_fingerprint=config.expected_fingerprint,
                retry_deadline=config.retry_deadline,
                log=log,
                chat_options=config.chat_options() if config.chat else None,
            )
            stack.push_async_callback(encoder.aclose)
        step = PretokenizeStep(config, encoder, storage, log)
        await step.prepare(units)
        report = await arun_worker(step, folder=step.out, units=units, worker=worker, config=config, log=log)
    return Summary(
        worker,
        report.units,
        report.mine,
        already_done=report.already_done,
        written=len(report.committed),
        **totals(report.committed),
        skipped_examples=skipped_examples(report.committed),
        seconds=time.monotonic() - started,
        manifest=report.result,
        peak_rss_bytes=peak_rss_bytes(),
    )


@dataclass
class _UnitJob:
    unit: WorkUnit
    reader: DocumentReader
    weight_before: int  # input weight of this worker's earlier units in this run, for progress
    writer: ShardWriter | None = None


@dataclass
class _Encoded:
    documents: list[Document]
    ids: np.ndarray
    lengths: np.ndarray
    rejected: list[tuple[int, str]]  # (position, reason) of documents the service refused
    masks: np.ndarray | None = None  # a conversations run's loss masks, one per id


class PretokenizeStep(AsyncStep[ShardStats, str]):
    """The ``pretokenize`` step: a unit becomes a token shard; worker 0's finalize writes the manifest (its URL)."""

    name = "pretokenize"
    stats_type = ShardStats
    conflict_hint = "use another --out, or delete the old shards"
    missing_hint = MISSING_HINT

    def __init__(self, config: PretokenizeConfig, encoder: Encoder, storage: Storage, log: Log) -> None:
        self.config = config
        self.encoder = encoder
        self.storage = storage
        self.log = log
        self.out = storage.folder(config.out_location)

    def outputs(self, unit: WorkUnit) -> list[str]:
        return shard_files(unit, self.config.output_format, self.config.writes_masks)

    async def prepare(self, units: list[WorkUnit]) -> None:
        """The served tokenizer and the settings shards record; what the service refuses for every document
        (options, an eos it has not) is refused here."""
        config = self.config
        text_files = sorted({unit.file.path for unit in units if unit.file.format.startswith("txt")})
        if config.keep_fields and text_files:
            raise CorpusError(f"--keep-field: text files have no fields ({', '.join(text_files[:3])})")
        self.facts = facts = await self.encoder.facts()
        self.dtype = token_dtype(facts.vocab_size, config.output_format)
        self.max_id = int(np.iinfo(self.dtype).max)
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
        try:
            if config.chat:
                await self.encoder.encode_conversations([PROBE_CONVERSATION])
            else:
                await self.encoder.encode(["tokenizer-service pretokenize: checking the encode options"])
        except TextsRefused as exc:
            # (a refusal of the probe conversation itself names it, conversations[0]: documents are checked each)
            if not str(exc).startswith("conversations[0]"):
                what = "chat options" if config.chat else "encode options"
                raise CorpusError(f"the service refuses these {what}: {exc}") from exc
        self.settings = config.output_settings(facts.fingerprint, self.eos)
        self.max_texts = min(config.request_texts, facts.max_texts_per_request or config.request_texts)
        self.log(
            f"pretokenize: {self.encoder.describe()}: tokenizer {facts.source} ({facts.fingerprint}), "
            f"{facts.vocab_size:,} tokens -> {self.dtype.name}; format {config.output_format}, out {self.out.url()}"
        )

    async def process(self, units: list[WorkUnit], job: ShardedJob[ShardStats], progress: Progress) -> None:
        self.job = job
        self.progress = progress
        await self._pipeline(units)
        if self.config.progress != "none":
            written = totals(job.committed)
            rate = written["tokens"] / max(time.monotonic() - progress.started, 1e-9)
            self.log(
                f"pretokenize: wrote {counted(len(job.committed), 'shard')}: "
                f"{counted(written['documents'], 'document')}, {counted(written['tokens'], 'token')} "
                f"({human(rate)} tokens/s), " + describe_skipped(written["skipped"], skipped_examples(job.committed))
            )

    def _events(self, units: list[WorkUnit]) -> Iterator[tuple[_UnitJob, list[Document] | None, int]]:
        """(job, batch, input consumed) for every batch of every unit, then (job, None, weight) at its end."""
        config = self.config
        max_chars = self.facts.max_text_chars
        before = 0
        for unit in units:
            reader = DocumentReader(
                unit,
                text_field=config.text_field,
                keep_fields=config.keep_fields,
                on_bad_record=config.on_bad_record,
                storage=self.storage,
                messages_field=config.messages_field,
            )
            job = _UnitJob(unit, reader, before)
            before += unit.weight
            batch: list[Document] = []
            chars = 0
            for document in reader:
                size = document.size
                # (a conversation's rendering is checked by the service: its size is only known there)
                if max_chars is not None and size > max_chars and document.conversation is None:
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

    async def _pipeline(self, units: list[WorkUnit]) -> None:
        pending: deque[tuple[_UnitJob, asyncio.Future[_Encoded] | None, int]] = deque()
        self._open_writer: ShardWriter | None = None  # the one shard being written (results come in order)
        events = self._events(units)
        try:
            while True:
                try:
                    job, batch, consumed = next(events)
                except StopIteration:
                    break
                except Exception:  # reading failed (a bad record...): the units read whole before it are done
                    complete = {id(job) for job, task, _ in pending if task is None}
                    while pending and id(pending[0][0]) in complete:
                        await self._consume(*pending.popleft())
                    raise
                task = asyncio.ensure_future(self._encode(batch)) if batch is not None else None
                pending.append((job, task, consumed))
                while len(pending) > self.config.concurrency:
                    await self._consume(*pending.popleft())
            while pending:
                await self._consume(*pending.popleft())
        except BaseException:
            tasks = [task for _, task, _ in pending if task is not None]
            for waiting in tasks:
                waiting.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._open_writer is not None:
                self._open_writer.abort()  # nothing of it appears; the unit stays not done
            raise

    async def _consume(self, job: _UnitJob, task: asyncio.Future[_Encoded] | None, consumed: int) -> None:
        """Write the next result in order into its unit's shard, or close the shard."""
        if job.writer is None:
            job.writer = self._open_writer = self._writer(job)
        if task is not None:
            encoded = await task
            for position, reason in encoded.rejected:
                job.reader.reject(position, reason)
            if encoded.documents:
                ids, lengths = self._finish_ids(encoded, job)
                job.writer.write(ids, lengths, encoded.documents, encoded.masks)
                self.progress.advance(len(encoded.documents), len(ids), job.weight_before + consumed)
            return
        writer = job.writer
        # Uploading (an object store) blocks: off the event loop, so the requests in flight are answered.
        await asyncio.get_running_loop().run_in_executor(None, writer.commit)
        self._open_writer = None
        reader = job.reader
        stats = ShardStats(writer.documents, writer.tokens, reader.skipped, reader.skipped_examples, self.dtype.name)
        await asyncio.get_running_loop().run_in_executor(None, self.job.commit, job.unit, stats)
        self.progress.advance(0, 0, job.weight_before + job.unit.weight)

    def _writer(self, job: _UnitJob) -> ShardWriter:
        output_format = self.config.output_format
        masks = self.config.writes_masks
        if output_format == "flat":
            return FlatShardWriter(self.out, job.unit, self.dtype, self.facts.source, masks)
        if output_format == "megatron":
            return MegatronShardWriter(self.out, job.unit, self.dtype, masks)
        metadata = {"fingerprint": self.facts.fingerprint, "shard": job.unit.name}
        return ParquetShardWriter(
            self.out, job.unit, self.dtype, self.config.keep_fields, job.reader.field_types, metadata, masks
        )

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
        masks: np.ndarray | None = None
        try:
            if self.config.chat:
                conversations = [d.conversation or [] for d in documents]
                ids, lengths, masks = await self.encoder.encode_conversations(conversations)
            else:
                ids, lengths = await self.encoder.encode([d.text for d in documents])
        except TextsRefused as exc:
            if len(documents) == 1:
                empty = np.zeros(0, dtype=np.int64)
                reason = str(exc).removeprefix("conversations[0]: ")  # (the one conversation sent)
                return _Encoded([], empty, empty, [(documents[0].position, f"refused by the service: {reason}")])
            middle = len(documents) // 2
            first = await self._encode(documents[:middle])
            second = await self._encode(documents[middle:])
            both = [part.masks for part in (first, second) if part.masks is not None]
            return _Encoded(
                first.documents + second.documents,
                np.concatenate([first.ids, second.ids]),
                np.concatenate([first.lengths, second.lengths]),
                first.rejected + second.rejected,
                np.concatenate(both) if both else None,
            )
        if self.config.writes_masks and (masks is None or len(masks) != len(ids)):
            raise RuntimeError(f"{self.encoder.describe()} answered no loss mask for each of the {len(ids)} ids")
        if len(lengths) != len(documents) or int(lengths.sum()) != len(ids):
            raise RuntimeError(
                f"{self.encoder.describe()} answered {len(lengths)} rows of {int(lengths.sum())} ids in all, with "
                f"{len(ids)} ids, for {len(documents)} texts"
            )
        return _Encoded(documents, ids, lengths, [], masks if self.config.writes_masks else None)

    def finalize(self, job: ShardedJob[ShardStats], records: list[DoneRecord[ShardStats]], waited: float) -> str:
        manifest = build_manifest(
            records, tokenizer=self.facts.describe(), settings=self.settings, dtype=self.dtype.name
        )
        where = write_manifest(self.out, manifest)
        totals = manifest["totals"]
        self.log(
            f"pretokenize: every shard is done: {where} ({counted(totals['shards'], 'shard')}, "
            f"{counted(totals['documents'], 'document')}, {counted(totals['tokens'], 'token')}, "
            f"{totals['skipped']:,} skipped)"
        )
        return where


def describe_summary(summary: Summary) -> str:
    rate = summary.tokens / summary.seconds if summary.seconds else 0.0
    parts = [
        f"pretokenize: {summary.worker.describe()} finished in {duration(summary.seconds)}",
        f"{counted(summary.written, 'shard')} written, {summary.already_done} already done",
        f"{counted(summary.documents, 'document')}, {counted(summary.tokens, 'token')} ({human(rate)} tokens/s)",
        f"peak RSS {summary.peak_rss_bytes / 2**20:.1f} MiB",
    ]
    if summary.skipped:  # last: the records to look at
        parts.append(describe_skipped(summary.skipped, summary.skipped_examples))
    return "; ".join(parts)


def skipped_examples(records: list[DoneRecord[ShardStats]]) -> list[str]:
    """The first few records skipped, in unit order."""
    return [example for record in records for example in record.stats.skipped_examples][:SKIPPED_EXAMPLES]
