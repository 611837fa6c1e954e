"""Work units, the same whatever the number of workers: planning depends only on the files (names, sizes, Parquet
metadata) and ``unit_bytes``. A text or JSON Lines file over ``unit_bytes`` is cut into equal byte ranges (a line
belongs to the range its first byte lies in: planning reads nothing, every line is read once); a gzip file is one
unit (a gzip stream cannot be entered in the middle); Parquet is cut between row groups, gathered while their
uncompressed size stays within ``unit_bytes``.
"""

from __future__ import annotations

import argparse
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import CorpusError, JobError
from .inputs import SPLITTABLE, InputFile
from .stores import Storage
from .urls import is_url

#: Big enough that per-unit overhead vanishes, small enough that a rerun redoes little and many workers get work.
DEFAULT_UNIT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class WorkUnit:
    """Bytes ``[start, end)`` (text formats) or row groups ``[start, end)`` (Parquet) of a file; ``part`` numbers
    a file's units from 0; ``weight``: its size in bytes, for progress."""

    file: InputFile
    part: int
    start: int
    end: int
    weight: int

    @property
    def kind(self) -> str:
        return "row_groups" if self.file.format == "parquet" else "bytes"

    @property
    def name(self) -> str:
        """``<file name>.<part:05d>``, which names its outputs."""
        return f"{self.file.name}.{self.part:05d}"

    def describe(self) -> dict[str, object]:
        """What identifies the unit in records (a rerun whose plan differs is told by these)."""
        return {**self.file.describe(), "part": self.part, "kind": self.kind, "start": self.start, "end": self.end}


def plan_units(
    files: Sequence[InputFile], unit_bytes: int = DEFAULT_UNIT_BYTES, storage: Storage | None = None
) -> list[WorkUnit]:
    """Cut ``files`` into units, in file order (remote Parquet footers read through ``storage``)."""
    if unit_bytes < 1:
        raise CorpusError(f"unit_bytes must be positive, not {unit_bytes}")
    units: list[WorkUnit] = []
    for file in files:
        if file.format == "parquet":
            units.extend(_parquet_units(file, unit_bytes, storage or Storage()))
        elif file.format in SPLITTABLE and file.size > unit_bytes:
            count = -(-file.size // unit_bytes)
            bounds = [file.size * k // count for k in range(count + 1)]
            units.extend(
                WorkUnit(file, part, start, end, end - start)
                for part, (start, end) in enumerate(itertools.pairwise(bounds))
            )
        else:
            units.append(WorkUnit(file, 0, 0, file.size, file.size))
    return units


def _parquet_units(file: InputFile, unit_bytes: int, storage: Storage) -> list[WorkUnit]:
    metadata = parquet_file(file.path, storage).metadata
    sizes = [metadata.row_group(i).total_byte_size for i in range(metadata.num_row_groups)]
    if not sizes:
        return [WorkUnit(file, 0, 0, 0, 0)]
    units: list[WorkUnit] = []
    start, weight = 0, 0
    for group, size in enumerate(sizes):
        if group > start and weight + size > unit_bytes:
            units.append(WorkUnit(file, len(units), start, group, weight))
            start, weight = group, 0
        weight += size
    units.append(WorkUnit(file, len(units), start, len(sizes), weight))
    return units


def parquet_file(path: str, storage: Storage | None = None) -> Any:
    """``pyarrow.parquet.ParquetFile`` over a local path or a remote file (ranged GETs: its footer, then the row
    groups asked for); a CorpusError names the extra that installs pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise CorpusError(f"{path}: reading Parquet needs pyarrow: pip install 'tokenizer-service[pipeline]'") from None
    try:
        return pq.ParquetFile((storage or Storage()).open_input(path) if is_url(path) else path)
    except JobError:
        raise
    except Exception as exc:
        raise CorpusError(f"{path}: not a readable Parquet file ({exc})") from exc


def format_size(size: int) -> str:
    """``64M`` for 64 MiB: as :func:`parse_size` reads it, in the largest unit that divides it."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def parse_size(value: str) -> int:
    """A size flag (``--unit-bytes``...): ``65536``, ``64K``, ``64M``, ``1G`` (powers of 1024)."""
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]i?[bB]?)?\s*", value)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {value!r} (e.g. 64M)")
    number = int(match.group(1))
    unit = (match.group(2) or "").upper()[:1]
    size = number * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit]
    if size < 1:
        raise argparse.ArgumentTypeError(f"a size must be positive, not {value!r}")
    return size
