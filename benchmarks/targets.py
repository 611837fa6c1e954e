"""The benchmark's targets: what each is, its threshold, and whether this run's figures met it.

Each target is a ratio or a figure measured in this run (ratios of medians over rounds; for scenario 1 a
geometric mean over the text cells, with the worst cell shown). ``met`` is None when it was not measured.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from benchmarks.profiles import Profile
from benchmarks.scaling import PROJECTED_THRESHOLD, SPREADING_THRESHOLD, TARGET_CORES
from benchmarks.scenarios import chat, dataloader, padding, scaling

THRESHOLDS = {
    "s1_binary_vs_encode_batch": 0.9,
    "s1_binary_vs_encode_batch_fast": 0.8,
    "s1_json_vs_encode_batch_fast": 0.6,
    "s1_binary_vs_call": 1.2,
    "s1_json_vs_encode_batch": 0.7,
    "s2_on_vs_off": 1.5,
    "s2_on_vs_inprocess": 0.5,
    "s2_server_cpu_ms_per_request": 0.3,
    "rss_peak_mb": 300.0,
    "s3_dataloader_vs_collate_fn": 1.0,
    "s5_padding_cut": 0.5,
    "s6_service_vs_encode_batch": 0.8,
    "s6_service_vs_datasets_map": 1.0,
    "s6_worker_peak_rss_mb": 500.0,
    "s7_s3_vs_local": 0.8,
    "s7_s3_worker_peak_rss_mb": 500.0,
    "s5_real_tokens_vs_random": 1.3,
    "s5_lengths_vs_encode": 3.0,
    "s8_chat_encode_vs_apply_chat_template": 1.0,
    "s8_chat_collator_vs_collate_fn": 1.0,
}
S1_RATIOS = (  # target, service variant, baseline variant, baseline in the description
    ("s1_binary_vs_encode_batch", "service binary", "in-process encode_batch", "encode_batch"),
    ("s1_binary_vs_encode_batch_fast", "service binary", "in-process encode_batch_fast", "encode_batch_fast"),
    ("s1_binary_vs_call", "service binary", "in-process transformers __call__(pt)", "transformers __call__"),
    ("s1_json_vs_encode_batch", "service JSON", "in-process encode_batch", "encode_batch"),
    ("s1_json_vs_encode_batch_fast", "service JSON", "in-process encode_batch_fast", "encode_batch_fast"),
)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or zero."""
    return a / b if a and b else None


def geomean(values: list[float]) -> float | None:
    """Geometric mean of the non-zero values; None if there are none."""
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


class Targets:
    """The targets evaluated so far, in the order they are reported."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(
        self,
        name: str,
        description: str,
        measured: float | None,
        threshold: float,
        higher_is_better: bool = True,
        **details: Any,
    ) -> None:
        """Record one target: met when ``measured`` is on the right side of ``threshold``."""
        met = None if measured is None else (measured >= threshold if higher_is_better else measured <= threshold)
        self.items.append(
            {
                "target": name,
                "description": description,
                "direction": ">=" if higher_is_better else "<=",
                "threshold": threshold,
                "measured": None if measured is None else round(measured, 4),
                "met": met,
                **details,
            }
        )

    def add_per_cell(self, name: str, description: str, per_cell: dict[str, float], threshold: float) -> None:
        """A target on the geometric mean over cells, with the worst cell and whether every cell met it."""
        values = list(per_cell.values())
        self.add(
            name,
            description,
            geomean(values),
            threshold,
            worst=round(min(values), 4) if values else None,
            met_in_every_cell=all(v >= threshold for v in values) if values else None,
            per_cell={k: round(v, 4) for k, v in per_cell.items()},
        )


def evaluate_targets(results: dict[str, Any], profile: Profile) -> list[dict[str, Any]]:
    """Every target this run's results allow to evaluate, in report order."""
    targets = Targets()
    _scenario1(targets, results["scenario1"], profile)
    _scenario2(targets, results["scenario2"], profile)
    _memory(targets, results["rss_soak"], results["servers"])
    _scenario3(targets, results["scenario3"])
    _scenario5(targets, results["scenario5"])
    _scenario6(targets, results["scenario6"])
    _scenario7(targets, results.get("scenario7", {}))
    _scenario8(targets, results.get("scenario8", {}))
    _scaling(targets, results.get("scaling", {}))
    return targets.items


