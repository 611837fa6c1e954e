"""A map-style dataset for DataLoader tests and benchmarks: every item says which text it is and which process
read it, so a test can compare each collated batch with the in-process tokenizer and see the worker processes.
Plain Python (a DataLoader needs only ``len`` and indexing): importing it loads no torch."""

from __future__ import annotations

import os
from typing import Any


class IndexedTexts:
    """Item ``i``: ``{"text": texts[i], "idx": i, "worker_pid": <reading process>}``, plus ``"label": i % labels``
    when ``labels`` is set."""

    def __init__(self, texts: list[str], labels: int | None = None) -> None:
        self.texts = texts
        self.labels = labels

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item: dict[str, Any] = {"text": self.texts[i]}
        if self.labels is not None:
            item["label"] = i % self.labels
        item.update(idx=i, worker_pid=os.getpid())
        return item
