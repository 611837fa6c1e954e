"""The tokenizer families the suites run on, and resources made per family on first use."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeVar

T = TypeVar("T")

#: The three tokenizer families every parity test runs on.
FAMILIES = ("wordpiece_default", "bytelevel_bpe", "sentencepiece")


class MadeOnUse(Mapping[str, T]):
    """family -> a resource made the first time it is asked for, so a run that selects one family (``-k``,
    the mutation check) waits for that one only. ``made()``: what exists, for the teardown."""

    def __init__(self, names: Iterable[str], make: Callable[[str], T]) -> None:
        self._names = tuple(names)
        self._make = make
        self._made: dict[str, T] = {}

    def __getitem__(self, name: str) -> T:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._made:
            self._made[name] = self._make(name)
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def made(self) -> list[T]:
        return list(self._made.values())
