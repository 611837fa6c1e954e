"""The timed loop both sides of a one-client comparison run: the in-process worker (``benchmarks.inprocess``)
and the client that measures the service (``benchmarks.service_client``), so both count alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def time_batches(
    encode: Callable[[list[str]], object], batches: list[list[str]], tokens: list[int], seconds: float, max_batches: int
) -> dict[str, Any]:
    """Call ``encode`` on ``batches`` in turn until ``seconds`` have passed or ``max_batches`` calls were made.

    ``tokens[i]`` is the real (unpadded) token count of ``batches[i]``. Returns the calls made, the texts and
    tokens they covered, the elapsed seconds and the latency of every call.
    """
    done = texts = real_tokens = 0
    latencies: list[float] = []
    start = time.perf_counter()
    while True:
        i = done % len(batches)
        t0 = time.perf_counter()
        encode(batches[i])
        latencies.append(time.perf_counter() - t0)
        done += 1
        texts += len(batches[i])
        real_tokens += tokens[i]
        elapsed = time.perf_counter() - start
        if elapsed >= seconds or done >= max_batches:
            break
    return {"batches": done, "texts": texts, "tokens": real_tokens, "seconds": elapsed, "latencies": latencies}
