"""What tests and benchmarks read of the engine that the service itself never asks for.

The engine's public surface is what the web layer uses; these hooks reach its inner parts for tests that
check them (the memory bounds, the queue) and for the hot-path benchmark, in one place, so the service
carries no public API for them.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from service.engine import EncodedBatch, EncodeOptions, Engine
from service.engine.bounds import EncodeBound
from service.engine.encoding import EncodePlan, TokenizerFacts, extract_rows, plan_encode, shape_rows
from service.engine.memory import BUDGET_SHARE_OF_LIMIT, RESTING_MEMORY


def encode_bound(
    engine: Engine,
    texts: Sequence[str],
    text_pairs: Sequence[str] | None = None,
    options: EncodeOptions = EncodeOptions(),
) -> EncodeBound:
    """What admission reserves for this encode (without encoding it): its bounds, memory cost and slices."""
    return engine._bounds.encode(texts, text_pairs, plan_encode(engine._facts, options))


def tokenizer_facts(engine: Engine) -> TokenizerFacts:
    """What option resolution reads from the engine's tokenizer (read once at load)."""
    return engine._facts


def queued_requests(engine: Engine) -> int:
    """Requests waiting in the engine's queue now."""
    return engine._batcher.queued_requests


def hold_render_thread(engine: Engine) -> threading.Event:
    """Occupy the engine's chat render thread until the returned event is set (renders queue behind it)."""
    release = threading.Event()
    executor = engine._renderer._executor
    assert executor is not None, "the engine is not started"
    executor.submit(release.wait, 60)
    return release


def pending_renders(engine: Engine) -> int:
    """Renders waiting for the chat render thread (not yet started, nor withdrawn)."""
    return engine._renderer.waiting


def memory_limit_for_budget(budget: int) -> int:
    """The smallest container memory limit whose default budget (``default_memory_budget``) is ``budget``:
    what a pod needs, as the manifests are checked against."""
    return RESTING_MEMORY + math.ceil(budget / BUDGET_SHARE_OF_LIMIT)


def build_batch(encodings: Sequence[Any], plan: EncodePlan, max_response_tokens: int) -> EncodedBatch:
    """Shape one request's Rust encodings (one per input text or pair) into what transformers returns, as
    the engine does for a request encoded at once."""
    return shape_rows(extract_rows(encodings, plan), plan, max_response_tokens)


def to_lists(batch: EncodedBatch) -> dict[str, Any]:
    """An encode result as plain Python lists, as a transformers BatchEncoding holds them."""
    return {key: _as_lists(value) for key, value in batch.data.items()}


def _as_lists(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [_as_lists(v) for v in value]
    return value


class EngineRunner:
    """An :class:`~service.engine.Engine` on its own event loop thread, callable from sync tests."""

    def __init__(self, source: Any, **engine_kwargs: Any) -> None:
        """``source``: what load_tokenizer takes (None: the embedded default), or a LoadedTokenizer."""
        from service.engine import Engine, LoadedTokenizer
        from service.engine.loading import load_tokenizer

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        loaded = source if isinstance(source, LoadedTokenizer) else load_tokenizer(source)
        self.engine = Engine(loaded, threads=2, **engine_kwargs)
        self.run(self.engine.astart())

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def result(self, submit: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``await submit(*args, **kwargs)`` on the engine's loop (``submit``: an ``engine.submit_*``)."""

        async def submitted() -> Any:
            return await submit(*args, **kwargs)

        return self.run(submitted())

    def close(self) -> None:
        self.run(self.engine.astop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
