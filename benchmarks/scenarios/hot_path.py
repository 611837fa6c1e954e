"""Scenario "hot_path": the engine's hot path (option resolution, one Rust call, numpy shaping; then its response
bodies, and FastAPI's default JSON, which the service does not use) against in-process ``encode_batch``,
``encode_batch_fast`` and transformers on the same batch of real texts. No HTTP; Rust parallelism on everywhere.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import TOKENIZES_WITH_PARALLELISM_ON, Row, Scenario, Settings, in_rounds, medians

BATCH = 256


@dataclass(frozen=True)
class Counts:
    rounds: int = 30


FULL, SMOKE = Counts(), Counts(rounds=2)


def variants(texts: list[str]) -> dict[str, Callable[[], Any]]:
    """name -> one call on ``texts``: the in-process ways, then the engine's."""
    import numpy as np
    import orjson
    from fastapi.encoders import jsonable_encoder
    from fastapi.responses import JSONResponse
    from safetensors.numpy import save

    from service.engine import EncodeOptions
    from service.engine.encoding import TokenizerFacts, plan_encode
    from service.engine.loading import load_tokenizer
    from testkit.engine import build_batch, to_lists

    reference = load_tokenizer(None).tokenizer  # the user's in-process tokenizer
    rust = reference.backend_tokenizer
    rust.enable_truncation(max_length=128)
    rust.enable_padding(pad_id=reference.pad_token_id, pad_token=reference.pad_token)
    ours = load_tokenizer(None).tokenizer  # the engine's own copy
    options = EncodeOptions(padding="longest", truncation=True, max_length=128)
    facts = TokenizerFacts.of(ours)
    plan = plan_encode(facts, options)
    backend = ours.backend_tokenizer
    backend.enable_truncation(**plan.truncation.as_kwargs())

    def ids(encodings: list[Any]) -> Any:
        return np.array([e.ids for e in encodings], dtype=np.int64)

    def hot_path() -> Any:
        plan_encode(facts, options)
        return build_batch(backend.encode_batch_fast(texts), plan, 1 << 30)

    return {
        "in-process encode_batch": lambda: ids(rust.encode_batch(texts)),
        "in-process encode_batch_fast": lambda: ids(rust.encode_batch_fast(texts)),
        "in-process transformers __call__ (pt)": lambda: reference(
            texts, return_tensors="pt", padding="longest", truncation=True, max_length=128
        ),
        "engine hot path (arrays)": hot_path,
        "engine + JSON body": lambda: orjson.dumps(hot_path().data, option=orjson.OPT_SERIALIZE_NUMPY),
        "engine + safetensors body": lambda: save(hot_path().data),
        "engine + FastAPI's default JSON (unused)": lambda: JSONResponse(jsonable_encoder(to_lists(hot_path()))).body,
    }


def measure(settings: Settings) -> dict[str, Any]:
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    counts = settings.counts(FULL, SMOKE)
    from testkit import assets

    calls = variants(assets.chinese_reviews()[: BATCH // 2] + assets.english_paragraphs()[: BATCH // 2])
    for call in calls.values():  # warm up the pool and caches
        call()

    def one(name: str) -> dict[str, float]:
        started = time.perf_counter()
        calls[name]()
        return {"seconds": time.perf_counter() - started}

    runs = in_rounds(list(calls), one, counts.rounds, "hot path")
    return {"batch": BATCH, "seconds_per_batch": {name: medians(values)["seconds"] for name, values in runs.items()}}


def rows(section: dict[str, Any]) -> list[Row]:
    found = section.get("seconds_per_batch", {})
    base = found.get("in-process encode_batch")
    return [
        {
            "scenario": "hot_path",
            "texts": f"{section['batch']} texts, no HTTP",
            "variant": name,
            "rate": section["batch"] / seconds,
            "ratio": f"{base / seconds:.2f}x enc",
            "latency": f"{seconds * 1000:.3g}",
        }
        for name, seconds in found.items()
    ]


SCENARIO = Scenario(
    "hot_path",
    "the engine's hot path alone, no HTTP, vs in-process encode_batch and transformers",
    measure,
    rows,
    process=TOKENIZES_WITH_PARALLELISM_ON,
    timeout=(600.0, 120.0),
)
