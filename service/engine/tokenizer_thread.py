"""The one thread that calls the Rust tokenizer (its truncation state must never be set from two threads:
"Already borrowed", tokenizers #537), and the kinds of :class:`Work` it runs: each names its Rust call and
accumulates its inputs' encodings (its share of a batch's call, or slice by slice) into its answer.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from ..wire import DecodeOptions
from .encoding import (
    EncodedBatch,
    EncodedRows,
    EncodePlan,
    RustCall,
    TruncationSetting,
    extract_rows,
    join_rows,
    shape_rows,
)
from .errors import ErrorKind, ServiceError

T = TypeVar("T")


@dataclass(frozen=True)
class TokenizedBatch:
    """A tokenize's answer: per text, its tokens and, if asked, each token's sequence (None: special, 0, 1)."""

    tokens: list[list[str]]
    sequence_ids: list[list[int | None]] | None = None


class Work(ABC):
    """One request's ``inputs`` (str or (str, str) each) for the Rust ``call`` (None: no encode), encoded in the
    ``slices`` ending there (empty: at once, maybe beside others). An error in it is this work's alone."""

    inputs: Sequence[Any] = ()
    call: RustCall | None = None
    slices: tuple[int, ...] = ()
    _error: ServiceError | None = None

    def accumulate(self, encodings: Sequence[Any]) -> None:
        """Keep what the answer needs of the next inputs' encodings (freed afterwards), or refuse early."""
        raise TypeError(f"{type(self).__name__} encodes nothing: it has no encodings to accumulate")

    @abstractmethod
    def result(self) -> Any:
        """The answer, once every input's encodings were accumulated."""

    @property
    def failed(self) -> bool:
        return self._error is not None

    def take(self, encodings: Sequence[Any]) -> None:
        if self._error is None:
            try:
                self.accumulate(encodings)
            except ServiceError as exc:
                self._error = exc

    def outcome(self) -> Any:
        """The result, or the error for this work alone."""
        if self._error is not None:
            return self._error
        try:
            return self.result()
        except ServiceError as exc:
            return exc


class EncodeWork(Work):
    """``tokenizer(texts, text_pairs, **options)``: the rows ``plan`` asks for, padded and shaped."""

    def __init__(
        self,
        inputs: Sequence[Any],
        plan: EncodePlan,
        slices: tuple[int, ...],
        max_response_tokens: int,
        zero_type_ids: bool = False,
    ):
        self.inputs = inputs
        self.call = plan.rust_call
        self.slices = slices
        self._plan = plan
        self._limit = max_response_tokens
        self._zero_type_ids = zero_type_ids
        self._parts: list[EncodedRows] = []
        self._held = 0

    def accumulate(self, encodings: Sequence[Any]) -> None:
        part = extract_rows(encodings, self._plan, self._zero_type_ids)
        self._held += part.num_tokens
        if self._held > self._limit:  # even unpadded, the result is over the limit
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"the result would hold at least {self._held} token positions, over max_response_tokens="
                f"{self._limit}; send fewer texts or a smaller max_length",
            )
        self._parts.append(part)

    def result(self) -> EncodedBatch:
        return shape_rows(join_rows(self._parts), self._plan, self._limit)


class LengthsWork(Work):
    """Token counts of each input, or with overflow of each of its rows. ``inputs`` hold each distinct input once;
    ``positions`` give each requested input's place among them (None: no repeats)."""

    def __init__(
        self,
        inputs: Sequence[Any],
        call: RustCall,
        with_overflow: bool,
        positions: Sequence[int] | None,
        slices: tuple[int, ...],
    ):
        self.inputs = inputs
        self.call = call
        self.slices = slices
        self._with_overflow = with_overflow
        self._positions = positions
        self._counts: list[Any] = []

    def accumulate(self, encodings: Sequence[Any]) -> None:
        if self._with_overflow:  # each input's rows: itself, then its overflow windows (transformers' order)
            self._counts.extend([len(e), *map(len, e.overflowing)] for e in encodings)
        else:
            self._counts.extend(map(len, encodings))

    def result(self) -> list[Any]:
        counts = self._counts
        return counts if self._positions is None else [counts[i] for i in self._positions]


class TokenizeWork(Work):
    """Each encoding's tokens (``BatchEncoding.tokens()``), and its ``sequence_ids`` if asked for."""

    def __init__(self, inputs: Sequence[Any], call: RustCall, sequence_ids: bool, slices: tuple[int, ...]):
        self.inputs = inputs
        self.call = call
        self.slices = slices
        self._tokens: list[list[str]] = []
        self._sequence_ids: list[list[int | None]] | None = [] if sequence_ids else None

    def accumulate(self, encodings: Sequence[Any]) -> None:
        self._tokens.extend(e.tokens for e in encodings)
        if self._sequence_ids is not None:
            self._sequence_ids.extend(e.sequence_ids for e in encodings)

    def result(self) -> TokenizedBatch:
        return TokenizedBatch(self._tokens, self._sequence_ids)


