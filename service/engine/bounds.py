"""What one request may hold at most, computed before it runs without a Rust call: the bounds admission
reserves, and where a large request's slices end (the rules: "The memory budget" in docs/explanations/limits.md).
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add

import numpy as np

from .encoding import EncodePlan


class BodyKind(enum.Enum):
    """What a request body holds (what parsing it costs per byte)."""

    TEXTS = "texts"
    IDS = "ids"  # id lists (/decode)
    MESSAGES = "messages"  # conversations: an object per message (/chat/encode, /chat/render)


@dataclass(frozen=True)
class CostModel:
    """Safe upper bounds, in bytes, of what one request holds (measured as peak RSS, ``VmHWM``, with a margin)."""

    #: Rust encodings per token, while they exist (ids, type ids, offsets, token string, masks, words),
    #: plus the Python-side transients of extracting them (measured 165-225 B).
    rust_per_token: int = 288
    #: Per output position and per int64 column: the array (8), the flat values before the scatter (8) and
    #: the serialised answer (JSON up to 11 digits and a comma; safetensors 8), plus the padding mask.
    out_per_position_column: int = 32
    #: Python ``str`` per token of a /tokenize answer (object header and list slot), plus JSON quotes.
    tokenize_per_token: int = 96
    #: A parsed id of a /decode body (a list slot and an int object).
    decode_per_id: int = 48
    #: Bytes per character of text held or produced (Python's widest str, 4, plus UTF-8 or escaped JSON).
    per_text_byte: int = 12
    #: Reading and parsing a body, per byte: the bytes and the parsed objects (measured up to 4x for texts, an
    #: astral character making a str 4 bytes wide; 13x for id lists; 23x for conversations: 56-64 B per {} or []).
    intake_texts_per_byte: int = 6
    intake_ids_per_byte: int = 15
    intake_messages_per_byte: int = 26
    #: Parsing a small body of many tiny texts costs more per byte than the factor above says.
    intake_floor: int = 512 * 1024

    def intake(self, body_bytes: int, kind: BodyKind) -> int:
        """Reading and parsing a body of ``body_bytes`` holding ``kind``."""
        factor: int = getattr(self, f"intake_{kind.value}_per_byte")
        return self.intake_floor + factor * body_bytes


def utf8_length(text: str) -> int:
    """UTF-8 bytes of ``text`` without copying ASCII (the common case); lone surrogates count 3 bytes."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def utf8_lengths(texts: Sequence[str]) -> list[int]:
    """:func:`utf8_length` of each text, without a Python call per text."""
    if all(map(str.isascii, texts)):
        return list(map(len, texts))
    try:
        return list(map(len, map(str.encode, texts)))
    except UnicodeEncodeError:  # a lone surrogate, which strict UTF-8 refuses
        return list(map(utf8_length, texts))


def _wide_str_header() -> int | None:
    """The header of a non-ASCII str in CPython's layout (then length + 1 characters of 1, 2 or 4 bytes), or None."""
    header = sys.getsizeof("\xe9") - 2
    if sys.getsizeof("\u4e2d\u4e2d") == header + 6 and sys.getsizeof("\U0001f600") == header + 8:
        return header
    return None


_WIDE_STR_HEADER = _wide_str_header()


