"""The functions of ``datasets.Dataset.map(function, batched=True)`` (and of a streaming ``IterableDataset.map``) that
tokenize through the service: the columns the in-process tokenizer gives, with datasets' cache keyed on what
determines them (docs/guides/datasets.md).

datasets keys a ``map`` by the pickle of its function (its own dill ``Pickler``); a client pickles with its URL, so
the hash would follow where the service is, not what it serves. So these functions register with that pickler only
a form made of the served tokenizer's fingerprint (asked at hashing time), the column and the options -- never the
URL or a socket path. Workers still receive the whole function (ordinary pickling).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from ..suggestions import check_options, keyword_only_parameters
from ..wire import ChatOptions, EncodeOptions, changed_options
from .protocol import SFT_CHAT_OPTIONS, TokenizerLike
from .sft import sft_labels

__all__ = ["TokenizeFunction", "ChatTokenizeFunction", "MapInputError"]

#: Columns of a conversation dataset that TRL reads per row and these functions do not (they take one value for every
#: row): refused rather than silently ignored.
PER_ROW_CHAT_COLUMNS = ("tools", "chat_template_kwargs")


class MapInputError(ValueError):
    """A batch the map function cannot tokenize as asked: the message names the column and the row."""


def _where(row: int, indices: Sequence[int] | None) -> str:
    if indices is not None:
        return f"row {indices[row]}"
    return f"row {row} of the batch (pass with_indices=True to map for the dataset's row)"


def column_values(
    batch: Mapping[str, Any], column: str, indices: Sequence[int] | None, conversations: bool = False
) -> list[Any]:
    """The values of ``column`` in a batch of ``map(batched=True)``: strings (None, numbers and lists are refused,
    never coerced), or ``conversations`` (non-empty lists of message mappings); a missing column and an empty batch
    are refused too."""
    if column not in batch:
        raise MapInputError(f"column {column!r} is not in the dataset; its columns are {sorted(batch)}")
    values = list(batch[column])
    if not values:
        raise MapInputError(f"column {column!r}: the dataset (or this batch) is empty, there is nothing to tokenize")
    for row, value in enumerate(values):
        if conversations:
            valid = isinstance(value, list) and bool(value) and all(isinstance(m, Mapping) for m in value)
            what = "a conversation (a non-empty list of messages: dicts with role and content)"
        else:
            valid, what = isinstance(value, str), "a string"
        if not valid:
            raise MapInputError(
                f"column {column!r}, {_where(row, indices)}: {type(value).__name__} {value!r:.80} is not {what}"
            )
    return values


class _CachedByIdentity:
    """What both functions share: the client, the column, the options sent, and the form datasets' cache hashes."""

    def __init__(self, client: TokenizerLike, column: str, options: Any) -> None:
        self.client = client
        self.column = column
        self.options = changed_options(options)  # validated as the client validates them
        register_cache_identity(type(self))

    def cache_identity(self) -> dict[str, Any]:
        """What determines this function's output: the served tokenizer's fingerprint (asked of the service now),
        the function's kind and its settings. Never the URL."""
        return {"fingerprint": self.client.info()["fingerprint"], "kind": type(self).__qualname__, **self._settings()}

    def map(self, dataset: Any, **map_kwargs: Any) -> Any:
        """``dataset.map(self, batched=True, with_indices=True, **map_kwargs)`` (a ``datasets.Dataset`` or a streaming
        ``IterableDataset``), after refusing an empty dataset and a missing column, which ``dataset.map`` lets through
        (it never calls a function on an empty dataset). Errors name the dataset's row."""
        names = getattr(dataset, "column_names", None)
        if names is not None and self.column not in names:
            raise MapInputError(f"column {self.column!r} is not in the dataset; its columns are {sorted(names)}")
        if hasattr(dataset, "__len__") and len(dataset) == 0:
            raise MapInputError(f"column {self.column!r}: the dataset is empty, there is nothing to tokenize")
        return dataset.map(self, batched=True, with_indices=True, **map_kwargs)

    def _settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def __repr__(self) -> str:
        settings = ", ".join(f"{name}={value!r}" for name, value in self._settings().items())
        return f"{type(self).__name__}({self.client!r}, {settings})"


