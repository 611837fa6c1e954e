"""Supervised fine-tuning batches from encoded conversations, exactly as TRL's SFT trainer makes them.

TRL (1.x) turns a tokenized conversation into ``labels`` when it prepares its dataset -- the input id where the
token counts toward the loss (``assistant_masks`` is 1, with ``assistant_only_loss``), else -100 -- and its
``DataCollatorForLanguageModeling`` then pads the rows. :func:`collate_sft` does both in one step, from the rows
``/chat/encode`` answers (``input_ids`` and ``assistant_masks`` of each conversation, unpadded), with the keys,
order, dtypes and values that collator gives:

- padded (default): ``input_ids`` (padded with ``pad_token_id``), ``labels`` (-100 on padding), ``position_ids``
  (with ``return_position_ids``), ``attention_mask``; ``[rows, longest]`` rounded up to ``pad_to_multiple_of``.
  ``padding_side`` may also be ``"left"`` (TRL's collator always pads right; its ``pad`` helper is the oracle).
- ``padding_free=True``: the rows concatenated into one, without an attention mask: ``input_ids``, ``labels`` (each
  conversation's first token -100: no token is predicted across a boundary), ``position_ids`` restarting at 0,
  then flash-attention's ``cu_seq_lens_q``/``cu_seq_lens_k`` (int32, one tensor under both names, as TRL gives it),
  ``max_length_q``/``max_length_k`` (Python ints) and ``seq_idx`` (int32). A row padded to ``pad_to_multiple_of``
  counts, as in TRL, each padding position as a sequence of its own.

A conversation that encodes to no tokens stays int64 here (TRL would make its whole batch float). Pure logic on
numpy; torch is imported only when tensors are returned. Other fields of dict rows are collated as
``torch.utils.data.default_collate`` does (:func:`collate_fields`).

:class:`ChatCollator` is the DataLoader ``collate_fn`` made of these (``client.chat_collator(...)``): each batch's
conversations are encoded by the service (``/chat/encode``, ragged binary: ids and masks, no padding, no JSON),
then collated here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from ..wire import CHAT_OPTIONS, LENGTHS_BATCH_TEXTS

if TYPE_CHECKING:
    from .sampling import TokenBudgetBatchSampler

__all__ = [
    "SFT_OPTIONS",
    "IGNORE_INDEX",
    "ChatCollator",
    "sft_labels",
    "collate_sft",
    "split_conversations",
    "collate_fields",
]

#: The label of a token that does not count toward the loss (PyTorch's cross-entropy ``ignore_index``).
IGNORE_INDEX: Final = -100
#: :func:`collate_sft`'s options and defaults: TRL's ``assistant_only_loss`` and its collator's.
SFT_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "assistant_only_loss": True,
        "padding_free": False,
        "pad_to_multiple_of": None,
        "padding_side": "right",
        "return_position_ids": False,
    }
)


def sft_labels(
    input_ids: Sequence[int] | np.ndarray,
    assistant_masks: Sequence[int] | np.ndarray | None = None,
    *,
    assistant_only_loss: bool = True,
) -> np.ndarray:
    """One conversation's labels: its ids where the assistant wrote the token, else -100 (with
    ``assistant_only_loss``); every id otherwise."""
    ids: np.ndarray = np.array(input_ids, dtype=np.int64)  # a copy: the labels are the caller's to change
    if not assistant_only_loss:
        return ids
    if assistant_masks is None:
        raise ValueError(
            "assistant_only_loss needs each row's assistant_masks: encode with return_assistant_tokens_mask=True"
        )
    mask = np.asarray(assistant_masks, dtype=np.int64)
    if mask.shape != ids.shape:
        raise ValueError(f"assistant_masks has {mask.size} values for {ids.size} input_ids")
    return np.where(mask != 0, ids, IGNORE_INDEX)


def collate_sft(
    rows: Sequence[Mapping[str, Any]],
    *,
    pad_token_id: int,
    assistant_only_loss: bool = True,
    padding_free: bool = False,
    pad_to_multiple_of: int | None = None,
    padding_side: str = "right",
    return_position_ids: bool = False,
    return_tensors: str = "pt",
) -> dict[str, Any]:
    """A training batch from conversations' ``input_ids`` (and ``assistant_masks``), as TRL's SFT trainer makes it
    (module docstring). ``return_tensors``: ``"pt"`` (torch tensors) or ``"np"``."""
    if not rows:
        raise ValueError("cannot collate an empty batch")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
    if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
        raise ValueError("pad_to_multiple_of must be a positive integer")
    if return_tensors not in ("pt", "np"):
        raise ValueError(f"return_tensors must be 'pt' or 'np', not {return_tensors!r}")
    ids: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    for i, row in enumerate(rows):
        if "input_ids" not in row:
            raise ValueError(f"row {i} has no input_ids")
        try:
            labels.append(
                sft_labels(row["input_ids"], row.get("assistant_masks"), assistant_only_loss=assistant_only_loss)
            )
        except ValueError as exc:
            raise ValueError(f"row {i}: {exc}") from None
        ids.append(np.asarray(row["input_ids"], dtype=np.int64))
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    if padding_free:
        batch = _padding_free(ids, labels, lengths, pad_token_id, pad_to_multiple_of)
    else:
        batch = _padded(ids, labels, lengths, pad_token_id, pad_to_multiple_of, padding_side == "left")
        if not return_position_ids:
            del batch["position_ids"]
        batch["attention_mask"] = batch.pop("attention_mask")  # last, as TRL orders it
    return _as_tensors(batch) if return_tensors == "pt" else batch


def _round_up(width: int, multiple: int | None) -> int:
    if multiple and width % multiple:
        width += multiple - width % multiple
    return width


def _padded(
    ids: list[np.ndarray],
    labels: list[np.ndarray],
    lengths: np.ndarray,
    pad_token_id: int,
    multiple: int | None,
    left: bool,
) -> dict[str, Any]:
    width = _round_up(int(lengths.max()), multiple)
    columns = np.arange(width)
    real = columns >= (width - lengths)[:, None] if left else columns < lengths[:, None]

    def fill(rows: list[np.ndarray], pad_value: int) -> np.ndarray:
        out = np.full((len(rows), width), pad_value, dtype=np.int64)
        out[real] = np.concatenate(rows) if rows else []
        return out

    positions = [np.arange(n, dtype=np.int64) for n in lengths.tolist()]
    return {
        "input_ids": fill(ids, pad_token_id),
        "labels": fill(labels, IGNORE_INDEX),
        "position_ids": fill(positions, 0),
        "attention_mask": real.astype(np.int64),
    }


def _padding_free(
    ids: list[np.ndarray], labels: list[np.ndarray], lengths: np.ndarray, pad_token_id: int, multiple: int | None
) -> dict[str, Any]:
    total = int(lengths.sum())
    if total == 0:
        raise ValueError("every conversation of this batch encodes to no tokens: a padding-free row would be empty")
    width = _round_up(total, multiple)
    starts = np.cumsum(lengths) - lengths
    input_ids = np.full(width, pad_token_id, dtype=np.int64)
    input_ids[:total] = np.concatenate(ids)
    label_row = np.full(width, IGNORE_INDEX, dtype=np.int64)
    label_row[:total] = np.concatenate(labels)
    positions = np.zeros(width, dtype=np.int64)
    positions[:total] = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    label_row[positions == 0] = IGNORE_INDEX  # each sequence's first token (and the padding)
    boundaries = np.concatenate([np.flatnonzero(positions == 0), [width]]).astype(np.int32)
    spans = np.diff(boundaries)
    return {
        "input_ids": input_ids[None],
        "labels": label_row[None],
        "position_ids": positions[None],
        "cu_seq_lens_q": boundaries,
        "cu_seq_lens_k": boundaries,
        "max_length_q": int(spans.max()),
        "max_length_k": int(spans.max()),
        "seq_idx": np.repeat(np.arange(len(spans), dtype=np.int32), spans)[None],
    }


def _as_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    import torch

    tensors: dict[str, Any] = {}
    made: dict[int, Any] = {}  # an array under two names is one tensor under two names
    for key, value in batch.items():
        if isinstance(value, np.ndarray):
            if id(value) not in made:
                made[id(value)] = torch.from_numpy(np.ascontiguousarray(value))
            tensors[key] = made[id(value)]
        else:
            tensors[key] = value
    return tensors


def split_conversations(
    batch: Sequence[Any], messages_field: str = "messages"
) -> tuple[list[Any], list[dict[str, Any]]]:
    """(the conversations, the other fields of each row) of a batch of dict rows, or of bare conversations."""
    conversations: list[Any] = []
    others: list[dict[str, Any]] = []
    for i, row in enumerate(batch):
        if isinstance(row, Mapping):
            if messages_field not in row:
                raise KeyError(
                    f"batch[{i}] has no field {messages_field!r} (fields: {sorted(row)}); set messages_field="
                )
            conversations.append(row[messages_field])
            others.append({key: value for key, value in row.items() if key != messages_field})
        elif isinstance(row, Sequence) and not isinstance(row, (str, bytes)):
            conversations.append(row)
            others.append({})
        else:
            raise TypeError(f"batch[{i}] is a {type(row).__name__}: expected a dict row or a list of messages")
    return conversations, others


def collate_fields(others: Sequence[Mapping[str, Any]], taken: Sequence[str] = ()) -> dict[str, Any]:
    """The other fields of the rows, collated as ``torch.utils.data.default_collate`` does (none: empty); a field
    named like a key of the batch (``taken``) is refused."""
    if not others or not others[0]:
        return {}
    clash = sorted(set(others[0]).intersection(taken))
    if clash:
        raise ValueError(f"field(s) {clash} clash with the collator's output keys; rename them")
    from torch.utils.data import default_collate

    collated: dict[str, Any] = default_collate(list(others))
    return collated


#: The chat options a chat collator takes (those of TRL's tokenize step); the others are the collator's own doing:
#: it encodes without padding and pads itself, and asks for masks when the loss is the assistant's only.
COLLATOR_CHAT_OPTIONS: Final = (
    "tools",
    "documents",
    "chat_template",
    "chat_template_kwargs",
    "assistant_masks_from",
    "truncation",
    "max_length",
)


class ChatCollator:
    """``collate_fn(batch) -> dict`` of tensors for supervised fine-tuning on conversations: what TRL's
    ``SFTTrainer`` makes of them (its dataset preparation, then ``DataCollatorForLanguageModeling``), with the
    tokenizing done by the service.

    A batch is a list of dict rows whose ``messages_field`` holds a conversation (a list of messages), or of bare
    conversations; every other field of the rows is collated as ``default_collate`` does and added to the result.
    Each batch's conversations are encoded by ``/chat/encode`` in one request (ragged binary: ids and, with
    ``assistant_only_loss``, masks), then :func:`collate_sft` makes ``input_ids``, ``labels`` (-100 where the token
    does not count, and on padding) and ``attention_mask``, or with ``padding_free=True`` one row with
    ``position_ids`` and flash-attention's boundaries.

    ``chat_options``: those of TRL's tokenize step (:data:`COLLATOR_CHAT_OPTIONS`): ``tools``, ``documents``,
    ``chat_template`` (a name), ``chat_template_kwargs``, ``assistant_masks_from``, and ``truncation`` with
    ``max_length`` (TRL's ``max_length``, which keeps each conversation's start: the same tokens). ``pad_token_id``:
    default the served tokenizer's pad token, else its eos token (as TRL), read from ``/info`` once per process.
    """

    def __init__(
        self,
        client: Any,
        *,
        messages_field: str = "messages",
        pad_token_id: int | None = None,
        assistant_only_loss: bool = True,
        padding_free: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str = "right",
        return_position_ids: bool = False,
        **chat_options: Any,
    ) -> None:
        unknown = set(chat_options) - set(COLLATOR_CHAT_OPTIONS)
        if unknown:
            known = set(CHAT_OPTIONS)
            why = (
                "the collator encodes without padding and pads each batch itself, and asks for assistant masks "
                "when assistant_only_loss is set"
                if unknown <= known
                else "unknown option(s)"
            )
            raise TypeError(f"{sorted(unknown)}: {why}; the chat options it takes are {list(COLLATOR_CHAT_OPTIONS)}")
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
        if pad_to_multiple_of is not None and (isinstance(pad_to_multiple_of, bool) or pad_to_multiple_of < 1):
            raise ValueError("pad_to_multiple_of must be a positive integer")
        self.client = client
        self.messages_field = messages_field
        self.pad_token_id = pad_token_id
        self.sft_options: dict[str, Any] = {
            "assistant_only_loss": bool(assistant_only_loss),
            "padding_free": bool(padding_free),
            "pad_to_multiple_of": pad_to_multiple_of,
            "padding_side": padding_side,
            "return_position_ids": bool(return_position_ids),
        }
        self.chat_options = dict(chat_options)

    def __call__(self, batch: Sequence[Any]) -> dict[str, Any]:
        if not batch:
            raise ValueError("cannot collate an empty batch")
        conversations, others = split_conversations(batch, self.messages_field)
        masks = self.sft_options["assistant_only_loss"]
        encoded = self.client.chat_encode_ragged(
            conversations, return_assistant_tokens_mask=masks, return_attention_mask=False, **self.chat_options
        )
        ids = encoded.rows("input_ids")
        rows: list[dict[str, Any]] = [{"input_ids": row} for row in ids]
        if masks:
            for row, mask in zip(rows, encoded.rows("assistant_masks"), strict=True):
                row["assistant_masks"] = mask
        collated = collate_sft(rows, pad_token_id=self._pad_token_id(), **self.sft_options)
        collated.update(collate_fields(others, taken=list(collated)))
        return collated

    def _pad_token_id(self) -> int:
        if self.pad_token_id is None:
            info = self.client.info()
            pad = info.get("pad_token_id")
            if pad is None:
                pad = info.get("special_token_ids", {}).get("eos_token")
            if pad is None:
                raise ValueError(
                    "the served tokenizer has neither a pad token nor an eos token: pass pad_token_id= to the collator"
                )
            self.pad_token_id = int(pad)
        return self.pad_token_id

    def batch_sampler(
        self,
        dataset: Any,
        *,
        max_tokens: int,
        batch_size: int = LENGTHS_BATCH_TEXTS,
        share_counting: bool = True,
        **sampler_options: Any,
    ) -> TokenBudgetBatchSampler:
        """A :class:`~service.client.TokenBudgetBatchSampler` for ``dataset`` and this collator, as
        :meth:`service.client.Collator.batch_sampler` makes one: every item's conversation is counted through the
        service once (``batch_size`` per request, with this collator's chat options, truncation included), each
        rank its share in a ``torch.distributed`` job; batches are bounded by rows x longest (rounded up to
        ``pad_to_multiple_of``), or with ``padding_free`` by the sum of their lengths."""
        from .sampling import TokenBudgetBatchSampler, count_across_ranks

        for name in ("packing", "pad_to_multiple_of", "max_length", "dataset"):
            if name in sampler_options:
                raise TypeError(f"{name} follows the collator (and the dataset) here; set it on the collator")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, not {batch_size!r}")
        counted = {**self.chat_options, "return_attention_mask": False}

        def count(start: int, step: int) -> list[int]:
            indices = range(start, len(dataset), step)
            lengths: list[int] = []
            for first in range(0, len(indices), batch_size):  # a chunk of items at a time: none is kept
                chunk = [dataset[i] for i in indices[first : first + batch_size]]
                conversations, _ = split_conversations(chunk, self.messages_field)
                encoded = self.client.chat_encode_ragged(conversations, **counted)
                lengths.extend(int(n) for n in encoded.row_lengths.tolist())
            return lengths

        lengths = count_across_ranks(count, len(dataset), share_counting)
        packing = self.sft_options["padding_free"]
        if not packing:
            sampler_options["pad_to_multiple_of"] = self.sft_options["pad_to_multiple_of"]
        return TokenBudgetBatchSampler(
            lengths, max_tokens=max_tokens, packing=packing, dataset=dataset, **sampler_options
        )

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in {**self.sft_options, **self.chat_options}.items())
        return f"ChatCollator({self.client!r}, messages_field={self.messages_field!r}, {options})"
