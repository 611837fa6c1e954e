"""The benchmark's scenarios, one module each, every one written on :mod:`benchmarks.harness` and declaring its
:class:`~benchmarks.harness.Scenario` as ``SCENARIO``; :data:`SCENARIOS` holds them in the order a run measures
them (the ones that share the run's servers first). :mod:`~benchmarks.scenarios.measuring` holds what the
one-client scenarios share: the text sets, the shared worker and server, the timed loop.
"""

from __future__ import annotations

from benchmarks.harness import Scenario
from benchmarks.scenarios import (
    batch_sizes,
    chat,
    concurrency,
    cpu_split,
    dataloader,
    datasets,
    hot_path,
    launch,
    long_texts,
    object_storage,
    padding,
    pretokenize,
    rss_soak,
    scaling,
    train,
)

SCENARIOS: dict[str, Scenario] = {
    module.SCENARIO.name: module.SCENARIO
    for module in (
        batch_sizes,
        long_texts,
        concurrency,
        rss_soak,
        pretokenize,
        object_storage,
        dataloader,
        padding,
        chat,
        cpu_split,
        scaling,
        launch,
        train,
        datasets,
        hot_path,
    )
}
