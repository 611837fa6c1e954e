"""One pre-tokenization run of a corpus by one method, in its own process (scenario 6 starts one per run:
``main(METHOD, CORPUS, OUT, URL, TOKENIZER_DIR, FORMAT)``). Methods:

- ``service``: ``tokenizer-service pretokenize`` against URL (8 requests in flight); this process imports no tokenizer;
- ``encode_batch`` / ``encode_batch_fast``: the very same reader and shard writer with the Rust tokenizer in this
  process (Rust parallelism on, 2 batches in flight so that reading overlaps encoding);
- ``datasets_map``: ``load_dataset("json")`` then ``Dataset.map(tokenizer, batched=True, num_proc=2)``.

Its figures: seconds of the work (imports excluded), documents, tokens, CPU seconds and peak RSS.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import peak_rss_mb


class InProcessEncoder:
    """The pre-tokenization Encoder protocol over a tokenizer in this process (``encode_batch`` in a thread,
    so the event loop keeps reading while Rust encodes)."""

    def __init__(self, tokenizer_dir: str, fast: bool) -> None:
        from service.engine.loading import load_tokenizer, special_token_ids

        loaded = load_tokenizer(tokenizer_dir)
        self.loaded = loaded
        self.special = special_token_ids(loaded.tokenizer)
        backend = loaded.tokenizer.backend_tokenizer
        self.encode_batch = backend.encode_batch_fast if fast else backend.encode_batch

    async def facts(self) -> Any:
        from service.pretokenize import ServedTokenizer

        return ServedTokenizer(
            fingerprint=self.loaded.fingerprint,
            vocab_size=len(self.loaded.tokenizer),
            source=self.loaded.source,
            special_token_ids=tuple(sorted(self.special.items())),
        )

    async def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        encodings = await asyncio.to_thread(self.encode_batch, list(texts), add_special_tokens=True)
        rows = [encoding.ids for encoding in encodings]
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        ids = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
        return ids, lengths

    async def aclose(self) -> None:
        pass

    def describe(self) -> str:
        return f"in-process {self.encode_batch.__name__}"


def run_pipeline(method: str, corpus: str, out: str, url: str, tokenizer: str, output_format: str) -> dict:
    from service.pretokenize import PretokenizeConfig, pretokenize

    service = method == "service"
    config = PretokenizeConfig(
        inputs=(corpus,),
        out=Path(out),
        url=url,
        output_format=output_format,
        progress="none",
        concurrency=8 if service else 2,
    )
    encoder = None if service else InProcessEncoder(tokenizer, fast=method == "encode_batch_fast")
    started = time.perf_counter()
    summary = asyncio.run(pretokenize(config, encoder=encoder, log=lambda message: None))
    return {"seconds": time.perf_counter() - started, "documents": summary.documents, "tokens": summary.tokens}


def run_datasets_map(corpus: str, out: str, tokenizer_dir: str) -> dict:
    from datasets import disable_progress_bars, load_dataset
    from transformers import AutoTokenizer

    disable_progress_bars()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    cache = Path(out) / "cache"

    def tokenize(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        ids = tokenizer(batch["text"])["input_ids"]
        return {"input_ids": ids, "length": [len(row) for row in ids]}

    started = time.perf_counter()
    dataset = load_dataset("json", data_files=corpus, split="train", cache_dir=str(cache))
    mapped = dataset.map(
        tokenize,
        batched=True,
        num_proc=2,
        remove_columns=dataset.column_names,
        cache_file_name=str(cache / "mapped.arrow"),
    )
    seconds = time.perf_counter() - started
    lengths = mapped.data.column("length")
    return {
        "seconds": seconds,
        "documents": len(mapped),
        "tokens": int(sum(chunk.sum().as_py() for chunk in lengths.chunks)),
    }


def main(method: str, corpus: str, out: str, url: str, tokenizer: str, output_format: str) -> dict[str, Any]:
    """One run (see the module docstring); its figures."""
    if method != "service":
        os.environ["TOKENIZERS_PARALLELISM"] = "true"  # datasets turns it off in the processes it forks
    cpu = time.process_time()
    if method == "datasets_map":
        result = run_datasets_map(corpus, out, tokenizer)
    else:
        result = run_pipeline(method, corpus, out, url, tokenizer, output_format)
    result.update(
        method=method,
        format=output_format if method != "datasets_map" else "arrow cache",
        cpu_seconds=time.process_time() - cpu,
        peak_rss_mb=peak_rss_mb(),
        tokenizers_imported="tokenizers" in sys.modules,
    )
    return result
