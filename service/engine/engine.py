"""The engine: one fast tokenizer, one dedicated thread, one batcher. No HTTP in here.

Concurrency model: every call into the Rust tokenizer -- setting truncation, encoding, decoding -- runs
on a single dedicated thread, so its mutable state is never touched from two threads ("Already
borrowed", tokenizers #537). Inside each ``encode_batch`` the Rust pool spreads the texts over all its
threads with the GIL released, so the event loop keeps serving while a batch is encoded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import __version__
from .batching import Batcher, BatchingConfig, BatchObserver, Job
from .encoding import (
    EncodedBatch,
    EncodedRows,
    EncodeOptions,
    EncodePlan,
    LengthOptions,
    RustCall,
    TokenizerFacts,
    TruncationSetting,
    count_tokens,
    extract_rows,
    join_rows,
    plan_encode,
    shape_rows,
)
from .errors import ErrorKind, ServiceError
from .loading import LoadedTokenizer, call_config, special_token_ids
from .memory import DEFAULT_BUDGET_WITHOUT_LIMIT, CostModel, MemoryBudget, Reservation, held_bytes, utf8_length
from .parallelism import ForkGuard, parallelism_enabled

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class EngineLimits:
    max_texts_per_request: int = 4096
    max_text_chars: int = 200_000
    max_response_tokens: int = 8 * 1024 * 1024
    #: Bytes all in-flight work may hold at once (:mod:`service.engine.memory`).
    memory_budget: int = DEFAULT_BUDGET_WITHOUT_LIMIT


# What a queued job asks of the tokenizer thread (the batcher's Job.payload).
@dataclass(frozen=True)
class _Encode:
    inputs: Sequence[Any]  # str, or (str, str) for a pair
    plan: EncodePlan
    slices: Sequence[int] = ()  # ends of the slices a large request is encoded in (empty: at once)


@dataclass(frozen=True)
class _Lengths:
    inputs: Sequence[Any]  # as _Encode's, each distinct input once
    with_overflow: bool
    positions: Sequence[int] | None  # for each requested input, its place in `inputs` (None: no repeats)
    slices: Sequence[int] = ()  # ends of the slices a large count is encoded in (empty: at once)


@dataclass(frozen=True)
class _Tokenize:
    inputs: Sequence[Any]  # str, or (str, str) for a pair
    sequence_ids: bool
    slices: Sequence[int] = ()  # ends of the slices a large request is tokenized in (empty: at once)


@dataclass(frozen=True)
class TokenizedBatch:
    """What :meth:`Engine.tokenize_batch` returns: per text, its tokens and (when asked for) the sequence
    each token belongs to (``None`` for special tokens, 0 for the text, 1 for the pair)."""

    tokens: list[list[str]]
    sequence_ids: list[list[int | None]] | None = None


@dataclass(frozen=True)
class _Decode:
    ids: Sequence[Sequence[int]]
    skip_special_tokens: bool
    clean_up_tokenization_spaces: bool | None


_Payload = _Encode | _Lengths | _Tokenize | _Decode


@dataclass(frozen=True)
class EncodeBound:
    """Safe upper bounds of one encode, computed before it runs (what admission reserves)."""

    cost: int  # bytes held at most, from parsed inputs to the serialised answer
    positions: int  # token positions of the result (rows x padded length), at most
    rows: int  # rows of the result (overflow rows included), at most
    slices: tuple[int, ...]  # ends of the slices it is encoded in (empty: in one Rust call)


class Engine:
    """Async facade over the tokenizer: ``await engine.encode(texts, options=...)``.

    Create it with a loaded tokenizer, ``await astart()`` inside a running event loop, ``await astop()``
    when done (``astop()`` refuses new work and lets what is admitted finish). Every encode, token count,
    tokenize and decode is admitted through the same bounded queue (:class:`~service.engine.batching.Batcher`)
    and runs on the one tokenizer thread. All public coroutines raise :class:`~service.engine.errors.ServiceError`
    for anything a caller did wrong or the engine cannot do right now.
    """

    def __init__(
        self,
        loaded: LoadedTokenizer,
        *,
        threads: int,
        limits: EngineLimits = EngineLimits(),
        batching: BatchingConfig = BatchingConfig(),
        observer: BatchObserver | None = None,
    ) -> None:
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.threads = threads
        self.limits = limits
        self._backend = loaded.tokenizer.backend_tokenizer
        self.facts = TokenizerFacts.of(loaded.tokenizer)  # read once: no Rust calls off the engine thread
        self.vocab_size = len(loaded.tokenizer)
        self._config = call_config(loaded.tokenizer)
        self._special_token_ids = special_token_ids(loaded.tokenizer)  # read once, like the facts
        self._plans: dict[EncodeOptions, EncodePlan] = {}
        self._truncation: TruncationSetting | None = None  # what the Rust tokenizer currently holds
        self._executor: ThreadPoolExecutor | None = None
        self.costs = CostModel()
        self.budget = MemoryBudget(limits.memory_budget, observer.memory_changed if observer is not None else None)
        # Rust encodings one slice may hold: an eighth of the budget (a request above it is encoded in slices)
        self.slice_tokens = max(4096, limits.memory_budget // 8 // self.costs.rust_per_token)
        backend = self._backend
        self._specials = (backend.num_special_tokens_to_add(False), backend.num_special_tokens_to_add(True))
        self._longest_token_bytes = max(map(utf8_length, loaded.tokenizer.get_vocab()), default=1)
        self._batcher = Batcher(batching, self._run_batch, observer, self.budget)
        self._stopping = False  # set by astop: new work is refused (the server's drain is not the engine's)

    # -- lifecycle --------------------------------------------------------------------------------------
    async def astart(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenizer")
        ForkGuard.arm()
        self._batcher.start()
        # Warm up on the engine thread: spins up the rayon pool before the first real request.
        warm_up = RustCall(None, True, False)
        await self._call(self._encode_raw, ["warm up", "the pool"] * max(2, self.threads), warm_up)

    async def astop(self) -> None:
        self._stopping = True  # callers get UNAVAILABLE ("retry elsewhere"); admitted work still runs
        await self._batcher.stop()
        if self._executor is not None:
            executor, self._executor = self._executor, None
            # a running Rust call is waited for off the loop
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
            ForkGuard.disarm()

    @property
    def ready(self) -> bool:
        return self._executor is not None and not self._stopping

    @property
    def batcher(self) -> Batcher:
        return self._batcher

    # -- public API -------------------------------------------------------------------------------------
    async def encode(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        options: EncodeOptions = EncodeOptions(),
    ) -> EncodedBatch:
        """Encode a batch exactly as ``tokenizer(texts, text_pairs, **options)`` would."""
        result: EncodedBatch = await self.submit_encode(texts, text_pairs, options)
        return result

    def submit_encode(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        options: EncodeOptions = EncodeOptions(),
        reservation: Reservation | None = None,
    ) -> asyncio.Future[EncodedBatch]:
        """Validate and queue an encode; the future resolves to what :meth:`encode` returns.

        Cancelling the future withdraws the request (it is dropped if not yet encoded). Call it from the
        event loop the engine was started on. ``reservation`` (from :meth:`reserve_intake`) is resized to
        this request's memory bound and stays the caller's to release once the answer is sent; without one
        the engine reserves the bound itself and releases it when the future is done.
        """
        self._check_accepting()
        inputs, chars = self._inputs(texts, text_pairs)
        plan = self._plan(options)
        limit = self.limits.max_response_tokens
        if plan.pad_target is not None and len(texts) * plan.pad_target > limit:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{len(texts)} texts padded to max_length={plan.pad_target} would hold over max_response_tokens="
                f"{limit} token positions; send fewer texts or a smaller max_length",
            )
        bound = self._encode_bound(texts, text_pairs, plan)
        work = _Encode(inputs, plan, bound.slices)
        return self._submit(work, len(inputs), chars, plan.rust_call, bound.cost, reservation, "this encode")

    async def lengths(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        options: LengthOptions = LengthOptions(),
    ) -> list[Any]:
        """Token counts, as ``[len(ids) for ids in tokenizer(texts, text_pairs, **options)["input_ids"]]``; with
        ``return_overflowing_tokens`` one list per text: the counts of its rows (first window, then overflow)."""
        result: list[Any] = await self.submit_lengths(texts, text_pairs, options)
        return result

    def submit_lengths(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        options: LengthOptions = LengthOptions(),
        reservation: Reservation | None = None,
    ) -> asyncio.Future[list[Any]]:
        """Validate and queue a count; the future resolves to what :meth:`lengths` returns.

        Options resolve exactly as an encode's (transformers' own function, same refusals), and the job asks
        the same Rust call as an unpadded encode with that truncation, so it can share one ``encode_batch_fast``
        with encodes and other counts. What it saves is everything after Rust: no ids are read out of the
        encodings, nothing is padded, the answer is one small int per text, and a text (or pair) the request
        holds several times is tokenized once. (The fast call's overflow rows have the right lengths; only a
        pair's overflow type ids are wrong there, and counts read none.)
        """
        self._check_accepting()
        inputs, chars = self._inputs(texts, text_pairs)
        plan = self._plan(options.as_encode_options())
        call = RustCall(plan.truncation, plan.add_special_tokens, False)
        # Equal inputs have equal counts: each distinct one is tokenized once (datasets repeat short texts).
        distinct: dict[Any, int] = {}
        positions: list[int] | None = [distinct.setdefault(item, len(distinct)) for item in inputs]
        unique: Sequence[Any] = inputs
        if len(distinct) == len(inputs):
            positions = None
        else:
            unique = list(distinct)
            chars = sum(len(item) if isinstance(item, str) else len(item[0]) + len(item[1]) for item in unique)
        # memory: the inputs and one slice of Rust encodings; the answer is an int per row
        firsts = [item if isinstance(item, str) else item[0] for item in unique]
        seconds = None if text_pairs is None else [item[1] for item in unique]
        bound = self._encode_bound(firsts, seconds, plan, output=False)
        work = _Lengths(unique, plan.with_overflow, positions, bound.slices)
        return self._submit(work, len(unique), chars, call, bound.cost, reservation, "this count")

    def _inputs(self, texts: Sequence[str], text_pairs: Sequence[str] | None) -> tuple[Sequence[Any], int]:
        """Checked inputs for the Rust tokenizer (texts, or (text, pair) tuples) and their characters."""
        self._check_texts(texts, "texts")
        if text_pairs is None:
            return texts, sum(map(len, texts))
        self._check_texts(text_pairs, "text_pairs")
        if len(text_pairs) != len(texts):
            raise ServiceError(
                ErrorKind.INVALID_REQUEST,
                f"text_pairs has {len(text_pairs)} entries but texts has {len(texts)}; they must match",
            )
        return list(zip(texts, text_pairs, strict=True)), sum(map(len, texts)) + sum(map(len, text_pairs))

    def _plan(self, options: EncodeOptions) -> EncodePlan:
        """Resolved options, memoised: clients send the same few option sets over and over."""
        plan = self._plans.get(options)
        if plan is None:
            plan = plan_encode(self.facts, options)  # raises for refused options: those are not cached
            if len(self._plans) >= 1024:
                self._plans.clear()
            self._plans[options] = plan
        return plan

    async def tokenize(
        self, texts: Sequence[str], add_special_tokens: bool = False, reservation: Reservation | None = None
    ) -> list[list[str]]:
        """Tokens of each text, as ``tokenizer.tokenize(text, add_special_tokens=...)`` gives them.
        ``reservation``: as for :meth:`submit_encode`."""
        return (await self.tokenize_batch(texts, add_special_tokens=add_special_tokens, reservation=reservation)).tokens

    async def tokenize_batch(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        *,
        add_special_tokens: bool = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        sequence_ids: bool = False,
        reservation: Reservation | None = None,
    ) -> TokenizedBatch:
        """Tokens of each text (or pair), one per id of the encoding ``tokenizer(texts, text_pairs, ...)``
        makes with these options (``BatchEncoding.tokens()``; without truncation, exactly
        ``tokenizer.tokenize(text, pair, add_special_tokens=...)``), and their ``sequence_ids`` if asked.
        ``reservation``: as for :meth:`submit_encode`."""
        self._check_accepting()
        inputs, chars = self._inputs(texts, text_pairs)
        # truncation resolves exactly as for an encode with the same options (same defaults, same refusals)
        plan = self._plan(
            EncodeOptions(add_special_tokens=add_special_tokens, truncation=truncation, max_length=max_length)
        )
        # encode_batch_fast leaves tokens empty: the full encode_batch, which an encode may share
        call = RustCall(plan.truncation, add_special_tokens, True)
        cost, slices = self._tokenize_cost(texts, text_pairs, add_special_tokens, sequence_ids)
        work = _Tokenize(inputs, sequence_ids, slices)
        result: TokenizedBatch = await self._submit(work, len(inputs), chars, call, cost, reservation, "this tokenize")
        return result

    async def decode(
        self,
        ids: Sequence[Sequence[int]],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        reservation: Reservation | None = None,
    ) -> list[str]:
        """Texts of each id list, as ``tokenizer.batch_decode(ids, ...)`` gives them.
        ``reservation``: as for :meth:`submit_encode`."""
        self._check_accepting()
        if not ids:
            raise ServiceError(ErrorKind.INVALID_REQUEST, "ids must hold at least one list of token ids")
        if len(ids) > self.limits.max_texts_per_request:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{len(ids)} id lists exceed max_texts_per_request={self.limits.max_texts_per_request}",
            )
        work = _Decode(ids, skip_special_tokens, clean_up_tokenization_spaces)
        count = sum(map(len, ids))
        # what the parsed ids hold, the decoded text (at most the longest token per id) and its JSON
        cost = count * self.costs.decode_per_id + count * (self._longest_token_bytes + 1) * self.costs.per_text_byte
        texts: list[str] = await self._submit(work, len(ids), count, None, cost, reservation, "this decode")
        return texts

    def reserve_intake(self, body_bytes: int, *, ids: bool = False) -> Reservation:
        """Reserve memory for reading and parsing a request body of ``body_bytes`` (``ids``: a decode body)
        before it is read, or refuse at once: UNAVAILABLE once stopping, OVERLOADED when the queue is
        full or the budget has no room now, TOO_LARGE when it never will. Pass the reservation on to
        :meth:`submit_encode` / :meth:`tokenize` / :meth:`decode`; release it once the answer is sent."""
        self._check_accepting()
        return self._batcher.reserve_intake(self.costs.intake(body_bytes, ids), "this request's body")

    def resize_intake(self, reservation: Reservation, body_bytes: int, *, ids: bool = False) -> None:
        """Grow an intake reservation while a body of unannounced length arrives (raises as above)."""
        reservation.resize(self.costs.intake(body_bytes, ids), "this request's body")

    # -- memory bounds ----------------------------------------------------------------------------------
    def encode_bound(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, options: EncodeOptions = EncodeOptions()
    ) -> EncodeBound:
        """What admission reserves for this encode (without encoding it): its bounds and memory cost."""
        return self._encode_bound(texts, text_pairs, self._plan(options))

    def _encode_bound(
        self, texts: Sequence[str], pairs: Sequence[str] | None, plan: EncodePlan, output: bool = True
    ) -> EncodeBound:
        """A safe upper bound of the bytes this encode holds, and the slices it is encoded in.

        Tokens per input are bounded by its UTF-8 bytes plus the special tokens (and one for a prefix
        some pre-tokenizers add per sequence); truncation caps a row; overflow adds at most one row per
        ``max_length - stride - special tokens`` tokens; padding makes every row the padded length."""
        costs = self.costs
        sequences = 1 if pairs is None else 2
        specials = self._specials[sequences - 1] if plan.add_special_tokens else 0
        truncation = plan.truncation
        first = list(map(utf8_length, texts))
        second = list(map(utf8_length, pairs)) if pairs is not None else None
        untruncated = [b + specials + sequences for b in first]
        if second is not None:
            untruncated = [u + b for u, b in zip(untruncated, second, strict=True)]
        rows = [1] * len(untruncated)
        row_length = untruncated
        if truncation is not None:
            most = truncation.max_length
            # truncation never drops the special tokens, and an overflow row holds at least one token more
            row_length = [min(u, max(most, specials + 1)) for u in untruncated]
            if plan.with_overflow:
                fixed: list[int] | None = None
                if second is not None and truncation.strategy == "only_second":
                    fixed = first
                elif second is not None and truncation.strategy == "only_first":
                    fixed = second
                rows = []
                for i, u in enumerate(untruncated):
                    if second is not None and fixed is None:
                        rows.append(_longest_first_pair_rows(first[i], second[i], most - specials, truncation.stride))
                        continue
                    step = most - specials - truncation.stride - (fixed[i] if fixed is not None else 0)
                    rows.append(u if step <= 0 else 1 + -(-max(0, u - most) // step))
        held = [r * n for r, n in zip(rows, row_length, strict=True)]  # the encodings Rust keeps
        positions = sum(held)
        if plan.padded:
            target = plan.pad_target or 0
            target = max(target, max(row_length, default=0))
            multiple = plan.pad_to_multiple_of
            if multiple and target % multiple:
                target += multiple - target % multiple
            positions = max(positions, sum(rows) * target)
        columns = sum(2 if key == "offset_mapping" else 1 for key in plan.keys if key not in ("length",))
        if not output:  # a count answers one int per row, not the rows
            columns = 0
        # Rust holds, per input, the encodings it keeps plus (while it works) the untruncated one
        rust = [h + u for h, u in zip(held, untruncated, strict=True)]
        slices, largest_slice = self._slices(rust)
        inputs = held_bytes(texts) + (held_bytes(pairs) if pairs is not None else 0)
        cost = (
            inputs
            + largest_slice * costs.rust_per_token
            + positions * columns * costs.out_per_position_column
            + sum(rows) * 256
        )
        return EncodeBound(cost, positions, sum(rows), slices)

    def _tokenize_cost(
        self, texts: Sequence[str], pairs: Sequence[str] | None, add_special_tokens: bool, sequence_ids: bool
    ) -> tuple[int, tuple[int, ...]]:
        costs = self.costs
        sequences = 1 if pairs is None else 2
        specials = self._specials[sequences - 1] if add_special_tokens else 0
        text_bytes = list(map(utf8_length, texts))
        if pairs is not None:
            text_bytes = [b + utf8_length(pair) for b, pair in zip(text_bytes, pairs, strict=True)]
        tokens = [b + specials + sequences for b in text_bytes]
        slices, largest_slice = self._slices(tokens)
        total = sum(tokens)
        # token strings: at most the text's bytes twice over (byte-level alphabets, "##" continuation
        # prefixes) plus the special tokens' own text
        token_bytes = 2 * sum(text_bytes) + 2 * total + specials * len(texts) * 32
        cost = (
            held_bytes(texts)
            + (held_bytes(pairs) if pairs is not None else 0)
            + largest_slice * costs.rust_per_token
            + total * (costs.tokenize_per_token + (16 if sequence_ids else 0))  # (a list slot, "null,")
            + token_bytes * costs.per_text_byte
        )
        return cost, slices

    def _slices(self, tokens: Sequence[int]) -> tuple[tuple[int, ...], int]:
        """Cut inputs of ``tokens`` bound each into consecutive slices of at most :attr:`slice_tokens`
        (an input above it is a slice of its own): the slice ends (empty if one slice) and the largest."""
        if sum(tokens) <= self.slice_tokens:
            return (), sum(tokens)
        ends: list[int] = []
        current = largest = 0
        for i, count in enumerate(tokens):
            if current and current + count > self.slice_tokens:
                ends.append(i)
                largest = max(largest, current)
                current = 0
            current += count
        largest = max(largest, current)
        ends.append(len(tokens))
        return tuple(ends), largest

    def info(self) -> dict[str, Any]:
        """What the engine serves and how: for ``/info`` and for logs."""
        import tokenizers
        import transformers

        config = self._config
        batching = self._batcher.config
        return {
            "source": self.loaded.source,
            "revision": self.loaded.revision,
            "fingerprint": self.loaded.fingerprint,
            "tokenizer_class": type(self.tokenizer).__name__,
            "vocab_size": self.vocab_size,
            "special_tokens": config["special_tokens"],
            "special_token_ids": self._special_token_ids,
            "pad_token_id": config["pad_token_id"],
            "model_max_length": config["model_max_length"],
            "padding_side": config["padding_side"],
            "truncation_side": config["truncation_side"],
            "model_input_names": config["model_input_names"],
            "limits": {
                "max_texts_per_request": self.limits.max_texts_per_request,
                "max_text_chars": self.limits.max_text_chars,
                "max_response_tokens": self.limits.max_response_tokens,
                "memory_budget_bytes": self.budget.capacity,
            },
            "memory": {"budget_bytes": self.budget.capacity, "reserved_bytes": self.budget.in_use},
            "batching": {
                "enabled": batching.enabled,
                "max_wait_ms": batching.max_wait_seconds * 1000,
                "max_batch_texts": batching.max_batch_texts,
                "max_batch_chars": batching.max_batch_chars,
                "max_queued_requests": batching.max_queued_requests,
                "max_queued_texts": batching.max_queued_texts,
                "queue_timeout_seconds": batching.queue_timeout_seconds,
                "queued_requests": self._batcher.queued_requests,
                "queued_texts": self._batcher.queued_texts,
            },
            "parallelism": {
                "tokenizers_parallelism": parallelism_enabled(),
                "rust_threads": self.threads,
                "forks_after_load": ForkGuard.forks_after_load,
            },
            "versions": {
                "service": __version__,
                "tokenizers": tokenizers.__version__,
                "transformers": transformers.__version__,
            },
        }

    # -- admission: the one path into the tokenizer thread ----------------------------------------------
    def _submit(
        self,
        payload: _Payload,
        texts: int,
        chars: int,
        call: RustCall | None,
        cost: int,
        reservation: Reservation | None,
        what: str,
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        alone = bool(getattr(payload, "slices", ()))  # a sliced request never shares its Rust calls
        job = Job(payload, texts, chars, call, future, cost=cost, reservation=reservation, what=what, alone=alone)
        return self._batcher.submit(job)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise ServiceError(ErrorKind.UNAVAILABLE, "the engine is not running")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _run_batch(self, batch: list[Job]) -> list[Any]:
        return await self._call(self._run_batch_on_thread, batch)

    # -- on the tokenizer thread ------------------------------------------------------------------------
    def _run_batch_on_thread(self, batch: list[Job]) -> list[Any]:
        """One Rust call for the whole batch; if it fails, each job alone, so a bad one fails alone."""
        first = batch[0]
        if isinstance(first.payload, _Decode):  # decodes carry no batch key: always alone
            return [self._decode(first.payload)]
        assert isinstance(first.batch_key, RustCall)
        if first.payload.slices:  # a large request: alone, slice by slice
            return [self._run_sliced(first.payload, first.batch_key)]
        inputs = [item for job in batch for item in job.payload.inputs]
        try:
            encodings = self._encode_raw(inputs, first.batch_key)
        except ServiceError as exc:
            if len(batch) == 1:
                return [exc]
            return [self._run_batch_on_thread([job])[0] for job in batch]
        outcomes: list[Any] = []
        start = 0
        for job in batch:
            end = start + job.texts
            outcomes.append(self._finish(job.payload, encodings[start:end]))
            start = end
        return outcomes

    def _finish(self, payload: _Payload, encodings: Sequence[Any]) -> Any:
        """One job's answer from its slice of the batch's encodings (or the error for it alone)."""
        if isinstance(payload, _Tokenize):
            tokens = [e.tokens for e in encodings]
            return TokenizedBatch(tokens, [e.sequence_ids for e in encodings] if payload.sequence_ids else None)
        if isinstance(payload, _Lengths):
            counts = count_tokens(encodings, payload.with_overflow)
            if payload.positions is None:
                return counts
            return [counts[i] for i in payload.positions]
        assert isinstance(payload, _Encode)
        try:
            return shape_rows(extract_rows(encodings, payload.plan), payload.plan, self.limits.max_response_tokens)
        except ServiceError as exc:
            return exc

    def _run_sliced(self, payload: _Encode | _Lengths | _Tokenize, call: RustCall) -> Any:
        """Encode a large request slice by slice, keeping only the values it needs from each slice's Rust
        encodings, so the encodings held at once are bounded by a slice rather than by the request."""
        limit = self.limits.max_response_tokens
        parts: list[EncodedRows] = []
        tokens: list[list[str]] = []
        sequence_ids: list[list[int | None]] = []
        counts: list[Any] = []
        start = held = 0
        try:
            for end in payload.slices:
                encodings = self._encode_raw(list(payload.inputs[start:end]), call)
                start = end
                if isinstance(payload, _Tokenize):
                    tokens.extend(e.tokens for e in encodings)
                    if payload.sequence_ids:
                        sequence_ids.extend(e.sequence_ids for e in encodings)
                    continue
                if isinstance(payload, _Lengths):
                    counts.extend(count_tokens(encodings, payload.with_overflow))
                    continue
                part = extract_rows(encodings, payload.plan)
                del encodings
                held += part.num_tokens
                if held > limit:  # fail early: even unpadded, the result is over the limit
                    raise ServiceError(
                        ErrorKind.TOO_LARGE,
                        f"the result would hold over {held} token positions, over the limit max_response_tokens="
                        f"{limit}; send fewer texts or a smaller max_length",
                    )
                parts.append(part)
            if isinstance(payload, _Tokenize):
                return TokenizedBatch(tokens, sequence_ids if payload.sequence_ids else None)
            if isinstance(payload, _Lengths):
                return counts if payload.positions is None else [counts[i] for i in payload.positions]
            return shape_rows(join_rows(parts), payload.plan, limit)
        except ServiceError as exc:
            return exc

    def _decode(self, work: _Decode) -> list[str] | ServiceError:
        try:
            texts: list[str] = self.tokenizer.batch_decode(
                list(work.ids),
                skip_special_tokens=work.skip_special_tokens,
                clean_up_tokenization_spaces=work.clean_up_tokenization_spaces,
            )
            return texts
        except Exception as exc:  # noqa: BLE001 -- transformers raises several types for ids it refuses
            return ServiceError(ErrorKind.TOKENIZER, f"decode failed: {exc}")

    def _encode_raw(self, inputs: list[Any], call: RustCall) -> list[Any]:
        """Set the Rust truncation state (this thread only) and encode. Padding is never set in Rust."""
        backend = self._backend
        try:
            if call.truncation != self._truncation:
                if call.truncation is None:
                    backend.no_truncation()
                else:
                    backend.enable_truncation(**call.truncation.as_kwargs())
                self._truncation = call.truncation
            encode = backend.encode_batch if call.full_encode else backend.encode_batch_fast
            encodings: list[Any] = encode(inputs, add_special_tokens=call.add_special_tokens)
            return encodings
        except BaseException as exc:
            # Rust refuses an option or input: the caller's to fix. Some refusals are Rust panics
            # (e.g. a stride too large for the room left after truncation), which pyo3 raises as
            # PanicException -- a BaseException, so `except Exception` would let them crash the batch.
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            self._truncation = _read_truncation(backend)
            message = str(exc).split("\n")[0]
            raise ServiceError(ErrorKind.TOKENIZER, f"the tokenizer refused this input: {message}") from exc

    # -- checks -----------------------------------------------------------------------------------------
    def _check_accepting(self) -> None:
        if self._stopping:
            raise ServiceError(
                ErrorKind.UNAVAILABLE, "the engine is stopping; retry on another replica", retry_after=1.0
            )

    def _check_texts(self, texts: Sequence[str], field_name: str) -> None:
        if not texts:
            raise ServiceError(ErrorKind.INVALID_REQUEST, f"{field_name} must hold at least one text")
        limit = self.limits.max_texts_per_request
        if len(texts) > limit:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{field_name} holds {len(texts)} texts, over max_texts_per_request={limit}; split the batch",
            )
        max_chars = self.limits.max_text_chars
        for i, text in enumerate(texts):
            if len(text) > max_chars:
                raise ServiceError(
                    ErrorKind.TOO_LARGE,
                    f"{field_name}[{i}] has {len(text)} characters, over max_text_chars={max_chars}; split it",
                )


def _read_truncation(backend: Any) -> TruncationSetting | None:
    current = backend.truncation
    if current is None:
        return None
    return TruncationSetting(current["max_length"], current["stride"], current["strategy"], current["direction"])


def _longest_first_pair_rows(first_bytes: int, second_bytes: int, room: int, stride: int) -> int:
    """At most how many rows a pair truncated ``longest_first`` with overflow yields, from its texts' UTF-8
    lengths (each bounds its token count, plus one for a prefix some pre-tokenizers add).

    tokenizers truncates a pair so that a side it cuts keeps at least half of ``room`` (``max_length``
    minus the special tokens), and more than ``stride`` tokens (else it refuses the call); each cut side is
    split into windows that advance by what it keeps minus ``stride``; the pair's rows combine each window
    of the first with each of the second."""
    keeps = max(room // 2, stride + 1)
    step = max(keeps - stride, 1)

    def windows(text_bytes: int) -> int:
        return 1 + -(-max(0, text_bytes + 1 - keeps) // step)

    return windows(first_bytes) * windows(second_bytes)
