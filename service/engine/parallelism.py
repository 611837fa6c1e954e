"""Rust thread-pool sizing (from :func:`service.sizing.available_cpus`, shared with the launcher) and the
at-fork guard: one process keeps the rayon pool busy and never forks."""

from __future__ import annotations

import logging
import os
import threading

from ..sizing import available_cpus

__all__ = ["available_cpus", "configure_rust_parallelism", "parallelism_enabled", "ForkGuard"]

logger = logging.getLogger(__name__)


def configure_rust_parallelism(threads: int) -> None:
    """Turn the tokenizers' rayon pool on with ``threads`` workers: call it before the pool is first used."""
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    os.environ["RAYON_NUM_THREADS"] = str(threads)
    os.environ["RAYON_RS_NUM_CPUS"] = str(threads)  # older tokenizers releases read this name


def parallelism_enabled() -> bool:
    """Whether tokenizers will run its batch encodes on the rayon pool."""
    return os.environ.get("TOKENIZERS_PARALLELISM", "").lower() in {"1", "true", "yes", "on"}


class ForkGuard:
    """Counts and logs forks after the tokenizer is loaded. At-fork handlers cannot be removed: one guard, armed
    by each engine; its ``before`` hook runs in the parent, where ``/info`` reads the count."""

    _lock = threading.Lock()
    _registered = False
    _armed = 0
    forks_after_load = 0

    @classmethod
    def arm(cls) -> None:
        with cls._lock:
            if not cls._registered:
                os.register_at_fork(before=cls._on_fork)
                cls._registered = True
            cls._armed += 1

    @classmethod
    def disarm(cls) -> None:
        with cls._lock:
            cls._armed = max(0, cls._armed - 1)

    @classmethod
    def _on_fork(cls) -> None:
        if cls._armed:
            cls.forks_after_load += 1
            logger.error(
                "the serving process is forking after the tokenizer was loaded (fork #%d): the child "
                "inherits a Rust thread pool it cannot use; the service must run as one process",
                cls.forks_after_load,
            )
