"""``/info``: the tokenizer's facts, read once at start, beside the engine's limits, memory, queue and
parallelism as they are now."""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..wire import FINGERPRINT_SCHEME
from .batching import Batcher
from .loading import LoadedTokenizer, special_token_ids
from .memory import MemoryBudget
from .parallelism import ForkGuard, parallelism_enabled


def tokenizer_facts(loaded: LoadedTokenizer) -> dict[str, Any]:
    """What identifies the served tokenizer and how it is called, read once at start (Rust calls)."""
    tokenizer = loaded.tokenizer
    return {
        "source": loaded.source,
        "revision": loaded.revision,
        "fingerprint": loaded.fingerprint,
        "fingerprint_scheme": FINGERPRINT_SCHEME,
        "tokenizer_class": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "special_tokens": {name: str(token) for name, token in sorted(tokenizer.special_tokens_map.items())},
        "special_token_ids": special_token_ids(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "model_max_length": tokenizer.model_max_length,
        "padding_side": tokenizer.padding_side,
        "truncation_side": tokenizer.truncation_side,
        "model_input_names": list(tokenizer.model_input_names),
    }


def describe(
    facts: dict[str, Any], limits: dict[str, int], budget: MemoryBudget, batcher: Batcher, threads: int
) -> dict[str, Any]:
    """The ``/info`` document."""
    import tokenizers
    import transformers

    batching = batcher.config
    return {
        **facts,
        "limits": {**limits, "memory_budget_bytes": budget.capacity},
        "memory": {"budget_bytes": budget.capacity, "reserved_bytes": budget.in_use},
        "batching": {
            "enabled": batching.enabled,
            "max_wait_ms": batching.max_wait_seconds * 1000,
            "max_batch_texts": batching.max_batch_texts,
            "max_batch_chars": batching.max_batch_chars,
            "max_queued_requests": batching.max_queued_requests,
            "max_queued_texts": batching.max_queued_texts,
            "queue_timeout_seconds": batching.queue_timeout_seconds,
            "queued_requests": batcher.queued_requests,
            "queued_texts": batcher.queued_texts,
        },
        "parallelism": {
            "tokenizers_parallelism": parallelism_enabled(),
            "rust_threads": threads,
            "forks_after_load": ForkGuard.forks_after_load,
        },
        "versions": {
            "service": __version__,
            "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__,
        },
    }
