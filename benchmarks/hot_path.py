"""The engine's hot path against the in-process alternatives, on the same texts, in one run.

Compares, for batches of real text (padding="longest", truncation, max_length=128):
  - in-process Rust ``encode_batch`` and ``encode_batch_fast`` with padding/truncation set on the tokenizer,
    ids -> numpy
  - in-process transformers ``tokenizer(texts, ..., return_tensors="pt")``
  - the engine's hot path: option resolution + one Rust call (``encode_batch_fast``) + numpy shaping
  - the engine's full response body: the hot path + orjson / safetensors serialisation
  - the same body as FastAPI would build it by default from a returned dict (``jsonable_encoder`` +
    ``JSONResponse``), which the service does not use
No HTTP here: this isolates what the server does per batch. Rust parallelism is on in every variant.

Usage: python -m benchmarks.hot_path [--batch 256] [--rounds 30] [--model DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ["TOKENIZERS_PARALLELISM"] = "true"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--model", default=None, help="tokenizer directory (default: the embedded one)")
    args = parser.parse_args()

    import numpy as np
    import orjson
    from safetensors.numpy import save

    from service.engine import EncodeOptions
    from service.engine.encoding import TokenizerFacts, plan_encode
    from service.engine.loading import load_tokenizer
    from testkit import assets as package_assets
    from testkit.engine import build_batch, to_lists

    texts = package_assets.chinese_reviews()[: args.batch // 2] + package_assets.english_paragraphs()[: args.batch // 2]
    reference = load_tokenizer(args.model).tokenizer  # the user's in-process tokenizer
    ours = load_tokenizer(args.model).tokenizer  # the engine's own copy
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
    timings: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):  # interleaved, so machine noise hits every variant alike
        for name, fn in variants.items():
            started = time.perf_counter()
            fn()
            timings[name].append(time.perf_counter() - started)
    base = statistics.median(timings["in-process encode_batch"])
    print(
        f"batch {args.batch} texts, padding=longest, truncation, max_length=128, {args.rounds} rounds, "
        f"median per batch; {os.cpu_count()} CPUs"
    )
    print(f"{'variant':42} {'ms/batch':>9} {'texts/s':>10} {'vs encode_batch':>16}")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"{name:42} {median * 1000:9.2f} {args.batch / median:10.0f} {base / median:15.2f}x")


if __name__ == "__main__":
    main()
