"""Benchmark texts, deterministic: real Chinese reviews and English prose cut into length buckets -- ``short`` (under
100 characters, as they come), ``medium`` (~300) and ``long`` (~1000: consecutive texts joined and cut to a length
in [0.8, 1.2] x the target, so that padding still has something to do) -- or ``chars:N``, exactly N characters.
"""

from __future__ import annotations

import random
from functools import cache

from testkit import assets as package_assets

LANGUAGES = ("zh", "en")
BUCKETS = {"short": None, "medium": 300, "long": 1000}
SEPARATOR = {"zh": "", "en": " "}


@cache
def _source(language: str) -> tuple[str, ...]:
    if language == "zh":
        return tuple(package_assets.chinese_reviews())
    # paragraphs of the Python docs, then the stdlib docstrings: ~2.2M characters of English prose
    return tuple(package_assets.english_paragraphs() + package_assets.english_docstrings())


def bucket_texts(language: str, bucket: str, count: int, seed: int = 0) -> list[str]:
    """``count`` texts of one language and bucket (``short``, ``medium``, ``long`` or ``chars:N``)."""
    source = _source(language)
    rng = random.Random(f"{language}/{bucket}/{seed}")
    if bucket == "short":
        pool = [t for t in source if 20 <= len(t) < 100]
        start = rng.randrange(len(pool))
        return [pool[(start + i) % len(pool)] for i in range(count)]
    if bucket.startswith("chars:"):
        low = high = int(bucket.split(":", 1)[1])
    else:
        target = BUCKETS[bucket]
        low, high = int(target * 0.8), int(target * 1.2)
    return _joined(source, SEPARATOR[language], low, high, count, rng)


def _joined(source: tuple[str, ...], separator: str, low: int, high: int, count: int, rng: random.Random) -> list[str]:
    texts: list[str] = []
    position = rng.randrange(len(source))
    while len(texts) < count:
        length = rng.randint(low, high)
        parts: list[str] = []
        size = 0
        while size < length:
            text = source[position % len(source)]
            position += 1
            parts.append(text)
            size += len(text) + len(separator)
        texts.append(separator.join(parts)[:length])
    return texts


def mixed_texts(bucket: str, count: int, seed: int = 0) -> list[str]:
    """``count`` texts alternating Chinese and English, for scenarios that are not split by language."""
    zh = bucket_texts("zh", bucket, (count + 1) // 2, seed)
    en = bucket_texts("en", bucket, count // 2, seed)
    mixed = [t for pair in zip(zh, en, strict=False) for t in pair]  # zh may hold one more
    if len(zh) > len(en):
        mixed.append(zh[-1])
    return mixed


def batches_of(texts: list[str], size: int, limit: int = 64) -> list[list[str]]:
    """Consecutive batches of ``size`` texts covering ``texts`` (wrapping around to fill the last one),
    at most ``limit`` of them: the distinct batches a measurement cycles through."""
    count = min(limit, max(1, -(-len(texts) // size)))
    return [[texts[(i * size + j) % len(texts)] for j in range(size)] for i in range(count)]
