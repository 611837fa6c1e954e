"""Padding-free packed batches: several texts in one row, as transformers' ``DataCollatorWithFlattening`` makes them.

The ids are concatenated into ``input_ids`` of shape ``[1, total]``; ``labels`` are the same ids with each text's
first token replaced by ``separator_id`` (no token is predicted across a boundary); ``position_ids`` restart at
``position_ids_start`` for every text; ``return_flash_attn_kwargs`` adds flash-attention's varlen arguments
(``cu_seq_lens_q/k``: int32 cumulative lengths from 0; ``max_length_q/k``: the longest text, a Python int),
``return_seq_idx`` the text of each token (``seq_idx``, int32). Empty texts are left out, as there. Built with
numpy, handed to torch without a copy.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from itertools import chain
from types import MappingProxyType
from typing import Any, Final

__all__ = ["PACKING_OPTIONS", "flatten"]


def flatten(
    rows: Sequence[Sequence[int]],
    *,
    return_position_ids: bool = True,
    separator_id: int = -100,
    return_flash_attn_kwargs: bool = False,
    return_seq_idx: bool = False,
    position_ids_start: int = 0,
) -> dict[str, Any]:
    """One packed batch (torch tensors, and Python ints for ``max_length_q/k``) from the ids of each text, with
    the keys, order, dtypes and values of ``DataCollatorWithFlattening(...)([{"input_ids": ids}, ...])``."""
    import numpy as np
    import torch

    kept = [row for row in rows if len(row) > 0]
    if not kept:
        raise ValueError(
            "every text of this batch encodes to no tokens, so a packed batch would be empty (as "
            "DataCollatorWithFlattening refuses it): leave empty texts out of the dataset"
        )
    lengths = np.fromiter(map(len, kept), dtype=np.int64, count=len(kept))
    ends = np.cumsum(lengths)
    total = int(ends[-1])
    starts = ends - lengths
    input_ids = np.fromiter(chain.from_iterable(kept), dtype=np.int64, count=total)
    labels = input_ids.copy()
    labels[starts] = separator_id
    packed: dict[str, Any] = {"input_ids": input_ids[None], "labels": labels[None]}
    if return_position_ids:
        packed["position_ids"] = (np.arange(total, dtype=np.int64) - np.repeat(starts, lengths) + position_ids_start)[
            None
        ]
    if return_seq_idx:
        packed["seq_idx"] = np.repeat(np.arange(len(kept), dtype=np.int32), lengths)[None]
    if return_flash_attn_kwargs:
        boundaries = np.concatenate([[0], ends]).astype(np.int32)
        packed["cu_seq_lens_q"] = boundaries
        packed["cu_seq_lens_k"] = boundaries.copy()  # two tensors, as the collator gives: never aliased
    tensors = {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in packed.items()}
    if return_flash_attn_kwargs:
        tensors["max_length_q"] = tensors["max_length_k"] = int(lengths.max())
    return tensors


#: ``DataCollatorWithFlattening``'s options, with its defaults (``tests/data/test_packing.py`` holds them to it): those
#: of :func:`flatten`'s signature.
PACKING_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType(
    {name: p.default for name, p in inspect.signature(flatten).parameters.items() if p.kind is p.KEYWORD_ONLY}
)