def _scenario1(targets: Targets, s1: dict[str, Any], profile: Profile) -> None:
    for tok in profile.tokenizers:
        by: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
        for c in s1["cells"]:
            if c["tokenizer"] == tok:
                by[(c["language"], c["bucket"])][c["label"]] = c["texts_per_s"]
        if not by:
            continue
        for key, service, base, base_label in S1_RATIOS:
            per_cell = {f"{lang} {bucket}": ratio(v.get(service), v.get(base)) for (lang, bucket), v in by.items()}
            measured = {k: v for k, v in per_cell.items() if v}
            targets.add_per_cell(
                f"{key}[{tok}]",
                f"scenario 1, {tok}: {service} / in-process {base_label}, batches "
                f"of 256 (geometric mean over the {len(measured)} text cells)",
                measured,
                THRESHOLDS[key],
            )


def _scenario2(targets: Targets, s2: dict[str, Any], profile: Profile) -> None:
    top = max(profile.concurrency)
    for tok in profile.tokenizers:
        run = {r["mode"]: r for r in s2["runs"] if r["tokenizer"] == tok and r["concurrency"] == top}
        inproc = s2["inprocess"].get(tok)
        if "on" not in run or "off" not in run or not inproc:
            continue
        on, off = run["on"], run["off"]
        targets.add(
            f"s2_on_vs_off[{tok}]",
            f"scenario 2, {tok}, {top} clients x 1 text: batching on / off",
            ratio(on["rate"], off["rate"]),
            THRESHOLDS["s2_on_vs_off"],
        )
        targets.add(
            f"s2_on_vs_inprocess[{tok}]",
            f"scenario 2, {tok}, {top} clients x 1 text: batching on / in-process encode_batch in batches of 256",
            ratio(on["rate"], inproc["texts_per_s"]),
            THRESHOLDS["s2_on_vs_inprocess"],
        )
        targets.add(
            f"s2_server_cpu_ms_per_request[{tok}]",
            f"scenario 2, {tok}, {top} clients, batching on: "
            "server CPU ms per request (utime+stime of all its threads, tokenizing included)",
            on["server_cpu_ms_per_request"],
            THRESHOLDS["s2_server_cpu_ms_per_request"],
            higher_is_better=False,
        )
        targets.add(
            f"s2_server_cpu_overhead_ms_per_request[{tok}]",
            f"scenario 2, {tok}, {top} clients, batching "
            "on: server CPU ms per request minus the CPU in-process encode_batch spends per text (the "
            "service's own overhead)",
            on["server_cpu_ms_per_request"] - inproc["cpu_ms_per_text"],
            THRESHOLDS["s2_server_cpu_ms_per_request"],
            higher_is_better=False,
            tokenizing_cpu_ms_per_text_in_process=round(inproc["cpu_ms_per_text"], 4),
        )


