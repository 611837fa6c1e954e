"""Prometheus metrics: one registry per app, so several apps in one process (tests) never collide."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: This process's Python threads' CPU seconds (its GIL side), read at each scrape.
PYTHON_CPU_METRIC = "tokenizer_python_threads_cpu_seconds"
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class Metrics:
    """Counters and histograms for /metrics; also the engine's :class:`~service.engine.batching.BatchObserver`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tokenizer_requests", "HTTP requests by route and status", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "tokenizer_request_seconds", "HTTP request latency", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.texts = Counter("tokenizer_texts_encoded", "Texts (or pairs) encoded", registry=r)
        self.tokens = Counter("tokenizer_tokens_encoded", "Real (unpadded) tokens encoded", registry=r)
        self.batch_requests = Histogram(
            "tokenizer_batch_requests", "Requests per engine batch", buckets=BATCH_SIZE_BUCKETS, registry=r
        )
        self.batch_texts = Histogram(
            "tokenizer_batch_texts", "Texts per engine batch", buckets=BATCH_SIZE_BUCKETS, registry=r
        )
        self.encode_seconds = Histogram(
            "tokenizer_encode_seconds", "Engine time per batch (encode + shaping)", buckets=LATENCY_BUCKETS, registry=r
        )
        self.queue_requests = Gauge("tokenizer_queue_requests", "Requests waiting for the engine", registry=r)
        self.queue_texts = Gauge("tokenizer_queue_texts", "Texts waiting for the engine", registry=r)
        self.rejected = Counter("tokenizer_rejected", "Requests refused by backpressure", ["reason"], registry=r)
        self.dropped = Counter("tokenizer_dropped", "Requests dropped because their client went away", registry=r)
        self.memory_reserved = Gauge(
            "tokenizer_memory_reserved_bytes", "Memory reserved by in-flight requests (bounds)", registry=r
        )
        self.memory_budget = Gauge("tokenizer_memory_budget_bytes", "The memory budget", registry=r)
        self.forks = Gauge("tokenizer_forks_after_load", "Forks of the serving process after loading", registry=r)
        Gauge(
            PYTHON_CPU_METRIC,
            "CPU seconds of this process's live Python threads (the event loop, the tokenizer thread...): its GIL "
            "side, which caps one process at 1 / (this per batch) batches a second; the rest of the process's CPU "
            "is the Rust pool's. tokenizer-service calibrate reads it",
            registry=r,
        ).set_function(python_threads_cpu_seconds)  # read at each scrape: no cost per request

    def batch_done(self, requests: int, texts: int, seconds: float) -> None:
        self.batch_requests.observe(requests)
        self.batch_texts.observe(texts)
        self.encode_seconds.observe(seconds)

    def request_rejected(self, reason: str) -> None:
        self.rejected.labels(reason).inc()

    def request_dropped(self) -> None:
        self.dropped.inc()

    def queue_changed(self, requests: int, texts: int) -> None:
        self.queue_requests.set(requests)
        self.queue_texts.set(texts)

    def memory_changed(self, in_use: int) -> None:
        self.memory_reserved.set(in_use)

    def track_in_flight(self, count: Callable[[], float]) -> None:
        """Export ``count()`` at each scrape: no cost per request."""
        Gauge(
            "tokenizer_http_in_flight", "HTTP requests being answered now, this scrape included", registry=self.registry
        ).set_function(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def python_threads_cpu_seconds() -> float:
    """The CPU seconds of every live Python thread of this process, each read from its own clock."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, AttributeError):  # a thread that just ended; a system without thread CPU clocks
            continue
    return total
