"""Count files: distinct pre-tokens in increasing code-point order (Python's ``str`` order, also UTF-8 byte
order) with their counts, summed exactly by a streaming k-way merge in one block of memory per file.

Layout (little-endian)::

    magic  b"TSCOUNTS1\\n"
    block* u32 n (pre-tokens in the block, > 0), u32 text_bytes,
           n x u32 length in characters, n x u64 count, text_bytes of UTF-8 (the pre-tokens, concatenated)
    end    u32 0, u32 0, u64 distinct pre-tokens in the file, u64 sum of the counts

The end record makes a truncated file detectable; writers write to a temporary name and rename.
"""

from __future__ import annotations

import heapq
import itertools
import struct
from array import array
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from ..jobs import JobError

MAGIC = b"TSCOUNTS1\n"
BLOCK_WORDS = 1 << 10
#: Most files merged at once: the open files and their buffers stay bounded whatever the number of units.
MERGE_FAN_IN = 64
_HEADER = struct.Struct("<II")
_END = struct.Struct("<QQ")
_LITTLE = struct.pack("=H", 1) == struct.pack("<H", 1)

Count = tuple[str, int]


class CountFileError(JobError):
    """A count file is not whole or not sorted; the message names it."""


def write_counts(stream: IO[bytes], counts: Iterable[Count], name: str = "count file") -> int:
    """Write ``(pre-token, count)`` pairs, in strictly increasing order, as a whole count file into ``stream``
    (left open); the number of distinct pre-tokens written."""
    stream.write(MAGIC)
    distinct = total = 0
    last: str | None = None
    pairs = iter(counts)
    while block := list(itertools.islice(pairs, BLOCK_WORDS)):
        for word, _ in block:
            if last is not None and word <= last:
                raise CountFileError(f"{name}: pre-tokens out of order ({last!r} then {word!r})")
            last = word
        words = [word for word, _ in block]
        text = "".join(words).encode("utf-8")
        lengths = array("I", map(len, words))
        numbers = array("Q", (count for _, count in block))
        if not _LITTLE:
            lengths.byteswap()
            numbers.byteswap()
        stream.write(_HEADER.pack(len(words), len(text)))
        stream.write(lengths.tobytes())
        stream.write(numbers.tobytes())
        stream.write(text)
        distinct += len(words)
        total += sum(count for _, count in block)
    stream.write(_HEADER.pack(0, 0))
    stream.write(_END.pack(distinct, total))
    return distinct


def read_counts(path: Path) -> Iterator[Count]:
    """Every ``(pre-token, count)`` of a count file, checked for wholeness as it is read."""
    with open(path, "rb", buffering=1 << 20) as stream:
        if stream.read(len(MAGIC)) != MAGIC:
            raise CountFileError(f"{path}: not a count file")
        distinct = total = 0
        while True:
            header = stream.read(_HEADER.size)
            if len(header) != _HEADER.size:
                raise CountFileError(f"{path}: truncated (no end record)")
            n, text_bytes = _HEADER.unpack(header)
            if n == 0:
                end = stream.read(_END.size)
                if len(end) != _END.size or _END.unpack(end) != (distinct, total):
                    raise CountFileError(f"{path}: its end record does not match its content")
                return
            lengths, numbers = array("I"), array("Q")
            try:
                lengths.frombytes(_exact(stream, 4 * n, path))
                numbers.frombytes(_exact(stream, 8 * n, path))
                text = _exact(stream, text_bytes, path).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CountFileError(f"{path}: damaged ({exc})") from None
            if not _LITTLE:
                lengths.byteswap()
                numbers.byteswap()
            offsets = list(itertools.accumulate(lengths, initial=0))
            words = [text[start:end] for start, end in itertools.pairwise(offsets)]
            distinct += n
            total += sum(numbers)
            yield from zip(words, numbers, strict=True)


def _exact(stream: IO[bytes], size: int, path: Path) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise CountFileError(f"{path}: truncated")
    return data


def merge_counts(streams: Sequence[Iterable[Count]]) -> Iterator[Count]:
    """Merge sorted streams into one sorted stream, adding the counts of equal pre-tokens."""
    if len(streams) == 1:
        yield from streams[0]
        return
    merged = heapq.merge(*streams)
    first = next(merged, None)
    if first is None:
        return
    current, total = first
    for word, count in merged:
        if word == current:
            total += count
        else:
            yield current, total
            current, total = word, count
    yield current, total


def merge_files(paths: Sequence[Path], scratch: Path) -> Iterator[Count]:
    """The exact sum of the count files, streamed; past :data:`MERGE_FAN_IN` files, merged in rounds in ``scratch``."""
    paths = list(paths)
    round_number = 0
    while len(paths) > MERGE_FAN_IN:
        scratch.mkdir(parents=True, exist_ok=True)
        merged: list[Path] = []
        for start in range(0, len(paths), MERGE_FAN_IN):
            group = paths[start : start + MERGE_FAN_IN]
            target = scratch / f"round{round_number}-{start // MERGE_FAN_IN:06d}.counts"
            with open(target, "wb") as out:
                write_counts(out, merge_counts([read_counts(path) for path in group]), str(target))
            for path in group:
                if path.parent == scratch:
                    path.unlink()
            merged.append(target)
        paths = merged
        round_number += 1
    with ExitStack() as cleanup:
        for path in paths:
            if path.parent == scratch:
                cleanup.callback(path.unlink, missing_ok=True)
        yield from merge_counts([read_counts(path) for path in paths])
