"""Supervised fine-tuning batches from encoded conversations, exactly as TRL's (1.x) SFT trainer makes them: its
dataset preparation turns a conversation into ``labels`` (the id where the token counts toward the loss --
``assistant_masks`` is 1, with ``assistant_only_loss`` -- else -100), then ``DataCollatorForLanguageModeling`` pads
the rows. :func:`collate_sft` does both from ``/chat/encode``'s unpadded rows, with that collator's keys, order,
dtypes and values:

- padded (default): ``input_ids`` (padded with ``pad_token_id``), ``labels`` (-100 on padding), ``position_ids``
  (with ``return_position_ids``), ``attention_mask``; ``[rows, longest]`` rounded up to ``pad_to_multiple_of``.
  ``padding_side`` may also be ``"left"`` (TRL's collator always pads right; its ``pad`` helper is the oracle).
- ``padding_free=True``: one row, no attention mask: ``input_ids``, ``labels`` (each conversation's first token
  -100), ``position_ids`` restarting at 0, then ``cu_seq_lens_q``/``cu_seq_lens_k`` (int32, one tensor under both
  names, as TRL gives it), ``max_length_q``/``max_length_k`` (Python ints) and ``seq_idx`` (int32). Padding to
  ``pad_to_multiple_of`` counts, as in TRL, each padding position as a sequence of its own.

A conversation that encodes to no tokens stays int64 here (TRL would make its whole batch float). numpy; torch only
when tensors are returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import numpy as np

__all__ = [
    "SFT_OPTIONS",
    "IGNORE_INDEX",
    "sft_labels",
    "collate_sft",
    "split_conversations",
    "collate_fields",
]

#: The label of a token that does not count toward the loss (PyTorch's cross-entropy ``ignore_index``).
IGNORE_INDEX: Final = -100


def sft_labels(
    input_ids: Sequence[int] | np.ndarray,
    assistant_masks: Sequence[int] | np.ndarray | None = None,
    *,
    assistant_only_loss: bool = True,
) -> np.ndarray:
    """One conversation's labels: with ``assistant_only_loss`` its ids where the assistant wrote the token, else
    -100; every id otherwise."""
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
    check_padding(padding_side, pad_to_multiple_of)
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


#: :func:`collate_sft`'s options and defaults, from its signature: TRL's ``assistant_only_loss`` and its collator's.
SFT_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType(
    {name: value for name, value in (collate_sft.__kwdefaults__ or {}).items() if name != "return_tensors"}
)


def check_padding(padding_side: str, pad_to_multiple_of: int | None) -> None:
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
    if pad_to_multiple_of is not None and (isinstance(pad_to_multiple_of, bool) or pad_to_multiple_of < 1):
        raise ValueError("pad_to_multiple_of must be a positive integer")


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

    made: dict[int, Any] = {}  # an array under two names is one tensor under two names
    for value in batch.values():
        if isinstance(value, np.ndarray) and id(value) not in made:
            made[id(value)] = torch.from_numpy(np.ascontiguousarray(value))
    return {key: made[id(value)] if isinstance(value, np.ndarray) else value for key, value in batch.items()}


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