def _memory(targets: Targets, soak: dict[str, Any], servers: dict[str, dict[str, Any]]) -> None:
    if "peak_mb" in soak:
        targets.add(
            f"rss_peak_mb[{soak['name']}]",
            f"server RSS peak (VmHWM) over the soak, default tokenizer, {soak['setup']}",
            soak["peak_mb"],
            THRESHOLDS["rss_peak_mb"],
            higher_is_better=False,
            rss_start_mb=round(soak["rss_start_mb"], 1),
            rss_end_mb=round(soak["rss_end_mb"], 1),
            torch_loaded=soak["torch_loaded"],
        )
        rounds = [m["rss_mb"] for m in soak["memory"][1:]]
        half = max(1, len(rounds) // 2)
        early, late = max(rounds[:half]), max(rounds[-half:])
        targets.add(
            f"rss_growth_mb[{soak['name']}]",
            f"RSS flat under {len(rounds)} rounds of the same load: the "
            f"highest RSS of the last {half} round(s) minus the highest of the first {half}, at most 10% of "
            "the latter",
            late - early,
            round(0.10 * early, 1),
            higher_is_better=False,
            rss_after_each_round_mb=[round(x, 1) for x in rounds],
        )
    name = "default, batching on"  # the server that ran every scenario
    if name in servers:
        server = servers[name]
        memory = server["memory"]
        targets.add(
            f"rss_peak_mb[{name}]",
            f"server RSS peak (VmHWM), {name}, python -m service serve in this venv "
            f"(torch {'loaded' if server['torch_loaded'] else 'not loaded'})",
            max(m["peak_mb"] for m in memory),
            THRESHOLDS["rss_peak_mb"],
            higher_is_better=False,
            rss_start_mb=round(memory[0]["rss_mb"], 1),
            rss_end_mb=round(memory[-1]["rss_mb"], 1),
            torch_loaded=server["torch_loaded"],
        )


def _scenario3(targets: Targets, s3: dict[str, Any]) -> None:
    name, threshold = "s3_dataloader_vs_collate_fn", THRESHOLDS["s3_dataloader_vs_collate_fn"]
    cells = dataloader.cells(s3)
    if cells:
        per_cell = {
            f"{c['workers']} workers, batch {c['batch_size']}": c["ratios_vs_inprocess"]["sdk"]["batches_per_s"]
            for c in cells
        }
        targets.add_per_cell(
            name,
            "scenario 3: DataLoader batches/s through the SDK collator (default server) / "
            "in-process tokenization in the collate_fn, TOKENIZERS_PARALLELISM=false (geometric "
            f"mean over the {len(per_cell)} cells)",
            per_cell,
            threshold,
        )
    else:
        targets.items.append(
            {
                "target": name,
                "description": "scenario 3: >= 1.0x the in-process collate_fn baseline",
                "threshold": threshold,
                "measured": None,
                "met": None,
                "reason": s3.get("skipped") or s3["failed"],
            }
        )


def _scenario5(targets: Targets, s5: dict[str, Any]) -> None:
    loops, counts = padding.loops(s5), padding.counts(s5)
    if not loops or not counts:
        for name in ("s5_padding_cut", "s5_real_tokens_vs_random", "s5_lengths_vs_encode"):
            targets.items.append(
                {
                    "target": name,
                    "description": f"scenario 5: >= {THRESHOLDS[name]:g}",
                    "threshold": THRESHOLDS[name],
                    "measured": None,
                    "met": None,
                    "reason": s5.get("skipped") or s5.get("failed"),
                }
            )
        return
    settings = s5["data"]["settings"]
    budget = f"max_tokens={settings['max_tokens']}, max_length={settings['max_length']}"
    step, idle = loops["training step"], loops["loader only"]
    for variant in ("token budget", "packed"):
        targets.add(
            f"s5_padding_cut[{variant}]",
            f"scenario 5: padding fraction cut relative to random batches of {settings['random_batch_size']} "
            f"(padding='longest'), {variant} batches, {budget}",
            step[variant]["padding_cut_vs_random"],
            THRESHOLDS["s5_padding_cut"],
            padding_fraction=round(step[variant]["padding_fraction"], 4),
            random_padding_fraction=round(step["random"]["padding_fraction"], 4),
        )
        targets.add(
            f"s5_real_tokens_vs_random[{variant}]",
            f"scenario 5: real tokens/s into a training step of {settings['step_us_per_position']:g} us per padded "
            f"position, {variant} / random batches, {budget}",
            step[variant]["real_tokens_per_s_vs_random"],
            THRESHOLDS["s5_real_tokens_vs_random"],
            loader_only=round(idle[variant]["real_tokens_per_s_vs_random"], 4),
        )
    corpus, distinct = counts["reviews"]["variants"], counts["reviews, distinct only"]["variants"]
    targets.add(
        "s5_lengths_vs_encode",
        f"scenario 5: texts/s of /lengths / /encode (JSON) on the same {counts['reviews']['texts']} reviews, "
        f"{settings['chunk']} per request",
        1 / corpus["encode JSON"]["vs_lengths"],
        THRESHOLDS["s5_lengths_vs_encode"],
        vs_encode_binary=round(1 / corpus["encode binary padded"]["vs_lengths"], 4),
        distinct_texts_only=round(1 / distinct["encode JSON"]["vs_lengths"], 4),
        **_count_ceiling(corpus),
    )


def _count_ceiling(corpus: dict[str, Any]) -> dict[str, float]:
    """How near /lengths is to tokenizing alone in-process, and the best any exact count could do vs /encode."""
    in_process = corpus.get(padding.IN_PROCESS_COUNT)
    if in_process is None:  # results written before the ceiling was measured
        return {}
    return {
        "lengths_vs_in_process_tokenizing": round(1 / in_process["vs_lengths"], 4),
        "ceiling_in_process_tokenizing_vs_encode": round(
            in_process["vs_lengths"] / corpus["encode JSON"]["vs_lengths"], 4
        ),
    }


def _scenario6(targets: Targets, s6: dict[str, Any]) -> None:
    medians = s6.get("medians", {})
    if "service" in medians:
        corpus = s6["corpus"]
        service = medians["service"]["tokens_per_s"]
        for name, baseline, label in (
            ("s6_service_vs_encode_batch", "encode_batch", "in-process encode_batch (same reader and writer)"),
            ("s6_service_vs_datasets_map", "datasets_map", "datasets.map(num_proc=2) with the tokenizer in-process"),
        ):
            targets.add(
                name,
                f"scenario 6: pre-tokenizing {corpus['bytes'] / 2**20:.0f} MiB of JSON Lines, tokens/s of the "
                f"pretokenize worker / {label}",
                ratio(service, medians[baseline]["tokens_per_s"]),
                THRESHOLDS[name],
            )
    memory = s6.get("memory", {})
    if "peak_rss_mb" in memory:
        targets.add(
            "s6_worker_peak_rss_mb",
            f"scenario 6: peak RSS (VmHWM) of the pretokenize worker on {memory['input_bytes'] / 2**20:.0f} MiB of "
            f"JSON Lines, {memory['format']} format",
            memory["peak_rss_mb"],
            THRESHOLDS["s6_worker_peak_rss_mb"],
            higher_is_better=False,
            tokens=memory["tokens"],
            seconds=round(memory["seconds"], 1),
        )


def _scenario7(targets: Targets, s7: dict[str, Any]) -> None:
    medians = s7.get("medians", {})
    if {"local", "s3"} <= set(medians):
        targets.add(
            "s7_s3_vs_local",
            f"scenario 7: pre-tokenizing {s7['corpus']['bytes'] / 2**20:.0f} MiB of JSON Lines, tokens/s of the "
            "pretokenize worker from and to s3:// (loopback moto) / the same job on local files",
            ratio(medians["s3"]["tokens_per_s"], medians["local"]["tokens_per_s"]),
            THRESHOLDS["s7_s3_vs_local"],
        )
    memory = s7.get("memory", {})
    if "s3" in memory:
        targets.add(
            "s7_s3_worker_peak_rss_mb",
            f"scenario 7: peak RSS (VmHWM) of the pretokenize worker from and to s3:// on "
            f"{memory['input_bytes'] / 2**20:.0f} MiB of JSON Lines, {memory['format']} format (local: "
            f"{memory['local']['peak_rss_mb']:.0f} MB)",
            memory["s3"]["peak_rss_mb"],
            THRESHOLDS["s7_s3_worker_peak_rss_mb"],
            higher_is_better=False,
        )


def _scenario8(targets: Targets, s8: dict[str, Any]) -> None:
    figures, cells = chat.throughput(s8), chat.loader_cells(s8)
    if not figures or not cells:
        for name in ("s8_chat_encode_vs_apply_chat_template", "s8_chat_collator_vs_collate_fn"):
            targets.items.append(
                {
                    "target": name,
                    "description": f"scenario 8: >= {THRESHOLDS[name]:g}",
                    "threshold": THRESHOLDS[name],
                    "measured": None,
                    "met": None,
                    "reason": s8.get("skipped") or s8.get("failed") or "not run",
                }
            )
        return
    per_cell = {
        f"batch {size}, {form}": figures[size]["ratios"][key]
        for size in figures
        for form, key in (
            ("tensors (pt vs pt)", "pt_vs_apply_chat_template_pt"),
            ("ragged vs lists", "ragged_vs_apply_chat_template"),
        )
    }
    targets.add_per_cell(
        "s8_chat_encode_vs_apply_chat_template",
        "scenario 8: conversations/s of /chat/encode (binary, with masks) / in-process apply_chat_template on the "
        f"same conversations, one client (geometric mean over the {len(per_cell)} cells)",
        per_cell,
        THRESHOLDS["s8_chat_encode_vs_apply_chat_template"],
    )
    targets.add_per_cell(
        "s8_chat_collator_vs_collate_fn",
        "scenario 8: DataLoader batches/s through the chat collator / apply_chat_template with masks and TRL's "
        "labels in the collate_fn (TOKENIZERS_PARALLELISM=false)",
        {f"{c['workers']} workers, batch {c['batch_size']}": c["ratio_vs_inprocess"] for c in cells},
        THRESHOLDS["s8_chat_collator_vs_collate_fn"],
    )


SCALING_TARGETS = (  # name, kind of the rows (benchmarks.scaling's targets), threshold, description
    (
        "scaling_2_replicas_vs_1",
        "measured",
        SPREADING_THRESHOLD,
        "scenario scaling, measured here: batches/s of 2 replicas x 1 thread / 1 replica x 2 threads at the same "
        "cores (1 and 2), batches of 256 and the DataLoader collator, every row (the worst row shown)",
    ),
    (
        "scaling_2_replicas_vs_1_per_core_left",
        "measured, per core left",
        SPREADING_THRESHOLD,
        "scenario scaling, measured here: the same, of batches/s per core other processes left each variant (this "
        "machine is shared: two processes take more of busy cores than one), every row (the worst row shown)",
    ),
    (
        "scaling_auto_vs_workaround_projected",
        "projection",
        PROJECTED_THRESHOLD,
        "scenario scaling, a PROJECTION (benchmarks.projection's model fed by the split measured here): "
        f"replicas='auto' / the workaround (parallelism-off workers) on {TARGET_CORES} cores, every row (the worst "
        "row shown)",
    ),
)


def _scaling(targets: Targets, section: dict[str, Any]) -> None:
    rows = scaling.targets(section)
    for name, kind, threshold, description in SCALING_TARGETS:
        of_kind = [row for row in rows if row["kind"] == kind]
        if not of_kind:
            reason = section.get("skipped") or section.get("failed") or "not run"
            targets.items.append(
                {"target": name, "description": description, "threshold": threshold, "measured": None}
                | {"met": None, "reason": reason}
            )
            continue
        worst = min(of_kind, key=lambda row: row["measured"])
        targets.add(
            name,
            description,
            worst["measured"],
            threshold,
            worst=round(worst["measured"], 4),
            met_in_every_cell=all(row["met"] for row in of_kind),
            per_cell={row["target"]: round(row["measured"], 4) for row in of_kind},
        )
