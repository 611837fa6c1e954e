"""What a transformers tokenizer call returns, built straight from Rust encodings: transformers' option
resolution and truncation, but padding per request into numpy arrays, so one Rust call serves requests padded
differently (see "Parity by construction" in docs/explanations/how-it-works.md).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, fields
from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from ..wire import OUTPUT_KEYS, PADDING_VALUES, TRUNCATION_VALUES, EncodeOptions
from .errors import ErrorKind, ServiceError


@dataclass(frozen=True)
class TruncationSetting:
    """What transformers would pass to the Rust tokenizer's ``enable_truncation``."""

    max_length: int
    stride: int
    strategy: str
    direction: str

    def as_kwargs(self) -> dict[str, Any]:
        return dict(vars(self))


def check_stride(truncation: TruncationSetting, added_tokens: int) -> None:
    """Refuse, in the tokenizer thread's words, a stride Rust's ``enable_truncation`` refuses: one above
    ``max_length`` minus one sequence's special tokens (a ``max_length`` below those wraps in Rust: no limit)."""
    room = truncation.max_length - added_tokens
    if room >= 0 and truncation.stride > room:
        raise ServiceError(
            ErrorKind.TOKENIZER,
            f"the tokenizer refused this input: tokenizer stride set to {truncation.stride}, which is greater than "
            f"or equal to its effective max length of {room} (= {truncation.max_length} original max length - "
            f"{added_tokens} added special tokens); send a smaller stride or a larger max_length",
        )


@dataclass(frozen=True)
class EncodePlan:
    """Options resolved against one tokenizer: all that encoding and shaping need."""

    truncation: TruncationSetting | None  # state the Rust tokenizer must hold during the encode
    add_special_tokens: bool
    pad_target: int | None  # padding="max_length": the fixed length; None otherwise
    pad_longest: bool  # padding="longest"
    pad_to_multiple_of: int | None
    pad_left: bool
    pad_id: int
    pad_type_id: int
    keys: tuple[str, ...]  # output keys, in BatchEncoding order
    with_overflow: bool

    @property
    def padded(self) -> bool:
        return self.pad_longest or self.pad_target is not None

    @property
    def full_encode(self) -> bool:
        """``encode_batch`` rather than ``encode_batch_fast``: for offsets, and for overflow (tokenizers 0.23's
        fast call gives a pair's overflow rows type id 0 for the second sequence; the property tests caught it)."""
        return "offset_mapping" in self.keys or self.with_overflow

    @property
    def rust_call(self) -> RustCall:
        """Requests with equal Rust calls can share one encode (their batch key)."""
        return RustCall(self.truncation, self.add_special_tokens, self.full_encode)


class RustCall(NamedTuple):
    """How the Rust tokenizer is called: truncation state, special tokens, ``encode_batch`` or the fast one."""

    truncation: TruncationSetting | None
    add_special_tokens: bool
    full_encode: bool


@dataclass(frozen=True)
class TokenizerFacts:
    """What transformers' option resolution reads of its ``self``, read once at load: ``pad_token_id`` calls into
    Rust, which the event loop must not do while the tokenizer thread may be setting truncation."""

    model_max_length: int
    pad_token: str | None
    pad_token_id: int | None
    pad_token_type_id: int
    padding_side: str
    truncation_side: str
    model_input_names: tuple[str, ...]

    @classmethod
    def of(cls, tokenizer: Any) -> TokenizerFacts:
        facts = {f.name: getattr(tokenizer, f.name) for f in fields(cls)}
        return cls(**{**facts, "model_input_names": tuple(tokenizer.model_input_names)})


