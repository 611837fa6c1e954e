"""Assistant masks, marked from the encode's offsets exactly as transformers marks generation spans
(:func:`assistant_masks`, vectorised over a batch), and added to the encode as ``apply_chat_template`` returns it
(:func:`add_assistant_masks`). numpy over every token of a batch: run on the render thread, off the event loop."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from ...wire import ASSISTANT_MASKS_KEY
from ..encoding import EncodedBatch
from ..errors import ErrorKind, ServiceError
from .rendering import RenderedChats


def assistant_masks(
    offsets: Sequence[np.ndarray] | np.ndarray, spans: Sequence[Sequence[tuple[int, int]]]
) -> list[np.ndarray]:
    """Per row of ``[tokens, 2]`` ``offsets``, 1 for each token overlapping the current span, scanning tokens and
    spans in order as transformers does (padding, at ``(0, 0)``, never does), else 0."""
    rows = len(spans)
    lengths = [len(row) for row in offsets]
    if rows == 0 or sum(lengths) == 0:
        return [np.zeros(n, dtype=np.int64) for n in lengths]
    flat = np.concatenate([np.asarray(row, dtype=np.int64).reshape(-1, 2) for row in offsets])
    span_counts = [len(row_spans) for row_spans in spans]
    if sum(span_counts) == 0:
        return [np.zeros(n, dtype=np.int64) for n in lengths]
    span_array = np.asarray([span for row_spans in spans for span in row_spans], dtype=np.int64).reshape(-1, 2)
    # Spans of a row whose ends do not increase (nested generation blocks) take transformers' own loop.
    ordered = all(all(a[1] <= b[1] for a, b in pairwise(row_spans)) for row_spans in spans)
    if not ordered:
        return [
            _mask_row_by_loop(np.asarray(row).reshape(-1, 2), row_spans)
            for row, row_spans in zip(offsets, spans, strict=True)
        ]
    # Each row in its own band of positions, so one search serves every row: within a row, the span a token is
    # compared with is the first whose end lies past the furthest token start so far (transformers' scan).
    band = int(max(flat.max(), span_array.max())) + 1
    token_row = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    starts = flat[:, 0] + token_row * band
    ends = flat[:, 1] + token_row * band
    span_row = np.repeat(np.arange(rows, dtype=np.int64), span_counts)
    span_starts = span_array[:, 0] + span_row * band
    span_ends = span_array[:, 1] + span_row * band
    current = np.searchsorted(span_ends, np.maximum.accumulate(starts), side="right")
    inside = current < len(span_ends)
    marked = np.zeros(len(flat), dtype=np.int64)
    marked[inside] = ends[inside] > span_starts[current[inside]]
    return np.split(marked, np.cumsum(lengths)[:-1])


def _mask_row_by_loop(offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """transformers' marking of one row, step by step (for spans out of order)."""
    mask = np.zeros(len(offsets), dtype=np.int64)
    span_index = 0
    for token, (token_start, token_end) in enumerate(offsets.tolist()):
        while span_index < len(spans) and token_start >= spans[span_index][1]:
            span_index += 1
        if span_index == len(spans):
            break
        if token_end > spans[span_index][0]:
            mask[token] = 1
    return mask


def add_assistant_masks(encoded: EncodedBatch, rendered: RenderedChats) -> EncodedBatch:
    """``encoded`` with ``assistant_masks`` last when spans were rendered, without the offsets that made them."""
    data = dict(encoded.data)
    offsets = data.pop("offset_mapping", None)
    if rendered.spans is not None:
        if offsets is None:
            raise ServiceError(ErrorKind.INTERNAL, "assistant masks need the encode's offsets")
        if encoded.rectangular:
            array = np.asarray(offsets)
            rows = len(rendered.spans)
            width = array.shape[1] if array.ndim > 1 else 0
            per_row = list(array.reshape(rows, width, 2)) if width else [np.zeros((0, 2), np.int64)] * rows
            masks = assistant_masks(per_row, rendered.spans)
            data[ASSISTANT_MASKS_KEY] = np.stack(masks) if width else np.zeros((rows, 0), dtype=np.int64)
        else:
            data[ASSISTANT_MASKS_KEY] = assistant_masks(list(offsets), rendered.spans)
    return EncodedBatch(data=data, rectangular=encoded.rectangular, num_tokens=encoded.num_tokens)
