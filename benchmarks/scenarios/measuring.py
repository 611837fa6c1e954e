"""What scenarios 1, 2, 4 and the RSS soak share: the run's text sets (the same texts on both sides), and per
tokenizer one in-process worker and one batching-on server, started once for all of them (:func:`sides`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import orjson

from benchmarks import corpus
from benchmarks.harness import (
    CpuProbe,
    Row,
    Settings,
    answer_lines,
    busy_note,
    log,
    medians,
    percentiles,
)
from benchmarks.processes import SAFETENSORS_MEDIA_TYPE, BenchServer, InProcessWorker
from service.sizing import available_cpus

OPTIONS_BATCH: dict[str, Any] = {"padding": "longest", "truncation": True, "max_length": 128}  # scenarios 1, 2
OPTIONS_LONG: dict[str, Any] = {"padding": "longest", "truncation": False}  # scenario 4: whole texts
MAX_BATCHES = 20_000  # per one-client measurement, whatever its duration (smoke: 8)

# A variant measured from one client: (label, where: "inprocess" or "service", method or media type)
Variant = tuple[str, str, str]
BASELINES: tuple[Variant, ...] = (
    ("in-process encode_batch", "inprocess", "encode_batch"),
    ("in-process encode_batch_fast", "inprocess", "encode_batch_fast"),
    ("in-process transformers __call__(pt)", "inprocess", "call"),
)
SHORT_NAMES = {"in-process encode_batch": "enc", "in-process encode_batch_fast": "fast"}
SHORT_NAMES["in-process transformers __call__(pt)"] = "call"


@dataclass(frozen=True)
class TextCounts:
    """How many texts each set holds, and the text lengths of scenario 4."""

    cell: int = 1024  # per scenario-1 cell
    sweep: int = 2048
    s2: int = 1024
    long_lengths: tuple[int, ...] = (100, 1_000, 10_000, 50_000)


TEXTS_FULL, TEXTS_SMOKE = TextCounts(), TextCounts(cell=256, sweep=256, s2=64, long_lengths=(100, 400))


def long_text_batch(chars: int) -> int:
    """Texts per request in scenario 4: ~256k characters per request, 1 to 256 texts."""
    return max(1, min(256, 256_000 // chars))


@cache
def text_sets(counts: TextCounts) -> dict[str, list[str]]:
    """Every text set of scenarios 1, 2 and 4, by name."""
    sets = {
        f"{language}-{bucket}": corpus.bucket_texts(language, bucket, counts.cell)
        for language in corpus.LANGUAGES
        for bucket in corpus.BUCKETS
    }
    sets["mixed-medium"] = corpus.mixed_texts("medium", counts.sweep)
    sets["s2"] = corpus.mixed_texts("medium", counts.s2, seed=2)
    for chars in counts.long_lengths:
        sets[f"chars-{chars}"] = corpus.mixed_texts(f"chars:{chars}", 2 * long_text_batch(chars), seed=4)
    return sets


def _decode(payload: bytes, accept: str) -> dict[str, Any]:
    """An answer decoded into torch tensors, as a training loop would use it."""
    if accept == SAFETENSORS_MEDIA_TYPE:
        from safetensors.torch import load

        return load(payload)
    import numpy as np
    import torch

    return {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in orjson.loads(payload).items()}


def time_batches(encode: Any, batches: list[list[str]], tokens: list[int], seconds: float, max_batches: int) -> dict:
    """Call ``encode`` on ``batches`` in turn until ``seconds`` passed or ``max_batches`` calls were made; the calls,
    texts, real tokens (``tokens[i]``: of ``batches[i]``), seconds and every call's latency. Both sides use it."""
    done = texts = real_tokens = 0
    latencies: list[float] = []
    start = time.perf_counter()
    while True:
        i = done % len(batches)
        t0 = time.perf_counter()
        encode(batches[i])
        latencies.append(time.perf_counter() - t0)
        done, texts, real_tokens = done + 1, texts + len(batches[i]), real_tokens + tokens[i]
        elapsed = time.perf_counter() - start
        if elapsed >= seconds or done >= max_batches:
            return {"batches": done, "texts": texts, "tokens": real_tokens, "seconds": elapsed, "latencies": latencies}


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median rates over rounds; latencies pooled; CPU per request over every round."""
    requests = sum(r["batches"] for r in runs)
    rates = [{"texts_per_s": r["texts"] / r["seconds"], "tokens_per_s": r["tokens"] / r["seconds"]} for r in runs]
    return {
        **{k: v for k, v in medians(rates).items() if k != "rounds"},
        "rounds_texts_per_s": [round(r["texts_per_s"], 1) for r in rates],
        "latency_ms": percentiles([x for r in runs for x in r["latencies"]]),
        "requests": requests,
        "server_or_worker_cpu_ms_per_request": 1000 * sum(r["cpu"]["watched_cpu_seconds"] for r in runs) / requests,
        "client_cpu_ms_per_request": 1000 * sum(r["cpu"]["client_cpu_seconds"] for r in runs) / requests,
        "other_cpu_cores": max(r["cpu"]["other_cpu_cores"] for r in runs),
    }


def shared_server(settings: Settings, tokenizer: str) -> BenchServer:
    """The tokenizer's batching-on server, started on first use and shared by the run's scenarios."""
    server: BenchServer = settings.share(f"server:{tokenizer}", BenchServer(tokenizer, True, settings.log_dir).start)
    return server


class Sides:
    """One tokenizer's two sides of a one-client comparison: the in-process worker and the batching-on server, both
    shared by the run's scenarios (the runner stops them at its end)."""

    def __init__(self, settings: Settings, tokenizer: str) -> None:
        self.tokenizer = tokenizer
        self.sets = text_sets(settings.counts(TEXTS_FULL, TEXTS_SMOKE))
        self.max_batches = 8 if settings.smoke else MAX_BATCHES
        texts_file = settings.work_dir / "texts.json"
        if not texts_file.exists():
            texts_file.write_text(json.dumps(self.sets, ensure_ascii=False), "utf-8")
        log(f"{tokenizer}: starting the batching-on server and the in-process worker")
        self.server = shared_server(settings, tokenizer)
        worker = InProcessWorker(tokenizer, texts_file, settings.log_dir, available_cpus())
        self.worker: InProcessWorker = settings.share(f"worker:{tokenizer}", worker.start)
        self._tokens: dict[tuple[str, int, str], list[int]] = {}

    def stop(self) -> None:
        """Nothing of its own to stop: the runner stops the shared worker and server."""

    def measure(self, variant: Variant, set_name: str, batch: int, options: dict[str, Any], seconds: float) -> dict:
        """One measurement of one variant on one text set: counts, latencies, CPU."""
        _, where, what = variant
        if where == "inprocess":
            return self.worker.measure(what, set_name, batch, options, seconds, self.max_batches)
        batches = corpus.batches_of(self.sets[set_name], batch)

        def one(texts: list[str]) -> dict[str, Any]:
            return _decode(self.server.encode(orjson.dumps({"texts": texts, **options}), what), what)

        key = (set_name, batch, json.dumps(options, sort_keys=True))
        if key not in self._tokens:  # an untimed pass that also counts the real (unpadded) tokens
            self._tokens[key] = [int(one(b)["attention_mask"].sum()) for b in batches]
        else:
            one(batches[0])
        probe = CpuProbe(self.server.pid)
        before = probe.snapshot()
        timed = time_batches(one, batches, self._tokens[key], seconds, self.max_batches)
        return {**timed, "cpu": CpuProbe.delta(before, probe.snapshot())}


