"""The in-process baselines, measured in their own process: what a user would do instead of the service.

Run by the benchmark as a subprocess (``benchmarks.processes.InProcessWorker``) that reads one JSON command per line on stdin and answers one JSON line on stdout, so the baselines never share a
GIL or an event loop with the load generator, and rounds of in-process and service measurements can be
interleaved.

Rust parallelism is on (its starter sets ``TOKENIZERS_PARALLELISM=true``) and this process never forks, so the rayon pool stays usable. Commands:

- ``{"op": "setup", "tokenizer": DIR, "texts_file": PATH}`` loads the tokenizer like a user
  (``AutoTokenizer.from_pretrained``) and the named text sets;
- ``{"op": "measure", "method": M, "set_name": NAME, "batch": B, "options": {...}, "seconds": S,
  "max_batches": N}`` times method M (``encode_batch``, ``encode_batch_fast``: the Rust tokenizer with
  padding and truncation set on it; ``call``: ``tokenizer(texts, ..., return_tensors="pt")``) over the
  set's batches, after one untimed pass that also counts the real (unpadded) tokens;
- ``{"op": "quit"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.corpus import batches_of
from benchmarks.scenarios.measuring import time_batches

METHODS = ("encode_batch", "encode_batch_fast", "call")


class Baselines:
    def __init__(self, tokenizer_dir: str, texts_file: str) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        # A second copy for the raw Rust calls: transformers' __call__ sets padding and truncation on
        # its own backend, so the two baselines never see each other's state.
        self.rust = AutoTokenizer.from_pretrained(tokenizer_dir).backend_tokenizer
        self.sets: dict[str, list[str]] = json.loads(Path(texts_file).read_text("utf-8"))
        self._tokens: dict[tuple, list[int]] = {}

    def _configure_rust(self, options: dict[str, Any]) -> None:
        tok = self.tokenizer
        if options.get("truncation"):
            self.rust.enable_truncation(
                max_length=options.get("max_length") or tok.model_max_length,
                strategy="longest_first",
                direction=tok.truncation_side,
            )
        else:
            self.rust.no_truncation()
        if options.get("padding") == "longest":
            self.rust.enable_padding(
                direction=tok.padding_side,
                pad_id=tok.pad_token_id,
                pad_type_id=tok.pad_token_type_id,
                pad_token=tok.pad_token,
            )
        else:
            self.rust.no_padding()

    def _function(
        self, method: str, options: dict[str, Any]
    ) -> tuple[Callable[[list[str]], Any], Callable[[Any], int]]:
        if method == "call":
            tokenizer = self.tokenizer

            def call(batch: list[str]) -> Any:
                return tokenizer(batch, return_tensors="pt", **options)

            return call, lambda out: int(out["attention_mask"].sum())
        self._configure_rust(options)
        encode = getattr(self.rust, method)
        return encode, lambda out: sum(sum(e.attention_mask) for e in out)

    def measure(
        self, method: str, set_name: str, batch: int, options: dict[str, Any], seconds: float, max_batches: int
    ) -> dict[str, Any]:
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; one of {METHODS}")
        batches = batches_of(self.sets[set_name], batch)
        fn, count_tokens = self._function(method, options)
        key = (set_name, batch, json.dumps(options, sort_keys=True))
        tokens = [count_tokens(fn(b)) for b in batches]  # untimed warm-up pass
        self._tokens.setdefault(key, tokens)
        cpu0 = time.process_time()
        timed = time_batches(fn, batches, tokens, seconds, max_batches)
        return {"method": method, **timed, "cpu_seconds": time.process_time() - cpu0}


def main() -> None:
    baselines: Baselines | None = None
    for line in sys.stdin:
        command = json.loads(line)
        op = command.pop("op")
        try:
            if op == "quit":
                break
            if op == "setup":
                baselines = Baselines(command["tokenizer"], command["texts_file"])
                answer: dict[str, Any] = {"ok": True, "pid": os.getpid()}
            elif op == "measure":
                assert baselines is not None, "setup first"
                answer = {"ok": True, **baselines.measure(**command)}
            else:
                raise ValueError(f"unknown op {op!r}")
        except Exception as exc:  # noqa: BLE001 -- report any failure, keep serving: the orchestrator decides
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
