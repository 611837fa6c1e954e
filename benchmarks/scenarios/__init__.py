"""The benchmark's scenarios, one module each declaring its :class:`~benchmarks.harness.Scenario` as ``SCENARIO``;
:data:`SCENARIOS` holds them in the order a run measures them (the ones that share the run's servers first).
"""

from __future__ import annotations

from benchmarks.harness import Scenario
from benchmarks.scenarios import (
    batch_sizes,
    chat,
    concurrency,
    cpu_split,
    dataloader,
    long_texts,
    padding,
    pretokenize,
    rss_soak,
    scaling,
)

SCENARIOS: dict[str, Scenario] = {
    module.SCENARIO.name: module.SCENARIO
    for module in (
        batch_sizes,
        long_texts,
        concurrency,
        rss_soak,
        pretokenize,
        dataloader,
        padding,
        chat,
        cpu_split,
        scaling,
    )
}
