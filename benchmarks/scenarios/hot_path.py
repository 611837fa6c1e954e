"""Scenario "hot_path": the engine's hot path (option resolution, one Rust call, numpy shaping; then its response
bodies, and FastAPI's default JSON, which the service does not use) against in-process ``encode_batch``,
``encode_batch_fast`` and transformers on the same batch of real texts. No HTTP; Rust parallelism on everywhere.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import TOKENIZES_WITH_PARALLELISM_ON, Row, Scenario, Settings, in_rounds, medians

BATCH = 256


@dataclass(frozen=True)
class Counts:
    rounds: int = 30


FULL, SMOKE = Counts(), Counts(rounds=2)


def measure(settings: Settings) -> dict[str, Any]:
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    counts = settings.counts(FULL, SMOKE)
    import numpy as np
    import orjson
    from safetensors.numpy import save

    from service.engine import EncodeOptions
    from service.engine.encoding import TokenizerFacts, plan_encode
    from service.engine.loading import load_tokenizer
    from testkit import assets as package_assets
    from testkit.engine import build_batch, to_lists

    texts = package_assets.chinese_reviews()[: BATCH // 2] + package_assets.english_paragraphs()[: BATCH // 2]
    reference = load_tokenizer(None).tokenizer  # the user's in-process tokenizer
    ours = load_tokenizer(None).tokenizer  # the engine's own copy
    options = EncodeOptions(padding="longest", truncation=True, max_length=128)
    call = {"padding": "longest", "truncation": True, "max_length": 128}

    rust = reference.backend_tokenizer
    rust.enable_truncation(max_length=128)
    rust.enable_padding(pad_id=reference.pad_token_id, pad_token=reference.pad_token)

    def in_process_encode_batch():
        encodings = rust.encode_batch(texts)
        return np.array([e.ids for e in encodings], dtype=np.int64)

    def in_process_encode_batch_fast():
        encodings = rust.encode_batch_fast(texts)
        return np.array([e.ids for e in encodings], dtype=np.int64)

    def in_process_transformers():
        return reference(texts, return_tensors="pt", **call)

    backend = ours.backend_tokenizer
    facts = TokenizerFacts.of(ours)
    plan = plan_encode(facts, options)
    backend.enable_truncation(**plan.truncation.as_kwargs())

    def engine_hot_path():
        plan_encode(facts, options)
        return build_batch(backend.encode_batch_fast(texts), plan, 1 << 30)

    def engine_json_body():
        return orjson.dumps(engine_hot_path().data, option=orjson.OPT_SERIALIZE_NUMPY)

    def engine_binary_body():
        return save(engine_hot_path().data)

    def engine_fastapi_default_json():
        from fastapi.encoders import jsonable_encoder
        from fastapi.responses import JSONResponse

        return JSONResponse(jsonable_encoder(to_lists(engine_hot_path()))).body

    variants = {
        "in-process encode_batch": in_process_encode_batch,
        "in-process encode_batch_fast": in_process_encode_batch_fast,
        "in-process transformers __call__ (pt)": in_process_transformers,
        "engine hot path (arrays)": engine_hot_path,
        "engine + JSON body": engine_json_body,
        "engine + safetensors body": engine_binary_body,
        "engine + FastAPI's default JSON (unused)": engine_fastapi_default_json,
    }
    for fn in variants.values():  # warm up the pool and caches
        fn()

    def one(name: str) -> dict[str, float]:
        started = time.perf_counter()
        variants[name]()
        return {"seconds": time.perf_counter() - started}

    runs = in_rounds(list(variants), one, counts.rounds, "hot path")
    found = {name: medians(values)["seconds"] for name, values in runs.items()}
    return {"batch": BATCH, "seconds_per_batch": found}


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