def sides(settings: Settings, tokenizer: str) -> Sides:
    """The tokenizer's worker and server, started on first use and shared by the run's scenarios."""
    return settings.share(f"sides:{tokenizer}", lambda: Sides(settings, tokenizer))  # type: ignore[no-any-return]


def versus(value: float, group: dict[str, dict[str, Any]], key: str) -> str:
    """``value`` against each in-process baseline of ``group`` (label -> figures): "1.20x enc, 0.95x fast, ..."."""
    return ", ".join(
        f"{value / group[label][key]:.2f}x {short}" for label, short in SHORT_NAMES.items() if label in group
    )


def one_client_rows(
    scenario: str, figures: list[dict[str, Any]], texts: Callable[[dict[str, Any]], str], key: str
) -> list[Row]:
    """The rows of one-client figures (scenarios 1 and 4) by tokenizer and ``texts``: ``key`` against in-process
    ``encode_batch``, and the service's against every in-process baseline."""
    groups: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for figure in figures:
        groups.setdefault((figure["tokenizer"], texts(figure)), {})[figure["label"]] = figure
    out = []
    for (tokenizer, text_set), group in groups.items():
        enc = group[BASELINES[0][0]][key]
        for label, figure in group.items():
            ratio = "baseline" if label == BASELINES[0][0] else f"{figure[key] / enc:.2f}x enc"
            ratio = versus(figure[key], group, key) if figure["where"] == "service" else ratio
            out.append(one_client_row(scenario, tokenizer, text_set, figure, ratio))
    return out


