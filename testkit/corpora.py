"""Generated corpora of real text (Chinese reviews, English prose) in the formats pre-tokenization reads, for
tests and benchmarks: deterministic for a seed, written streaming (a 1 GB file never sits in memory)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from . import assets


def texts(seed: int = 0) -> list[str]:
    """The pool documents are drawn from: real Chinese reviews and English paragraphs, shuffled."""
    pool = assets.chinese_reviews() + assets.english_paragraphs()
    random.Random(seed).shuffle(pool)
    return pool


def write_jsonl(path: Path, size_bytes: int, *, seed: int = 0, fields: bool = True) -> int:
    """A JSON Lines file of about ``size_bytes``: documents of one to four pool texts joined by a space,
    with ``id`` and ``label`` fields. Returns the number of documents."""
    pool = texts(seed)
    rng = random.Random(seed)
    written = count = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as out:
        while written < size_bytes:
            text = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 4)))
            record = {"text": text, "id": count, "label": count % 3} if fields else {"text": text}
            line = json.dumps(record, ensure_ascii=False) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            count += 1
    return count


def write_text(path: Path, lines: int, *, seed: int = 0) -> None:
    """A text file of ``lines`` documents, one per line (pool texts hold no line breaks)."""
    pool = texts(seed)
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as out:
        for _ in range(lines):
            out.write(rng.choice(pool) + "\n")


def write_parquet(path: Path, rows: int, *, seed: int = 0, row_group_size: int = 200) -> None:
    """A Parquet file with ``text``, ``id`` and ``label`` columns in row groups of ``row_group_size``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pool = texts(seed)
    rng = random.Random(seed)
    table = pa.table(
        {
            "text": [rng.choice(pool) for _ in range(rows)],
            "id": list(range(rows)),
            "label": [i % 3 for i in range(rows)],
        }
    )
    pq.write_table(table, path, row_group_size=row_group_size)