def plan_encode(facts: TokenizerFacts, options: EncodeOptions) -> EncodePlan:
    """Resolve ``options`` exactly as transformers' ``__call__`` does, or raise a TOKENIZER error."""
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase, TruncationStrategy
    from transformers.utils import PaddingStrategy

    if options.padding not in PADDING_VALUES:
        raise ServiceError(ErrorKind.INVALID_REQUEST, f"padding must be one of {PADDING_VALUES}")
    if options.truncation not in TRUNCATION_VALUES:
        raise ServiceError(ErrorKind.INVALID_REQUEST, f"truncation must be one of {TRUNCATION_VALUES}")
    try:
        padding, truncation, max_length, _ = PreTrainedTokenizerBase._get_padding_truncation_strategies(
            facts,
            padding=options.padding,
            truncation=options.truncation,
            max_length=options.max_length,
            pad_to_multiple_of=options.pad_to_multiple_of,
            verbose=False,
        )
    except ValueError as exc:
        raise ServiceError(ErrorKind.TOKENIZER, str(exc)) from exc

    wanted = {  # None: as the tokenizer's model_input_names say
        "input_ids": True,
        "token_type_ids": options.return_token_type_ids,
        "attention_mask": options.return_attention_mask,
        "special_tokens_mask": options.return_special_tokens_mask,
        "offset_mapping": options.return_offsets_mapping,
        "length": options.return_length,
        "overflow_to_sample_mapping": options.return_overflowing_tokens,
    }
    truncation_setting = None
    if truncation != TruncationStrategy.DO_NOT_TRUNCATE:
        truncation_setting = TruncationSetting(
            max_length=max_length,
            stride=options.stride,
            strategy=truncation.value,
            direction=facts.truncation_side,
        )
    padding_side = options.padding_side if options.padding_side is not None else facts.padding_side
    return EncodePlan(
        truncation=truncation_setting,
        add_special_tokens=options.add_special_tokens,
        pad_target=max_length if padding == PaddingStrategy.MAX_LENGTH else None,
        pad_longest=padding == PaddingStrategy.LONGEST,
        pad_to_multiple_of=options.pad_to_multiple_of,
        pad_left=padding_side == "left",
        # (transformers has refused padding without a pad token before this point)
        pad_id=facts.pad_token_id if padding != PaddingStrategy.DO_NOT_PAD and facts.pad_token_id is not None else 0,
        pad_type_id=facts.pad_token_type_id,
        keys=tuple(k for k in OUTPUT_KEYS if wanted[k] or (wanted[k] is None and k in facts.model_input_names)),
        with_overflow=options.return_overflowing_tokens,
    )


@dataclass
class EncodedBatch:
    """One encode's result: per output key an int64 array ([rows, width]; offsets [rows, width, 2]; per-row keys
    [rows]) when every row has the same length, else one int64 array per row (ragged: JSON only)."""

    data: dict[str, Any]
    rectangular: bool
    num_tokens: int = 0  # real (unpadded) tokens, for metrics


# Columns read from every row of a Rust encoding (the other keys are made from the lengths and the rows).
_ROW_COLUMNS = {
    "input_ids": "ids",
    "token_type_ids": "type_ids",
    "special_tokens_mask": "special_tokens_mask",
    "offset_mapping": "offsets",
}


@dataclass
class EncodedRows:
    """One request's (or slice's) rows read out of the Rust encodings into flat int64 arrays."""

    lengths: np.ndarray  # tokens per row
    columns: dict[str, np.ndarray]  # key -> every row's values end to end (offset_mapping: shape (n, 2))
    top_longest: int  # the longest top-level encoding (padding="longest" ignores overflow rows)
    sample_map: np.ndarray  # overflow row -> input index (empty without overflow)
    inputs: int

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())


def extract_rows(encodings: Sequence[Any], plan: EncodePlan, zero_type_ids: bool = False) -> EncodedRows:
    """What ``plan`` needs of one request's Rust encodings; ``zero_type_ids``: their type ids are known to be 0."""
    if plan.with_overflow:
        rows: list[Any] = []
        sample_map: list[int] = []
        for i, enc in enumerate(encodings):
            group = [enc, *enc.overflowing]
            rows.extend(group)
            sample_map.extend([i] * len(group))
    else:
        rows = list(encodings)
        sample_map = []
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    total = int(lengths.sum())
    columns: dict[str, np.ndarray] = {}
    for key in plan.keys:
        attribute = _ROW_COLUMNS.get(key)
        if attribute is None:
            continue
        if key == "offset_mapping":
            pairs = chain.from_iterable(map(attrgetter(attribute), rows))
            flat = np.fromiter(chain.from_iterable(pairs), dtype=np.int64, count=2 * total)
            columns[key] = flat.reshape(total, 2)
        elif key == "token_type_ids" and zero_type_ids:
            columns[key] = np.zeros(total, dtype=np.int64)
        else:
            columns[key] = _read_column(rows, attribute)
    if plan.with_overflow:
        top_longest = max((len(e) for e in encodings), default=0)
    else:
        top_longest = int(lengths.max(initial=0))
    return EncodedRows(lengths, columns, top_longest, np.asarray(sample_map, dtype=np.int64), len(encodings))


def _read_column(rows: Sequence[Any], attribute: str) -> np.ndarray:
    """Every row's ``attribute`` (non-negative ints) end to end, as int64. ``array.fromlist`` converts the ints in
    C (``np.fromiter`` costs 3.5x as much: measured on 256 lists of 128 ids); the unsigned array's buffer is the
    int64 column, uncopied (every value fits in 32 bits)."""
    values = array("Q")
    append = values.fromlist
    for row in map(attrgetter(attribute), rows):
        append(row)
    return np.frombuffer(values, dtype=np.int64)


