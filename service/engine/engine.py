"""The engine front, admission and lifecycle: each ``submit_*`` checks a request, resolves its options, bounds it
(:mod:`.bounds`) and queues it (:mod:`.batching`) for the tokenizer thread. No HTTP in here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from ..wire import ChatOptions, DecodeOptions, EncodeOptions, LengthOptions, TokenizeOptions
from .batching import Batcher, BatchingConfig, BatchObserver, Job
from .bounds import BodyKind, CostModel, EncodeBound, RequestBounds, held_bytes, utf8_length
from .chat import ChatRenderer, ChatTemplates, PreparedChats, RenderCharge, RenderLimits, RenderWatch
from .encoding import EncodedBatch, EncodePlan, RustCall, TokenizerFacts, check_stride, plan_encode
from .errors import ErrorKind, ServiceError
from .info import describe, tokenizer_facts
from .limits import DEFAULT_LIMITS, EngineLimits
from .loading import LoadedTokenizer
from .memory import MemoryBudget, Reservation
from .parallelism import ForkGuard
from .tokenizer_thread import DecodeWork, EncodeWork, LengthsWork, TokenizedBatch, TokenizerThread, TokenizeWork, Work


class Engine:
    """One fast tokenizer behind one bounded queue: ``await engine.submit_encode(texts, options=...)``.

    ``await astart()`` in a running loop, ``await astop()`` when done (admitted work finishes). Every ``submit_*``
    runs on that loop and raises :class:`~service.engine.errors.ServiceError` at once for what the caller did
    wrong or the engine cannot do now; its future holds the answer or the error met while the work ran (cancel it
    to withdraw the request). ``reservation``: an intake reservation (:meth:`reserve_intake`) resized to the
    request's bound, the caller's to release once answered; without one the engine holds the bound itself.
    """

    def __init__(
        self,
        loaded: LoadedTokenizer,
        *,
        threads: int,
        limits: EngineLimits = DEFAULT_LIMITS,
        batching: BatchingConfig = BatchingConfig(),
        observer: BatchObserver | None = None,
        allow_chat_template_bodies: bool = False,
    ) -> None:
        """``allow_chat_template_bodies``: chat requests may send a jinja template of their own (see the server's
        ``--allow-chat-template-bodies`` for the risk)."""
        self.loaded = loaded
        tokenizer = loaded.tokenizer
        self._tokenizer = tokenizer
        self._threads = threads
        self._limits = limits
        # read once: after start, Rust calls run on the tokenizer thread only
        self._facts = TokenizerFacts.of(tokenizer)
        self._description = tokenizer_facts(loaded)
        backend = tokenizer.backend_tokenizer
        costs = CostModel()
        self._bounds = RequestBounds(
            costs,
            specials=(backend.num_special_tokens_to_add(False), backend.num_special_tokens_to_add(True)),
            longest_token_bytes=max(map(utf8_length, tokenizer.get_vocab()), default=1),
            # Rust encodings one slice may hold: an eighth of the budget (a request above it is encoded in slices)
            slice_tokens=max(4096, limits.memory_budget // 8 // costs.rust_per_token),
        )
        self._plans: dict[EncodeOptions, EncodePlan] = {}
        # conversations: the templates (read now, with the special tokens they see), and their render thread
        self.chat = ChatTemplates.of(tokenizer, facts=self._facts, allow_template_bodies=allow_chat_template_bodies)
        self._renderer = ChatRenderer()
        self._render_limits = RenderLimits(
            max_chars=limits.max_text_chars, max_conversations=limits.max_texts_per_request
        )
        self.budget = MemoryBudget(limits.memory_budget, observer.memory_changed if observer is not None else None)
        self._thread = TokenizerThread(tokenizer)
        self._batcher = Batcher(batching, self._run_batch, observer, self.budget)
        self._stopping = False  # set by astop: new work is refused (the server's drain is not the engine's)

    async def astart(self) -> None:
        self._thread.start()
        ForkGuard.arm()
        self._batcher.start()
        await self._renderer.astart()
        await self._thread.warm_up(["warm up", "the pool"] * max(2, self._threads))

    async def astop(self) -> None:
        self._stopping = True  # callers get UNAVAILABLE ("retry elsewhere"); admitted work still runs
        await self._batcher.stop()
        await self._renderer.astop()
        if self._thread.running:
            await self._thread.stop()
            ForkGuard.disarm()

    @property
    def ready(self) -> bool:
        return self._thread.running and not self._stopping

    def info(self) -> dict[str, Any]:
        """What the engine serves and how: for ``/info`` and for logs."""
        names = ("max_texts_per_request", "max_text_chars", "max_response_tokens")
        limits = {name: getattr(self._limits, name) for name in names}
        described = describe(self._description, limits, self.budget, self._batcher, self._threads)
        return {**described, "chat": self.chat.info()}

    def submit_encode(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        options: EncodeOptions = EncodeOptions(),
        *,
        reservation: Reservation | None = None,
    ) -> asyncio.Future[EncodedBatch]:
        """Encode a batch exactly as ``tokenizer(texts, text_pairs, **options)`` would."""
        inputs, chars = self._inputs(texts, text_pairs)
        work, bound = self._encode_work(inputs, texts, text_pairs, self._plan(options))
        return self._submit(work, len(inputs), chars, bound.cost, reservation, "this encode")

    def submit_lengths(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        options: LengthOptions = LengthOptions(),
        *,
        reservation: Reservation | None = None,
    ) -> asyncio.Future[list[Any]]:
        """Token counts, as ``[len(ids) for ids in tokenizer(texts, text_pairs, **options)["input_ids"]]``; with
        ``return_overflowing_tokens`` one list per text: the counts of its rows (first window, then overflow).
        The Rust call is an unpadded encode's ``encode_batch_fast`` (its overflow rows' lengths are right), shared
        with encodes; no ids are read, and a text (or pair) held several times is tokenized once."""
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
        firsts = [item if isinstance(item, str) else item[0] for item in unique]
        seconds = None if text_pairs is None else [item[1] for item in unique]
        bound = self._bounds.encode(firsts, seconds, plan, output=False)
        work = LengthsWork(unique, call, plan.with_overflow, positions, bound.slices)
        return self._submit(work, len(unique), chars, bound.cost, reservation, "this count")

    def submit_tokenize(
        self,
        texts: Sequence[str],
        text_pairs: Sequence[str] | None = None,
        options: TokenizeOptions = TokenizeOptions(),
        *,
        reservation: Reservation | None = None,
    ) -> asyncio.Future[TokenizedBatch]:
        """Tokens of each text (or pair), one per id of ``tokenizer(texts, text_pairs, ...)``'s encoding
        (``BatchEncoding.tokens()``; untruncated, ``tokenizer.tokenize(text, pair, add_special_tokens=...)``),
        and their ``sequence_ids`` if asked."""
        inputs, chars = self._inputs(texts, text_pairs)
        plan = self._plan(options.as_encode_options())  # truncation resolves as an encode's
        # encode_batch_fast leaves tokens empty: the full encode_batch, which an encode may share
        call = RustCall(plan.truncation, options.add_special_tokens, True)
        bound = self._bounds.tokenize(texts, text_pairs, options.add_special_tokens, options.return_sequence_ids)
        work = TokenizeWork(inputs, call, options.return_sequence_ids, bound.slices)
        return self._submit(work, len(inputs), chars, bound.cost, reservation, "this tokenize")

    def submit_decode(
        self,
        ids: Sequence[Sequence[int]],
        options: DecodeOptions = DecodeOptions(),
        *,
        reservation: Reservation | None = None,
    ) -> asyncio.Future[list[str]]:
        """Texts of each id list, as ``tokenizer.batch_decode(ids, **options)`` gives them."""
        self._check_accepting()
        if not ids:
            raise ServiceError(ErrorKind.INVALID_REQUEST, "ids must hold at least one list of token ids")
        limit = self._limits.max_texts_per_request
        if len(ids) > limit:
            raise ServiceError(
                ErrorKind.TOO_LARGE, f"ids holds {len(ids)} id lists, over max_texts_per_request={limit}; split it"
            )
        bound = self._bounds.decode(ids)
        work = DecodeWork(self._tokenizer, ids, options)
        return self._submit(work, len(ids), sum(map(len, ids)), bound.cost, reservation, "this decode")

    def submit_chat_encode(
        self,
        conversations: Sequence[Any],
        options: ChatOptions = ChatOptions(),
        *,
        reservation: Reservation | None = None,
    ) -> asyncio.Future[EncodedBatch]:
        """Encode conversations exactly as ``tokenizer.apply_chat_template(conversations, tokenize=True,
        return_dict=True, **options)`` would: rendered on the render thread (charged to the memory budget as
        they render), then queued as an encode of the rendered texts, and masked."""
        self._check_accepting()
        prepared = self.chat.prepare(conversations, options, self._render_limits)
        plan = self._plan(prepared.encode_options)
        return asyncio.ensure_future(self._chat(prepared, plan, reservation))

    def submit_chat_render(
        self,
        conversations: Sequence[Any],
        options: ChatOptions = ChatOptions(),
        *,
        reservation: Reservation | None = None,
    ) -> asyncio.Future[list[str]]:
        """The rendered texts of conversations, exactly ``tokenizer.apply_chat_template(conversations,
        tokenize=False, **options)`` (one per conversation); the encode's options are ignored, as there."""
        self._check_accepting()
        prepared = self.chat.prepare(conversations, options, self._render_limits, tokenize=False)
        return asyncio.ensure_future(self._chat(prepared, None, reservation))

    async def _chat(self, prepared: PreparedChats, plan: EncodePlan | None, reservation: Reservation | None) -> Any:
        """Render, then encode and mask when ``plan`` is given, else answer the texts. The reservation holds, beside
        the parsed body, the renders in progress and finished, then the encode's bound of the texts."""
        own = reservation is None
        if reservation is None:
            reservation = self.budget.reserve(0, "these conversations")
        base = reservation.nbytes
        in_progress = self._render_limits.in_progress_bytes()
        charge = RenderCharge(reservation, base + in_progress, "rendering these conversations")
        error = None
        try:
            try:
                return await self._render_and_encode(prepared, plan, reservation, base, charge)
            except ServiceError as exc:
                # a task keeps its exception in a cycle: the original's frames (the renderings) would wait for the GC
                error = exc.detached()
            raise error
        finally:
            charge.close()
            if own:
                reservation.release()

    async def _render_and_encode(
        self,
        prepared: PreparedChats,
        plan: EncodePlan | None,
        reservation: Reservation,
        base: int,
        charge: RenderCharge,
    ) -> Any:
        charge(0)  # the renders in progress, before any starts
        deadline = time.monotonic() + self._batcher.config.queue_timeout_seconds
        rendered = await self._renderer.render(prepared, RenderWatch(deadline, charge))
        charge.close()
        if plan is None:
            answer = rendered.utf8_bytes * self._bounds.costs.per_text_byte
            reservation.resize(base + rendered.held_bytes + answer, "these rendered conversations")
            return rendered.texts
        texts = rendered.texts
        work, bound = self._encode_work(texts, texts, None, plan)
        cost = base + bound.cost + rendered.held_bytes - held_bytes(texts)  # (the bound holds the texts)
        encoded = await self._submit(work, len(texts), rendered.chars, cost, reservation, "these conversations' encode")
        return await self._renderer.add_masks(encoded, rendered)

    def reserve_intake(self, body_bytes: int, *, body: BodyKind = BodyKind.TEXTS) -> Reservation:
        """Reserve memory for reading and parsing a request ``body`` of ``body_bytes`` before it is read, or refuse
        at once: UNAVAILABLE once stopping, OVERLOADED when the queue is full or the budget has no room now,
        TOO_LARGE when it never will. Pass it on to ``submit_*``; release it once the answer is sent."""
        self._check_accepting()
        return self._batcher.reserve_intake(self._bounds.costs.intake(body_bytes, body), "this request's body")

    def resize_intake(self, reservation: Reservation, body_bytes: int, *, body: BodyKind = BodyKind.TEXTS) -> None:
        """Grow an intake reservation while a body of unannounced length arrives (raises as above)."""
        reservation.resize(self._bounds.costs.intake(body_bytes, body), "this request's body")

    def _submit(
        self, work: Work, texts: int, chars: int, cost: int, reservation: Reservation | None, what: str
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        job = Job(
            work,
            texts,
            chars,
            work.call,
            future,
            cost=cost,
            reservation=reservation,
            what=what,
            alone=bool(work.slices),  # a sliced request never shares its Rust calls
        )
        return self._batcher.submit(job)

    async def _run_batch(self, batch: list[Job]) -> list[Any]:
        return await self._thread.run([job.payload for job in batch])

    def _encode_work(
        self, inputs: Sequence[Any], texts: Sequence[str], text_pairs: Sequence[str] | None, plan: EncodePlan
    ) -> tuple[EncodeWork, EncodeBound]:
        """An encode's work and bound (refused at once when padding alone makes the answer too large)."""
        limit = self._limits.max_response_tokens
        if plan.pad_target is not None and len(texts) * plan.pad_target > limit:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{len(texts)} texts padded to max_length={plan.pad_target} would hold over max_response_tokens="
                f"{limit} token positions; send fewer texts or a smaller max_length",
            )
        bound = self._bounds.encode(texts, text_pairs, plan)
        zero_type_ids = self._thread.zero_type_ids(text_pairs is not None, plan.add_special_tokens)
        return EncodeWork(inputs, plan, bound.slices, limit, zero_type_ids), bound

    def _plan(self, options: EncodeOptions) -> EncodePlan:
        """Resolved options, memoised: clients send the same few option sets over and over."""
        plan = self._plans.get(options)
        if plan is None:
            plan = plan_encode(self._facts, options)  # raises for refused options: those are not cached
            if plan.truncation is not None:
                check_stride(plan.truncation, self._bounds.specials[0])
            # Keyed by the client's options, so endless distinct ones must not grow it without end; real clients
            # send a handful, and a whole clear costs the hot path nothing, unlike an LRU's bookkeeping.
            if len(self._plans) >= 1024:
                self._plans.clear()
            self._plans[options] = plan
        return plan

    def _check_accepting(self) -> None:
        if self._stopping:
            raise ServiceError(
                ErrorKind.UNAVAILABLE, "the engine is stopping; retry on another replica", retry_after=1.0
            )

    def _inputs(self, texts: Sequence[str], text_pairs: Sequence[str] | None) -> tuple[Sequence[Any], int]:
        """Checked inputs for the Rust tokenizer (texts, or (text, pair) tuples) and their characters."""
        self._check_accepting()
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

    def _check_texts(self, texts: Sequence[str], field_name: str) -> None:
        if not texts:
            raise ServiceError(ErrorKind.INVALID_REQUEST, f"{field_name} must hold at least one text")
        limit = self._limits.max_texts_per_request
        if len(texts) > limit:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{field_name} holds {len(texts)} texts, over max_texts_per_request={limit}; split the batch",
            )
        max_chars = self._limits.max_text_chars
        if max(map(len, texts)) > max_chars:
            i, text = next((i, text) for i, text in enumerate(texts) if len(text) > max_chars)
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{field_name}[{i}] has {len(text)} characters, over max_text_chars={max_chars}; split it",
            )