class DecodeWork(Work):
    """``tokenizer.batch_decode(ids, **options)`` (the options are its keywords): no encode, always alone."""

    def __init__(self, tokenizer: Any, ids: Sequence[Sequence[int]], options: DecodeOptions):
        self._tokenizer = tokenizer
        self._ids = ids
        self._options = options

    def result(self) -> list[str]:
        try:
            texts: list[str] = self._tokenizer.batch_decode(list(self._ids), **vars(self._options))
            return texts
        except Exception as exc:
            raise ServiceError(ErrorKind.TOKENIZER, f"decode failed: {exc}") from exc


class TokenizerThread:
    """The one thread that calls the Rust tokenizer, and the truncation state it has set there."""

    def __init__(self, tokenizer: Any) -> None:
        self._backend = tokenizer.backend_tokenizer
        self._truncation: TruncationSetting | None = None  # what the Rust tokenizer currently holds
        self._executor: ThreadPoolExecutor | None = None
        # probed before the thread starts (the only Rust calls made off it)
        self._zero_single_type_ids = {flag: _single_type_ids_are_zero(self._backend, flag) for flag in (False, True)}

    def zero_type_ids(self, pairs: bool, add_special_tokens: bool) -> bool:
        """Whether such inputs' type ids are all 0, so need not be read: known for single sequences only."""
        return not pairs and self._zero_single_type_ids[add_special_tokens]

    @property
    def running(self) -> bool:
        return self._executor is not None

    def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenizer")

    async def stop(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            # a running Rust call is waited for off the loop
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    def encode_here(self, inputs: list[Any], call: RustCall) -> list[Any]:
        """``call`` on ``inputs`` on the caller's thread, for a process that never starts this thread: the
        calibration's probes (``service.calibration.probes``) measure the Rust pool through the seam the server
        encodes through."""
        if self._executor is not None:
            raise RuntimeError("encode_here is for a tokenizer thread that was never started")
        return self._encode(inputs, call)

    async def run(self, works: list[Work]) -> list[Any]:
        """Run ``works`` (equal calls, or one alone) on the thread: one outcome per work, result or error."""
        return await self._call(self._run, works)

    async def warm_up(self, texts: list[str]) -> None:
        """Spin up the Rust pool before the first real request."""
        await self._call(self._encode, texts, RustCall(None, True, False))

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise ServiceError(ErrorKind.UNAVAILABLE, "the engine is not running")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- on the thread ----------------------------------------------------------------------------------
    def _run(self, works: list[Work]) -> list[Any]:
        """One Rust call for the batch (a sliced work: one per slice); if Rust refuses it, each work alone."""
        call = works[0].call
        if call is not None:
            try:
                self._encode_into(works, call)
            except ServiceError as exc:
                return [exc] if len(works) == 1 else [self._run([work])[0] for work in works]
        return [work.outcome() for work in works]

    def _encode_into(self, works: list[Work], call: RustCall) -> None:
        """Hand each work its encodings: a batch from one Rust call, a sliced work slice by slice (up to the
        first slice it refuses)."""
        if len(works) > 1:
            encodings = self._encode([item for work in works for item in work.inputs], call)
            start = 0
            for work in works:
                end = start + len(work.inputs)
                work.take(encodings[start:end])
                start = end
            return
        work = works[0]
        start = 0
        for end in work.slices or (len(work.inputs),):
            encodings = self._encode(list(work.inputs[start:end]), call)
            work.take(encodings)
            del encodings  # before the next slice is encoded
            if work.failed:
                return
            start = end

    def _encode(self, inputs: list[Any], call: RustCall) -> list[Any]:
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
            # Rust refuses an option or input: the caller's to fix. Some refusals are Rust panics (a stride too
            # large for truncation's room), raised by pyo3 as PanicException, a BaseException.
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            current = backend.truncation  # as Rust left it
            self._truncation = None if current is None else TruncationSetting(**current)
            raise ServiceError(ErrorKind.TOKENIZER, f"the tokenizer refused this input: {_refusal(exc)}") from exc


#: Texts one of which yields a token in any tokenizer (one normalising them all away tells nothing).
_TYPE_ID_PROBES = ("a", "hello world", "0", "你好", ".", "é")


def _single_type_ids_are_zero(backend: Any, add_special_tokens: bool) -> bool:
    """Whether a single sequence's type ids are all 0. tokenizers gives each piece of the post-processor's
    template (the sequence, each special token; overflow rows too) its type id whatever the text, so one probe
    yielding a token of the text tells it for every text; none yielding one: not known (ids are read)."""
    for text in _TYPE_ID_PROBES:
        encoding = backend.encode(text, add_special_tokens=add_special_tokens)
        if 0 in encoding.sequence_ids:
            return not any(encoding.type_ids)
    return False


def _refusal(exc: BaseException) -> str:
    """Rust's reason on one line, without a trailing separator; for a stride, what to change."""
    message = str(exc).split("\n")[0].strip().rstrip(",;:").rstrip()
    if "stride" in message:
        message += "; send a smaller stride or a larger max_length"
    return message