def utf8_bounds(texts: Sequence[str]) -> list[int]:
    """An upper bound of each text's UTF-8 bytes without encoding it (which costs the event loop as much as
    reading the body): its length times the most UTF-8 bytes a character of its storage width takes (1, 2 or 4
    bytes: at most 2, 3 or 4), read from the str's size (a cached UTF-8 copy only widens it, up to 4, the most)
    -- exact for one script (Chinese: 3), loose for mostly-ASCII text; exact where str's layout is not CPython's."""
    if all(map(str.isascii, texts)):
        return list(map(len, texts))
    header = _WIDE_STR_HEADER
    if header is None:
        return utf8_lengths(texts)
    count = len(texts)  # (numpy: a Python expression per text cost more than encoding short texts)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=count)
    sizes = np.fromiter(map(sys.getsizeof, texts), dtype=np.int64, count=count)
    ascii_ = np.fromiter(map(str.isascii, texts), dtype=bool, count=count)
    per_char = np.minimum((sizes - header) // (lengths + 1) + 1, 4)
    bounds: list[int] = np.where(ascii_, lengths, lengths * per_char).tolist()
    return bounds


def held_bytes(texts: Sequence[str]) -> int:
    """What the parsed texts themselves occupy."""
    return sum(map(sys.getsizeof, texts))


@dataclass(frozen=True)
class Bound:
    """The most bytes one request holds, parsed inputs to serialised answer, and its slices' ends (empty: one)."""

    cost: int
    slices: tuple[int, ...] = ()


@dataclass(frozen=True)
class EncodeBound(Bound):
    """An encode's bound, with the most token positions (rows x padded length) and rows (overflow included)."""

    positions: int = 0
    rows: int = 0


@dataclass(frozen=True)
class RequestBounds:
    """The bounds of one tokenizer's requests."""

    costs: CostModel
    specials: tuple[int, int]  # the special tokens added to one sequence, to a pair
    longest_token_bytes: int
    slice_tokens: int  # the Rust encodings one slice may hold

    def encode(
        self, texts: Sequence[str], pairs: Sequence[str] | None, plan: EncodePlan, output: bool = True
    ) -> EncodeBound:
        """The bound of ``tokenizer(texts, pairs)`` under ``plan`` (``output=False``: a count, one int per row).
        The bytes are bounded without encoding (:func:`utf8_bounds`), which may cut a request into finer slices
        than its exact bytes would (same result); a request that bound makes costly (over a quarter of the budget)
        is bounded from its exact bytes, so whether it fits at all is decided exactly."""
        bound = self._encode(texts, pairs, plan, output, utf8_bounds)
        if bound.cost > 2 * self.slice_tokens * self.costs.rust_per_token:  # (a quarter of the budget)
            return self._encode(texts, pairs, plan, output, utf8_lengths)
        return bound

    def _encode(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None,
        plan: EncodePlan,
        output: bool,
        utf8: Callable[[Sequence[str]], list[int]],
    ) -> EncodeBound:
        costs = self.costs
        sequences = 1 if pairs is None else 2
        specials = self.specials[sequences - 1] if plan.add_special_tokens else 0
        truncation = plan.truncation
        first = utf8(texts)
        second = utf8(pairs) if pairs is not None else None
        extra = specials + sequences
        if second is None:
            untruncated = list(map(add, first, repeat(extra)))
        else:
            untruncated = [a + b + extra for a, b in zip(first, second, strict=True)]
        rows: list[int] | None = None  # None: one row per input (no overflow)
        row_length = untruncated
        if truncation is not None:
            most = truncation.max_length
            # a row keeps the special tokens and one token more; tokenizers reads max_length=0 as no limit, and
            # one below the special tokens too (it subtracts them, and the subtraction wraps)
            truncates = most > 0 and most >= specials
            if truncates:
                row_length = list(map(min, untruncated, repeat(max(most, specials + 1))))
            if plan.with_overflow and most == specials > 0:
                # no room left for the text: tokenizers cuts each sequence to nothing and keeps it whole as an
                # overflow row, a pair's rows combining each side's two
                row_length = untruncated
                rows = [2 if second is None else 4] * len(untruncated)
            elif plan.with_overflow and truncates:
                fixed: list[int] | None = None
                if second is not None and truncation.strategy == "only_second":
                    fixed = first
                elif second is not None and truncation.strategy == "only_first":
                    fixed = second
                rows = []
                for i, u in enumerate(untruncated):
                    if second is not None and fixed is None:
                        rows.append(longest_first_pair_rows(first[i], second[i], most - specials, truncation.stride))
                        continue
                    step = most - specials - truncation.stride - (fixed[i] if fixed is not None else 0)
                    rows.append(u if step <= 0 else 1 + -(-max(0, u - most) // step))
        # the encodings Rust keeps
        held = row_length if rows is None else [r * n for r, n in zip(rows, row_length, strict=True)]
        row_count = len(row_length) if rows is None else sum(rows)
        held_total = positions = sum(held)
        if plan.padded:
            target = max(plan.pad_target or 0, max(row_length, default=0))
            multiple = plan.pad_to_multiple_of
            if multiple and target % multiple:
                target += multiple - target % multiple
            positions = max(positions, row_count * target)
        columns = sum(2 if key == "offset_mapping" else 1 for key in plan.keys if key != "length") if output else 0
        # Rust holds, per input, the encodings it keeps plus (while it works) the untruncated one
        rust_total = held_total + sum(untruncated)
        if rust_total <= self.slice_tokens:  # one slice (what self.slices says without the list per input)
            slices: tuple[int, ...] = ()
            largest_slice = rust_total
        else:
            slices, largest_slice = self.slices(list(map(add, held, untruncated)))
        inputs = held_bytes(texts) + (held_bytes(pairs) if pairs is not None else 0)
        cost = (
            inputs
            + largest_slice * costs.rust_per_token
            + positions * columns * costs.out_per_position_column
            + row_count * 256
        )
        return EncodeBound(cost, slices, positions, row_count)

    def tokenize(
        self, texts: Sequence[str], pairs: Sequence[str] | None, add_special_tokens: bool, sequence_ids: bool
    ) -> Bound:
        """A /tokenize's: the inputs, one slice of Rust encodings, and the token strings answered."""
        costs = self.costs
        sequences = 1 if pairs is None else 2
        specials = self.specials[sequences - 1] if add_special_tokens else 0
        text_bytes = utf8_lengths(texts)
        if pairs is not None:
            text_bytes = list(map(add, text_bytes, utf8_lengths(pairs)))
        tokens = [b + specials + sequences for b in text_bytes]
        slices, largest_slice = self.slices(tokens)
        total = sum(tokens)
        # token strings: at most twice the text's bytes (byte-level alphabets, "##" prefixes), plus special tokens
        token_bytes = 2 * sum(text_bytes) + 2 * total + specials * len(texts) * 32
        cost = (
            held_bytes(texts)
            + (held_bytes(pairs) if pairs is not None else 0)
            + largest_slice * costs.rust_per_token
            + total * (costs.tokenize_per_token + (16 if sequence_ids else 0))  # (a list slot, "null,")
            + token_bytes * costs.per_text_byte
        )
        return Bound(cost, slices)

    def decode(self, ids: Sequence[Sequence[int]]) -> Bound:
        """A /decode's: the parsed ids, and the text (at most the longest token per id) and its JSON."""
        count = sum(map(len, ids))
        costs = self.costs
        return Bound(count * costs.decode_per_id + count * (self.longest_token_bytes + 1) * costs.per_text_byte)

    def slices(self, tokens: Sequence[int]) -> tuple[tuple[int, ...], int]:
        """The ends of slices of at most :attr:`slice_tokens` (a larger input alone; empty: one) and the largest."""
        if sum(tokens) <= self.slice_tokens:
            return (), sum(tokens)
        ends: list[int] = []
        current = largest = 0
        for i, count in enumerate(tokens):
            if current and current + count > self.slice_tokens:
                ends.append(i)
                largest = max(largest, current)
                current = 0
            current += count
        largest = max(largest, current)
        ends.append(len(tokens))
        return tuple(ends), largest


def longest_first_pair_rows(first_bytes: int, second_bytes: int, room: int, stride: int) -> int:
    """The most rows a pair truncated ``longest_first`` with overflow yields, from its texts' UTF-8 lengths: a side
    tokenizers cuts keeps at least half of ``room`` (``max_length`` minus the special tokens) and more than
    ``stride`` tokens, in windows advancing by that minus ``stride``; each side's windows pair with the other's."""
    keeps = max(room // 2, stride + 1)
    step = max(keeps - stride, 1)

    def windows(text_bytes: int) -> int:
        return 1 + -(-max(0, text_bytes + 1 - keeps) // step)

    return windows(first_bytes) * windows(second_bytes)
