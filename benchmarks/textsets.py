"""The named text sets of one run, built once from the corpus and shared by every scenario.

The in-process worker reads the same sets from a JSON file, so both sides tokenize the very same texts.
Names: ``<language>-<bucket>`` (scenario 1 cells), ``mixed-medium`` (scenario 1 batch-size sweep), ``s2``
(scenario 2, one text per request) and ``chars-<N>`` (scenario 4, texts of exactly N characters).
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import corpus
from benchmarks.profiles import Profile


def long_text_batch(chars: int) -> int:
    """Texts per request in scenario 4: ~256k characters per request, 1 to 256 texts."""
    return max(1, min(256, 256_000 // chars))


def build_text_sets(profile: Profile) -> dict[str, list[str]]:
    """Every text set the scenarios of ``profile`` draw from, by name."""
    sets: dict[str, list[str]] = {}
    for language in corpus.LANGUAGES:
        for bucket in corpus.BUCKETS:
            sets[f"{language}-{bucket}"] = corpus.bucket_texts(language, bucket, profile.set_size)
    sets["mixed-medium"] = corpus.mixed_texts("medium", profile.sweep_set_size)
    sets["s2"] = corpus.mixed_texts("medium", profile.s2_set_size, seed=2)
    for chars in profile.long_lengths:
        sets[f"chars-{chars}"] = corpus.mixed_texts(f"chars:{chars}", 2 * long_text_batch(chars), seed=4)
    return sets


def write_text_sets(sets: dict[str, list[str]], path: Path) -> Path:
    """Write the sets where the in-process worker reads them; the path written."""
    path.write_text(json.dumps(sets, ensure_ascii=False), "utf-8")
    return path
