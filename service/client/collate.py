"""A DataLoader ``collate_fn`` that tokenizes through the service.

The class lives at module level so spawned DataLoader workers can unpickle it; it holds a
:class:`~service.client.TokenizerClient`, which pickles without connections and opens its own in each
worker process. torch is imported only when a batch is collated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..wire import ENCODE_OPTIONS

__all__ = ["Collator"]


class Collator:
    """``collate_fn(batch) -> dict`` of int64 tensors, as ``tokenizer(texts, ..., return_tensors="pt")``.

    A batch is a list of ``str``, of ``(text, pair)`` tuples, or of dicts. For dicts, ``text_field`` (and
    ``pair_field``, if set) name the text(s); every other field is collated as
    ``torch.utils.data.default_collate`` would and added to the result (it must not reuse a key the
    tokenizer returns). ``options`` are the encode options; ``padding`` defaults to True.
    """

    def __init__(self, client: Any, *, text_field: str = "text", pair_field: str | None = None, **options: Any) -> None:
        unknown = set(options) - set(ENCODE_OPTIONS)
        if "return_tensors" in unknown:
            raise TypeError("a collator always returns torch tensors; return_tensors cannot be set")
        if unknown:
            raise TypeError(f"unknown encode option(s) {sorted(unknown)}; known: {sorted(ENCODE_OPTIONS)}")
        self.client = client
        self.text_field = text_field
        self.pair_field = pair_field
        self.options = {"padding": True, **options}

    def __call__(self, batch: Sequence[Any]) -> dict[str, Any]:
        if not batch:
            raise ValueError("cannot collate an empty batch")
        first = batch[0]
        extras: list[dict[str, Any]] | None = None
        if isinstance(first, str):
            texts, pairs = list(batch), None
        elif isinstance(first, (tuple, list)):
            if not all(isinstance(item, (tuple, list)) and len(item) == 2 for item in batch):
                raise TypeError("a batch of tuples must hold (text, pair) pairs; for other fields use dicts")
            texts, pairs = [item[0] for item in batch], [item[1] for item in batch]
        elif isinstance(first, Mapping):
            texts, pairs, extras = self._split_dicts(batch)
        else:
            raise TypeError(f"cannot collate a batch of {type(first).__name__}: expected str, (text, pair) or dict")
        encoded = dict(self.client.encode(texts, pairs, return_tensors="pt", **self.options))
        if extras and extras[0]:
            from torch.utils.data import default_collate

            collated = default_collate(extras)
            clash = set(collated) & set(encoded)
            if clash:
                raise ValueError(f"field(s) {sorted(clash)} clash with the tokenizer's output keys; rename them")
            encoded.update(collated)
        return encoded

    def _split_dicts(self, batch: Sequence[Any]) -> tuple[list[str], list[str] | None, list[dict[str, Any]]]:
        texts: list[str] = []
        pairs: list[str] | None = [] if self.pair_field is not None else None
        extras: list[dict[str, Any]] = []
        taken = {self.text_field, self.pair_field}
        for i, item in enumerate(batch):
            if not isinstance(item, Mapping):
                raise TypeError(f"batch[{i}] is a {type(item).__name__}; a batch must not mix dicts with other items")
            try:
                texts.append(item[self.text_field])
                if pairs is not None:
                    pairs.append(item[self.pair_field])
            except KeyError as exc:
                raise KeyError(
                    f"batch[{i}] has no field {exc.args[0]!r} (fields: {sorted(item)}); "
                    "set text_field=/pair_field= on the collator"
                ) from None
            extras.append({k: v for k, v in item.items() if k not in taken})
        return texts, pairs, extras

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"Collator({self.client!r}, text_field={self.text_field!r}, pair_field={self.pair_field!r}, {options})"
