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
    EncodeOptions,
    EncodePlan,
    LengthOptions,
    RustCall,
    TokenizerFacts,
    TruncationSetting,
    build_batch,
    count_tokens,
    plan_encode,
)
from .errors import ErrorKind, ServiceError
from .loading import LoadedTokenizer, call_config
from .parallelism import ForkGuard, parallelism_enabled

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class EngineLimits:
    max_texts_per_request: int = 4096
    max_text_chars: int = 200_000
    max_response_tokens: int = 8 * 1024 * 1024


# What a queued job asks of the tokenizer thread (the batcher's Job.payload).
@dataclass(frozen=True)
class _Encode:
    inputs: Sequence[Any]  # str, or (str, str) for a pair
    plan: EncodePlan


@dataclass(frozen=True)
class _Lengths:
    inputs: Sequence[Any]  # as _Encode's, each distinct input once
    with_overflow: bool
    positions: Sequence[int] | None  # for each requested input, its place in `inputs` (None: no repeats)


@dataclass(frozen=True)
class _Tokenize:
    inputs: Sequence[Any]  # str, or (str, str) for a pair
    sequence_ids: bool


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


class Engine:
    """Async facade over the tokenizer: ``await engine.encode(texts, options=...)``.

    Create it with a loaded tokenizer, ``await astart()`` inside a running event loop, ``await astop()``
    when done; ``begin_drain()`` refuses new work while what is admitted finishes. Every encode, token count,
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
        self._plans: dict[EncodeOptions, EncodePlan] = {}
        self._truncation: TruncationSetting | None = None  # what the Rust tokenizer currently holds
        self._executor: ThreadPoolExecutor | None = None
        self._batcher = Batcher(batching, self._run_batch, observer)
        self._draining = False

    # -- lifecycle --------------------------------------------------------------------------------------
    async def astart(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenizer")
        ForkGuard.arm()
        self._batcher.start()
        # Warm up on the engine thread: spins up the rayon pool before the first real request.
        warm_up = RustCall(None, True, False)
        await self._call(self._encode_raw, ["warm up", "the pool"] * max(2, self.threads), warm_up)

    def begin_drain(self) -> None:
        """Stop admitting work (callers get UNAVAILABLE, "retry elsewhere"); admitted work still runs."""
        self._draining = True

    async def astop(self) -> None:
        self.begin_drain()
        await self._batcher.stop()
        if self._executor is not None:
            executor, self._executor = self._executor, None
            # a running Rust call is waited for off the loop
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
            ForkGuard.disarm()

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def ready(self) -> bool:
        return self._executor is not None and not self._draining

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
    ) -> asyncio.Future[EncodedBatch]:
        """Validate and queue an encode; the future resolves to what :meth:`encode` returns.

        Cancelling the future withdraws the request (it is dropped if not yet encoded). Call it from the
        event loop the engine was started on.
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
        return self._submit(_Encode(inputs, plan), len(inputs), chars, plan.rust_call)

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
        positions = [distinct.setdefault(item, len(distinct)) for item in inputs]
        if len(distinct) == len(inputs):
            return self._submit(_Lengths(inputs, plan.with_overflow, None), len(inputs), chars, call)
        unique = list(distinct)
        chars = sum(len(item) if isinstance(item, str) else len(item[0]) + len(item[1]) for item in unique)
        return self._submit(_Lengths(unique, plan.with_overflow, positions), len(unique), chars, call)

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

    async def tokenize(self, texts: Sequence[str], add_special_tokens: bool = False) -> list[list[str]]:
        """Tokens of each text, as ``tokenizer.tokenize(text, add_special_tokens=...)`` gives them."""
        return (await self.tokenize_batch(texts, add_special_tokens=add_special_tokens)).tokens

    async def tokenize_batch(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        *,
        add_special_tokens: bool = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        sequence_ids: bool = False,
    ) -> TokenizedBatch:
        """Tokens of each text (or pair), one per id of the encoding ``tokenizer(texts, text_pairs, ...)``
        makes with these options (``BatchEncoding.tokens()``; without truncation, exactly
        ``tokenizer.tokenize(text, pair, add_special_tokens=...)``), and their ``sequence_ids`` if asked."""
        self._check_accepting()
        inputs, chars = self._inputs(texts, text_pairs)
        # truncation resolves exactly as for an encode with the same options (same defaults, same refusals)
        plan = self._plan(
            EncodeOptions(add_special_tokens=add_special_tokens, truncation=truncation, max_length=max_length)
        )
        # encode_batch_fast leaves tokens empty: the full encode_batch, which an encode may share
        call = RustCall(plan.truncation, add_special_tokens, True)
        result: TokenizedBatch = await self._submit(_Tokenize(inputs, sequence_ids), len(inputs), chars, call)
        return result

    async def decode(
        self,
        ids: Sequence[Sequence[int]],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> list[str]:
        """Texts of each id list, as ``tokenizer.batch_decode(ids, ...)`` gives them."""
        self._check_accepting()
        if not ids:
            raise ServiceError(ErrorKind.INVALID_REQUEST, "ids must hold at least one list of token ids")
        if len(ids) > self.limits.max_texts_per_request:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{len(ids)} id lists exceed max_texts_per_request={self.limits.max_texts_per_request}",
            )
        work = _Decode(ids, skip_special_tokens, clean_up_tokenization_spaces)
        texts: list[str] = await self._submit(work, len(ids), sum(map(len, ids)), None)
        return texts

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
            "pad_token_id": config["pad_token_id"],
            "model_max_length": config["model_max_length"],
            "padding_side": config["padding_side"],
            "truncation_side": config["truncation_side"],
            "model_input_names": config["model_input_names"],
            "limits": {
                "max_texts_per_request": self.limits.max_texts_per_request,
                "max_text_chars": self.limits.max_text_chars,
                "max_response_tokens": self.limits.max_response_tokens,
            },
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
    def _submit(self, payload: _Payload, texts: int, chars: int, call: RustCall | None) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        return self._batcher.submit(Job(payload, texts, chars, call, future))

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
            return build_batch(encodings, payload.plan, self.limits.max_response_tokens)
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
        if self._draining:
            raise ServiceError(
                ErrorKind.UNAVAILABLE, "the server is draining; retry on another replica", retry_after=1.0
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