def one_client_row(scenario: str, tokenizer: str, texts: str, figures: dict[str, Any], ratio: str) -> Row:
    """A table row of a one-client figure."""
    lat = figures["latency_ms"]
    service = figures.get("where") == "service"
    return {
        "scenario": scenario,
        "tokenizer": tokenizer,
        "texts": texts,
        "variant": figures["label"],
        "rate": figures["texts_per_s"],
        "tokens_rate": figures["tokens_per_s"],
        "ratio": ratio,
        "latency": "/".join(f"{lat[k]:.3g}" for k in ("p50", "p90", "p99")),
        "cpu": f"srv {figures['server_or_worker_cpu_ms_per_request']:.3g} "
        f"cli {figures['client_cpu_ms_per_request']:.3g}"
        if service
        else "",
        "note": busy_note(figures["other_cpu_cores"]),
    }


# -- the in-process side, in a process of its own ----------------------------------------------------------
class Baselines:
    """What a user would do instead of the service, in the in-process worker's process (Rust parallelism on, never
    forked): ``encode_batch`` or ``encode_batch_fast`` (padding and truncation set on the Rust tokenizer) or ``call``
    (``tokenizer(texts, ..., return_tensors="pt")``) timed over a set's batches, after an untimed pass that counts
    the real tokens."""

    def __init__(self, tokenizer_dir: str, texts_file: str) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        # A second copy for the raw Rust calls: transformers' __call__ sets padding and truncation on its own
        # backend, so the two baselines never see each other's state.
        self.rust = AutoTokenizer.from_pretrained(tokenizer_dir).backend_tokenizer
        self.sets: dict[str, list[str]] = json.loads(Path(texts_file).read_text("utf-8"))

    def _function(self, method: str, options: dict[str, Any]) -> tuple[Any, Any]:
        """The call to time, and how to count the real tokens of its answer."""
        tok = self.tokenizer
        if method == "call":
            return lambda batch: tok(batch, return_tensors="pt", **options), lambda out: int(
                out["attention_mask"].sum()
            )
        if options.get("truncation"):
            max_length = options.get("max_length") or tok.model_max_length
            self.rust.enable_truncation(max_length, strategy="longest_first", direction=tok.truncation_side)
        else:
            self.rust.no_truncation()
        if options.get("padding") == "longest":
            pad = {"pad_id": tok.pad_token_id, "pad_type_id": tok.pad_token_type_id, "pad_token": tok.pad_token}
            self.rust.enable_padding(direction=tok.padding_side, **pad)
        else:
            self.rust.no_padding()
        return getattr(self.rust, method), lambda out: sum(sum(e.attention_mask) for e in out)

    def measure(
        self, method: str, set_name: str, batch: int, options: dict[str, Any], seconds: float, max_batches: int
    ) -> dict[str, Any]:
        if method not in ("encode_batch", "encode_batch_fast", "call"):
            raise ValueError(f"unknown method {method!r}")
        batches = corpus.batches_of(self.sets[set_name], batch)
        function, count_tokens = self._function(method, options)
        tokens = [count_tokens(function(b)) for b in batches]  # untimed warm-up pass
        cpu = time.process_time()
        timed = time_batches(function, batches, tokens, seconds, max_batches)
        return {"method": method, **timed, "cpu_seconds": time.process_time() - cpu}


def baselines_main() -> int:
    """The in-process worker's process (:class:`~benchmarks.processes.InProcessWorker` starts it)."""
    held: list[Baselines] = []

    def handle(command: dict[str, Any]) -> dict[str, Any]:
        op = command.pop("op")
        if op == "setup":
            held.append(Baselines(command["tokenizer"], command["texts_file"]))
            return {}
        return held[-1].measure(**command)

    return answer_lines(handle)