def join_rows(parts: Sequence[EncodedRows]) -> EncodedRows:
    """The rows of consecutive slices of one request, as if encoded at once."""
    if len(parts) == 1:
        return parts[0]
    maps, offset = [], 0
    for part in parts:
        maps.append(part.sample_map + offset)
        offset += part.inputs
    return EncodedRows(
        lengths=np.concatenate([p.lengths for p in parts]),
        columns={key: np.concatenate([p.columns[key] for p in parts]) for key in parts[0].columns},
        top_longest=max(p.top_longest for p in parts),
        sample_map=np.concatenate(maps),
        inputs=offset,
    )


def shape_rows(encoded: EncodedRows, plan: EncodePlan, max_response_tokens: int) -> EncodedBatch:
    """A request's rows padded and laid out as transformers' ``BatchEncoding`` holds them."""
    lengths = encoded.lengths
    if plan.padded:
        target = plan.pad_target
        if target is None:  # longest, among this request's top-level encodings
            target = encoded.top_longest
        multiple = plan.pad_to_multiple_of
        if multiple and target % multiple:
            target += multiple - target % multiple
        out_lengths = np.maximum(lengths, target)
    else:
        out_lengths = lengths
    width = int(out_lengths.max(initial=0))
    rectangular = bool((out_lengths == width).all())
    positions = int(out_lengths.sum())  # rows x width when rectangular; padded rows add up when ragged
    if positions > max_response_tokens:
        raise ServiceError(
            ErrorKind.TOO_LARGE,
            f"the result would hold {positions} token positions ({len(lengths)} rows, up to {width} long), over "
            f"the limit max_response_tokens={max_response_tokens}; send fewer texts or a smaller max_length",
        )

    shaper: _RectangularShaper | _RaggedShaper
    if rectangular:
        shaper = _RectangularShaper(lengths, width, plan.pad_left)
    else:
        shaper = _RaggedShaper(lengths, out_lengths, plan.pad_left)
    data: dict[str, Any] = {}
    for key in plan.keys:
        if key == "input_ids":
            data[key] = shaper.fill(encoded.columns[key], plan.pad_id)
        elif key == "token_type_ids":
            data[key] = shaper.fill(encoded.columns[key], plan.pad_type_id)
        elif key == "attention_mask":
            data[key] = shaper.attention_mask()
        elif key == "special_tokens_mask":
            data[key] = shaper.fill(encoded.columns[key], 1)
        elif key == "offset_mapping":
            data[key] = shaper.fill(encoded.columns[key], 0)
        elif key == "length":
            # transformers reports len(ids) *after* padding
            data[key] = out_lengths if rectangular else out_lengths.tolist()
        elif key == "overflow_to_sample_mapping":
            data[key] = encoded.sample_map if rectangular else encoded.sample_map.tolist()
    return EncodedBatch(data=data, rectangular=rectangular, num_tokens=encoded.num_tokens)


class _RectangularShaper:
    """Rows padded into one ``[rows, width]`` int64 array with a single scatter."""

    def __init__(self, lengths: np.ndarray, width: int, pad_left: bool) -> None:
        self.rows = len(lengths)
        self.width = width
        self.total = int(lengths.sum())
        if self.total == self.rows * width:
            self.mask = None  # nothing to pad
        else:
            columns = np.arange(width)
            if pad_left:
                self.mask = columns >= (width - lengths)[:, None]
            else:
                self.mask = columns < lengths[:, None]

    def attention_mask(self) -> np.ndarray:
        if self.mask is None:
            return np.ones((self.rows, self.width), dtype=np.int64)
        return self.mask.astype(np.int64)

    def fill(self, flat: np.ndarray, pad_value: int) -> np.ndarray:
        # offsets are [rows, width, 2]; every row empty is [rows, 0], as transformers gives it (numpy of [[]])
        shape = (self.rows, self.width, *flat.shape[1:]) if self.width else (self.rows, 0)
        if self.mask is None:
            return flat.reshape(shape)
        out = np.full(shape, pad_value, dtype=np.int64)
        out[self.mask] = flat
        return out


class _RaggedShaper:
    """Rows of different lengths (JSON only): one int64 array per row, padded where padding asks."""

    def __init__(self, lengths: np.ndarray, out_lengths: np.ndarray, pad_left: bool) -> None:
        self.lengths = lengths
        self.missing = (out_lengths - lengths).tolist()
        self.bounds = np.cumsum(lengths)[:-1]
        self.pad_left = pad_left

    def attention_mask(self) -> list[np.ndarray]:
        return self.fill(np.ones(int(self.lengths.sum()), dtype=np.int64), 0)

    def fill(self, flat: np.ndarray, pad_value: int) -> list[np.ndarray]:
        rows = np.split(flat, self.bounds)  # views: no copy for rows that need no padding
        for i, missing in enumerate(self.missing):
            if missing > 0:
                padding = np.full((missing, *flat.shape[1:]), pad_value, dtype=np.int64)
                rows[i] = np.concatenate([padding, rows[i]] if self.pad_left else [rows[i], padding])
        return rows
