"""A torch ``IterableDataset`` over a stream of documents, sharded over DataLoader workers and distributed ranks,
tokenized through the service as it goes, and resumable (docs/guides/streaming.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from .mapping import ChatTokenizeFunction, TokenizeFunction
from .sampling import distributed_world

__all__ = ["TokenizedStream"]


class TokenizedStream(IterableDataset[Any]):  # type: ignore[misc]  # torch is untyped here
    """``DataLoader(TokenizedStream(documents, client.tokenize_function(truncation=True)), num_workers=4, ...)``.

    Each document is read by one worker of one rank, in source order, ``batch_size`` per request, and yields one
    example: its tokenized columns, then its other fields. ``state_dict()``/``load_state_dict(state)`` resume each
    worker's shard, as ``StatefulDataLoader`` calls them (the order and resuming: the streaming guide).

    ``documents``: a sequence (indexed directly: resuming skips nothing) or any re-iterable (an object whose
    ``__iter__`` reads a file again each time; every shard reads it and keeps its own documents). Each document is a
    dict with the function's column (or a str: then it is the column). ``function``: a map function of
    :mod:`service.data` (or any ``batch -> columns`` giving one row per document); None yields the documents as they
    are. ``rank``/``world_size``: default torch.distributed's when it is initialized, else 0 and 1.
    """

    def __init__(
        self,
        documents: Iterable[Any],
        function: Callable[[dict[str, list[Any]]], Mapping[str, list[Any]]] | None = None,
        *,
        batch_size: int = 256,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, not {batch_size!r}")
        self.documents = documents
        self.function = function
        self.batch_size = batch_size
        if rank is None or world_size is None:
            world, me = distributed_world()
            rank = me if rank is None else rank
            world_size = world if world_size is None else world_size
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self.rank, self.world_size = rank, world_size
        self._start: dict[tuple[int, int], int] = {}
        self._position: dict[tuple[int, int], int] = {}

    def _shard(self) -> tuple[int, int, tuple[int, int]]:
        """(shard, shards, the key of this DataLoader worker's position)."""
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return self.rank * workers + worker, self.world_size * workers, (worker, workers)

    def _indexed(self, shard: int, shards: int, start: int) -> Iterator[tuple[int, Any]]:
        first = start + (shard - start) % shards  # the first index >= start that is this shard's
        documents = self.documents
        if isinstance(documents, Sized) and hasattr(documents, "__getitem__"):
            for index in range(first, len(documents), shards):
                yield index, documents[index]
        else:
            yield from itertools.islice(enumerate(documents), first, None, shards)

    def __iter__(self) -> Iterator[Any]:
        shard, shards, key = self._shard()
        start = self._start.pop(key, 0)
        self._position[key] = start
        indexed = self._indexed(shard, shards, start)
        while True:
            chunk = list(itertools.islice(indexed, self.batch_size))
            if not chunk:
                return
            examples = self._examples([document for _, document in chunk], [index for index, _ in chunk])
            for (index, _), example in zip(chunk, examples, strict=False):
                self._position[key] = index + 1
                yield example

    def _examples(self, documents: list[Any], indices: list[int]) -> list[Any]:
        if self.function is None:
            return documents
        column = getattr(self.function, "column", "text")
        rows = [document if isinstance(document, Mapping) else {column: document} for document in documents]
        batch = {name: [row.get(name) for row in rows] for name in rows[0]}
        for row, index in zip(rows, indices, strict=False):
            if set(row) != set(batch):
                raise ValueError(
                    f"document {index} has the fields {sorted(row)}, not those of its batch {sorted(batch)}"
                )
        if isinstance(self.function, (TokenizeFunction, ChatTokenizeFunction)):
            made = dict(self.function(batch, indices))  # errors name the document's index in the source
        else:
            made = dict(self.function(batch))
        for name, values in made.items():
            if len(values) != len(rows):
                raise ValueError(
                    f"the function gave {len(values)} rows of {name!r} for {len(rows)} documents: a stream yields one "
                    "example per document (no overflow rows)"
                )
        return [
            {**{name: values[i] for name, values in made.items()}, **{k: v for k, v in row.items() if k not in made}}
            for i, row in enumerate(rows)
        ]

    def state_dict(self) -> dict[str, Any]:
        """This shard's position (call it in the worker, as ``StatefulDataLoader`` does): the source index of its
        next document, and the layout it belongs to."""
        shard, shards, key = self._shard()
        position = self._position.get(key, self._start.get(key, 0))
        return {"position": position, "shard": [shard, shards]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Start this shard's next iteration at ``state`` (from :meth:`state_dict` of the same shard)."""
        shard, shards, key = self._shard()
        theirs = list(state["shard"])
        if theirs != [shard, shards]:
            raise ValueError(
                f"this state is shard {theirs[0]} of {theirs[1]}; this worker is shard {shard} "
                f"of {shards}: resume with the same ranks and num_workers"
            )
        self._start[key] = int(state["position"])