class TokenizeFunction(_CachedByIdentity):
    """``dataset.map(TokenizeFunction(client, "text", truncation=True, max_length=512), batched=True, num_proc=4)``:
    the columns ``tokenizer(batch["text"], truncation=True, max_length=512)`` gives in-process (the same keys, values
    and Arrow features), computed by the service; ``client.tokenize_function(...)`` makes one. ``pair_column`` names
    the pairs' second texts; ``options``: :meth:`TokenizerClient.encode`'s but ``return_tensors``. Takes
    ``with_indices=True`` (the dataset's row numbers in errors). Picklable: each map worker opens its connections."""

    def __init__(
        self, client: TokenizerLike, column: str = "text", *, pair_column: str | None = None, **options: Any
    ) -> None:
        settings = keyword_only_parameters(TokenizeFunction.__init__)
        check_options("TokenizeFunction()", options, [*settings, *(option.name for option in fields(EncodeOptions))])
        self.pair_column = pair_column
        super().__init__(client, column, EncodeOptions(**options))

    def _settings(self) -> dict[str, Any]:
        return {"column": self.column, "pair_column": self.pair_column, "options": self.options}

    def __call__(self, batch: Mapping[str, Any], indices: Sequence[int] | None = None) -> dict[str, Any]:
        texts = column_values(batch, self.column, indices)
        pairs = column_values(batch, self.pair_column, indices) if self.pair_column is not None else None
        columns: dict[str, Any] = self.client.encode_ragged(texts, pairs, **self.options).tolist()
        return columns


class ChatTokenizeFunction(_CachedByIdentity):
    """``dataset.map(ChatTokenizeFunction(client), batched=True)``: a ``messages`` column of conversations ->
    ``input_ids`` and, with ``assistant_only_loss`` (default, as TRL's), ``assistant_masks``: what TRL's
    ``SFTTrainer`` computes when it tokenizes a conversational dataset, so it takes the result as already tokenized
    (and builds ``labels`` from the masks). ``labels=True`` builds them here, as TRL does (the id where the mask is
    1, else -100; the masks dropped). ``client.chat_tokenize_function`` makes one.

    ``chat_options``: ``tools``, ``documents``, ``chat_template`` (a name), ``chat_template_kwargs``,
    ``assistant_masks_from``, ``truncation``, ``max_length``, one value for every row (a ``tools`` or
    ``chat_template_kwargs`` column, which TRL reads per row, is refused). As in TRL, a conversation with no assistant
    token under ``assistant_only_loss`` is an error (its template lacks generation markers)."""

    def __init__(
        self,
        client: TokenizerLike,
        column: str = "messages",
        *,
        assistant_only_loss: bool = True,
        labels: bool = False,
        **chat_options: Any,
    ) -> None:
        settings = keyword_only_parameters(ChatTokenizeFunction.__init__)
        check_options("ChatTokenizeFunction()", chat_options, [*settings, *SFT_CHAT_OPTIONS])
        self.assistant_only_loss = assistant_only_loss
        self.labels = labels
        super().__init__(client, column, ChatOptions(return_assistant_tokens_mask=assistant_only_loss, **chat_options))

    def _settings(self) -> dict[str, Any]:
        return {"column": self.column, "labels": self.labels, "options": self.options}

    def __call__(self, batch: Mapping[str, Any], indices: Sequence[int] | None = None) -> dict[str, Any]:
        per_row = [name for name in PER_ROW_CHAT_COLUMNS if name in batch]
        if per_row:
            raise MapInputError(
                f"columns {per_row} hold per-row chat options, which this function does not read: give one value for "
                "every row as an option, or remove the columns"
            )
        conversations = column_values(batch, self.column, indices, conversations=True)
        rows = self.client.chat_encode_ragged(conversations, **self.options).tolist()
        columns: dict[str, Any] = {"input_ids": rows["input_ids"]}
        if self.assistant_only_loss:
            masks = rows["assistant_masks"]
            for row, mask in enumerate(masks):
                if 1 not in mask:
                    raise MapInputError(
                        f"column {self.column!r}, {_where(row, indices)}: no token is the assistant's, so no token "
                        "counts toward the loss (the template may lack {% generation %} markers: pass "
                        "assistant_masks_from='turns', or assistant_only_loss=False)"
                    )
            columns["assistant_masks"] = masks
        if self.labels:
            masks = columns.pop("assistant_masks", [None] * len(rows["input_ids"]))
            columns["labels"] = [
                sft_labels(ids, mask, assistant_only_loss=self.assistant_only_loss).tolist()
                for ids, mask in zip(columns["input_ids"], masks, strict=False)
            ]
        return columns


def identity_of(kind: str, identity: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What a function's hash is made of in datasets' cache (never called: it only names the form)."""
    return kind, identity


def _save_identity(pickler: Any, obj: _CachedByIdentity) -> None:
    pickler.save_reduce(identity_of, (type(obj).__qualname__, obj.cache_identity()), obj=obj)


def register_cache_identity(function_type: type[_CachedByIdentity]) -> None:
    """Have datasets' hashing pickler save ``function_type`` as its cache identity (its extension point: datasets
    registers tokenizers, regexes and tensors the same way). Without datasets, nothing to do; were that module to
    move in a later datasets, the ordinary pickle (URL included) would key the cache: misses, never stale hits."""
    try:  # (importing datasets costs nothing extra: the map this function is made for imports it anyway)
        from datasets.utils._dill import Pickler, pklregister
    except ImportError:
        return
    if function_type not in Pickler.dispatch:
        pklregister(function_type)(_save_identity)
