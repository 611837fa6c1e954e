"""Map-style datasets for DataLoader tests and benchmarks: every item says which text (or conversation) it is and
which process read it, so a test can compare each collated batch with the in-process tokenizer and see the worker
processes.
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


class IndexedConversations:
    """Item ``i``: ``{"messages": conversations[i], "idx": i, "worker_pid": <reading process>}`` -- a chat dataset
    as TRL reads one (a messages field), plus what a test needs to check each batch."""

    def __init__(self, conversations: list[list[dict[str, Any]]]) -> None:
        self.conversations = conversations

    def __len__(self) -> int:
        return len(self.conversations)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"messages": self.conversations[i], "idx": i, "worker_pid": os.getpid()}
