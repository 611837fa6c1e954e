"""The benchmark's one table: a row per figure (absolute figures and the ratios measured in the same run), a
section per scenario, then memory and the targets; rendered as fixed-width text.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from benchmarks import corpus, loadgen
from benchmarks.machine import BUSY_CORES
from benchmarks.profiles import Profile
from benchmarks.scaling import ONE_REPLICA, TWO_REPLICAS, WORKAROUND
from benchmarks.scenarios import (
    batch_sizes,
    chat,
    concurrency,
    cpu_split,
    dataloader,
    long_texts,
    padding,
    pretokenize,
    scaling,
)

COLUMNS = (
    ("scenario", "#"),
    ("tokenizer", "tokenizer"),
    ("texts", "texts"),
    ("variant", "variant"),
    ("rate", "texts/s"),
    ("tokens_rate", "tokens/s"),
    ("ratio", "ratio (same run)"),
    ("latency", "latency p50/p90/p99 ms"),
    ("cpu", "CPU ms per request"),
    ("note", "note"),
)
BUCKET_NAMES = {"short": "short <100", "medium": "medium ~300", "long": "long ~1000"}
LEGEND = (
    "texts/s and tokens/s: medians over rounds; tokens are real (unpadded) tokens; 'enc' = in-process "
    "encode_batch, 'fast' = in-process encode_batch_fast (the strongest in-process baseline), 'call' = "
    "in-process transformers __call__; CPU ms per request: srv = server process (all threads), cli = this "
    "load generator"
)

Row = dict[str, Any]


def human(value: float | None) -> str:
    """3 significant figures, k/M suffixes: 12345 -> 12.3k."""
    if value is None or math.isnan(value):
        return "-"
    for threshold, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}"


def render(results: dict[str, Any], rows: list[Row]) -> str:
    """The table as printed and written to benchmark.txt: a title line, the legend, the rows."""
    meta = results["meta"]
    title = (
        f"tokenizer-service benchmark ({'smoke' if meta['smoke'] else 'full'}; {meta['cpus']} CPUs; "
        f"load generator: {loadgen.LOAD_GENERATOR}; {meta['seconds']:.0f} s)"
    )
    return "\n".join([title, LEGEND, format_table(rows)])


def format_table(rows: list[Row]) -> str:
    """Fixed-width columns, the empty ones dropped, a rule between scenarios."""
    cells = [[str(row.get(key, "") if row.get(key) is not None else "") for key, _ in COLUMNS] for row in rows]
    headers = [title for _, title in COLUMNS]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    # drop columns that are empty in every row
    keep = [i for i in range(len(headers)) if any(c[i] for c in cells)]

    def line(values: list[str]) -> str:
        return " | ".join(values[i].ljust(widths[i]) for i in keep).rstrip()

    out = [line(headers), "-+-".join("-" * widths[i] for i in keep)]
    previous = None
    for row, values in zip(rows, cells, strict=True):
        section = row.get("scenario")
        if previous is not None and section != previous:
            out.append("-+-".join("-" * widths[i] for i in keep))
        previous = section
        out.append(line(values))
    return "\n".join(out)


def build_table(results: dict[str, Any], profile: Profile) -> list[Row]:
    """Every row of the table, scenario by scenario, then memory, then the targets."""
    return [
        *_scenario1(results["scenario1"], profile),
        *_scenario2(results["scenario2"], profile),
        *_scenario3(results["scenario3"]),
        *_scenario4(results["scenario4"], profile),
        *_scenario5(results["scenario5"]),
        *_scenario6(results["scenario6"]),
        *_scenario7(results.get("scenario7", {})),
        *_scenario8(results.get("scenario8", {})),
        *_split(results.get("split", {})),
        *_scaling(results.get("scaling", {})),
        *_memory(results),
        *_targets(results["targets"]),
    ]


# The in-process baselines every service figure is set against, and their short names in the ratio column.
BASELINES = (
    ("in-process encode_batch", "enc"),
    ("in-process encode_batch_fast", "fast"),
    ("in-process transformers __call__(pt)", "call"),
)


def versus(value: float, group: dict[str, dict[str, Any]], key: str) -> str:
    """``value`` against each in-process baseline of ``group`` (label -> figures): "1.20x enc, 0.95x fast, ..."."""
    return ", ".join(f"{value / group[label][key]:.2f}x {short}" for label, short in BASELINES if label in group)


def _busy(other: float) -> str:
    return f"busy machine: +{other:.2f} cores" if other > BUSY_CORES else ""


def _latency(lat: dict[str, float]) -> str:
    return "/".join(f"{lat[k]:.3g}" for k in ("p50", "p90", "p99"))


def _scenario1(s1: dict[str, Any], profile: Profile) -> list[Row]:
    rows: list[Row] = []
    for tok in profile.tokenizers:
        for lang in corpus.LANGUAGES:
            for bucket in corpus.BUCKETS:
                group = {
                    c["label"]: c
                    for c in s1["cells"]
                    if (c["tokenizer"], c["language"], c["bucket"]) == (tok, lang, bucket)
                }
                if not group:
                    continue
                enc = group["in-process encode_batch"]["texts_per_s"]
                for label, _, _ in batch_sizes.METHODS:
                    c = group[label]
                    r = c["texts_per_s"]
                    if label == "in-process encode_batch":
                        ratio_text = "baseline"
                    elif label in ("service JSON", "service binary"):
                        ratio_text = versus(r, group, "texts_per_s")
                    else:
                        ratio_text = f"{r / enc:.2f}x enc"
                    service = c["where"] == "service"
                    rows.append(
                        {
                            "scenario": "1",
                            "tokenizer": tok,
                            "texts": f"{lang} {BUCKET_NAMES[bucket]}",
                            "variant": label,
                            "rate": human(r),
                            "tokens_rate": human(c["tokens_per_s"]),
                            "ratio": ratio_text,
                            "latency": _latency(c["latency_ms"]),
                            "cpu": (
                                f"srv {c['server_or_worker_cpu_ms_per_request']:.3g} "
                                f"cli {c['client_cpu_ms_per_request']:.3g}"
                                if service
                                else ""
                            ),
                            "note": _busy(c["other_cpu_cores"]),
                        }
                    )
    return rows


def _scenario2(s2: dict[str, Any], profile: Profile) -> list[Row]:
    rows: list[Row] = []
    for tok in profile.tokenizers:
        inproc = s2["inprocess"].get(tok)
        runs = {(r["mode"], r["concurrency"]): r for r in s2["runs"] if r["tokenizer"] == tok}
        if not runs or not inproc:
            continue
        baselines = s2.get("inprocess_baselines", {}).get(tok) or {"in-process encode_batch": inproc}
        for clients in profile.concurrency:
            for mode, (_, _, label) in concurrency.MODES.items():
                if (mode, clients) not in runs:
                    continue
                r = runs[(mode, clients)]
                off = runs.get(("off", clients))
                note = [f"{r['errors']} non-200"] if r["errors"] else []
                if _busy(r["other_cpu_cores"]):
                    note.append(_busy(r["other_cpu_cores"]))
                rows.append(
                    {
                        "scenario": "2",
                        "tokenizer": tok,
                        "texts": "mixed ~300, 1/request",
                        "variant": f"{clients} clients, {label}",
                        "rate": human(r["rate"]),
                        "ratio": (f"{r['rate'] / off['rate']:.2f}x off, " if mode != "off" and off else "")
                        + versus(r["rate"], baselines, "texts_per_s"),
                        "latency": _latency(r["latency_ms"]),
                        "cpu": f"srv {r['server_cpu_ms_per_request']:.3g} cli {r['client_cpu_ms_per_request']:.3g}",
                        "note": "; ".join(note),
                    }
                )
        for label, figures in baselines.items():
            rows.append(
                {
                    "scenario": "2",
                    "tokenizer": tok,
                    "texts": "mixed ~300, 256/call",
                    "variant": f"{label}, batches of 256",
                    "rate": human(figures["texts_per_s"]),
                    "tokens_rate": human(figures["tokens_per_s"]),
                    "ratio": "baseline",
                    "cpu": f"{figures['cpu_ms_per_text']:.3g} per text",
                    "note": _busy(figures["other_cpu_cores"]),
                }
            )
    return rows


def _scenario8(s8: dict[str, Any]) -> list[Row]:
    for outcome in ("skipped", "failed"):
        if outcome in s8:
            note = f"{outcome}: {s8[outcome]}"
            return [{"scenario": "8", "variant": "conversations (chat_compare.py)", "note": note}]
    rows: list[Row] = []
    baselines = {
        "service binary ragged": "in-process apply_chat_template",
        "service binary ragged, 2 clients": "in-process apply_chat_template",
        "service binary padded (pt)": "in-process apply_chat_template padded (pt)",
        "service ids only (no masks)": "in-process ids only (no masks)",
        "service render (/chat/render)": "in-process render (tokenize=False)",
        "service encode of the rendered texts": "in-process encode of the rendered texts",
    }
    for size, figures in chat.throughput(s8).items():
        rates = figures["conversations_per_s"]
        for name, value in rates.items():
            baseline = baselines.get(name)
            rows.append(
                {
                    "scenario": "8",
                    "texts": f"{size} conversations",
                    "variant": name,
                    "rate": human(value) + " conv/s",
                    "ratio": f"{value / rates[baseline]:.2f}x in-proc" if baseline else "baseline",
                }
            )
    for cell in chat.loader_cells(s8):
        label = f"DataLoader {cell['workers']} workers, batch {cell['batch_size']}"
        for name in ("in-process", "chat collator"):
            figures = cell[name]
            rows.append(
                {
                    "scenario": "8",
                    "texts": label,
                    "variant": name,
                    "rate": human(figures["batches_per_s"]) + " b/s",
                    "ratio": "baseline" if name == "in-process" else f"{cell['ratio_vs_inprocess']:.2f}x in-proc",
                    "cpu": f"collate {figures['collate_cpu_ms_per_batch']:.3g} + srv "
                    f"{figures['server_cpu_ms_per_batch']:.3g}/batch",
                }
            )
    return rows


def _split(split: dict[str, Any]) -> list[Row]:
    for outcome in ("skipped", "failed"):
        if outcome in split:
            return [
                {"scenario": "split", "variant": "CPU split (cpu_split.py)", "note": f"{outcome}: {split[outcome]}"}
            ]
    rows: list[Row] = []
    for row in cpu_split.rows(split):
        server, worker = row["server"], row["worker"]
        rows.append(
            {
                "scenario": "split",
                "texts": f"256 x {row['label']}",
                "variant": "one serve process, 3 clients",
                "rate": f"ceiling {human(server['ceiling_batches_per_s'])} b/s",
                "ratio": f"GIL {100 * server['gil_side_ms'] / server['process_ms']:.0f}% of its CPU",
                "cpu": f"GIL side {server['gil_side_ms']:.3g} + Rust pool {server['rust_pool_ms']:.3g}/batch; "
                f"1 worker {worker['cpu_ms']:.3g}",
                "note": _busy(server["other_cpu_cores"]),
            }
        )
    return rows


def _scaling(section: dict[str, Any]) -> list[Row]:
    for outcome in ("skipped", "failed"):
        if outcome in section:
            return [
                {"scenario": "scaling", "variant": "scaling (scaling.py)", "note": f"{outcome}: {section[outcome]}"}
            ]
    corpora = scaling.corpora(section)
    if not corpora:
        return []
    rows: list[Row] = []
    for row in corpora:
        server, worker = row["split"]["server"], row["split"]["worker"]
        rows.append(
            {
                "scenario": "scaling",
                "texts": f"256 x {row['label']}",
                "variant": "split: one serve process (measured)",
                "ratio": f"(G+R)/G = {row['projection'][0]['fed_cores']:.1f} cores fed",
                "cpu": f"G {server['gil_side_ms']:.3g} + R {server['rust_pool_ms']:.3g}, "
                f"W {worker['cpu_ms']:.3g}/batch",
                "note": _busy(server["other_cpu_cores"]),
            }
        )
        cells = {(c["cores"], c["path"], c["variant"]): c for c in row["cells"]}
        for ratios in row["ratios"]:
            cores, path = ratios["cores"], ratios["path"]
            group = [cells[(cores, path, variant)] for variant in (ONE_REPLICA, TWO_REPLICAS)]
            work = cells[(cores, path, WORKAROUND)]
            others = max(c["figures"]["other_cpu_cores"] for c in (*group, work))
            two = ratios["two_vs_one"]
            rows.append(
                {
                    "scenario": "scaling",
                    "texts": f"{row['name']}, {path}",
                    "variant": f"measured, {cores} core(s): 1r x 2t / 2r x 1t / workaround",
                    "rate": " / ".join(human(c["figures"]["batches_per_s"]) for c in (*group, work)) + " b/s",
                    "ratio": f"2r {two['median']:.2f}x 1r [{two['min']:.2f}-{two['max']:.2f}], "
                    f"{ratios['one_vs_workaround']['median']:.2f}x / {ratios['two_vs_workaround']['median']:.2f}x "
                    "workaround",
                    "cpu": f"client {statistics.mean(c['figures']['client_cpu_ms'] for c in group):.3g}/batch",
                    "note": f"others used {others:.2f} of the {cores} core(s)" if others > BUSY_CORES else "",
                }
            )
        for projected in row["projection"]:
            for point in projected["points"]:
                rows.append(
                    {
                        "scenario": "scaling",
                        "texts": f"{row['name']}, {projected['path']}",
                        "variant": f"PROJECTION, {point['cores']} cores: one process / auto "
                        f"({point['auto_replicas']} x {point['auto_threads']}) / workaround",
                        "rate": f"{human(point['one_process'])} / {human(point['auto'])} / "
                        f"{human(point['workaround'])} b/s",
                        "ratio": f"auto {point['auto_vs_workaround']:.2f}x, one {point['one_vs_workaround']:.2f}x "
                        "workaround",
                        "note": "projection (model below), not measured",
                    }
                )
    rows.append(
        {
            "scenario": "scaling",
            "variant": "projection model",
            "note": f"{section['data']['model']}; assumptions: " + "; ".join(section["data"]["assumptions"]),
        }
    )
    return rows


def _scenario3(s3: dict[str, Any]) -> list[Row]:
    for outcome in ("skipped", "failed"):
        if outcome in s3:
            return [
                {"scenario": "3", "variant": "DataLoader (dataloader_compare.py)", "note": f"{outcome}: {s3[outcome]}"}
            ]
    rows: list[Row] = []
    for cell in dataloader.cells(s3):
        local = cell["in-process"]
        label = f"{cell['workers']} workers, batch {cell['batch_size']}"
        rows.append(
            {
                "scenario": "3",
                "texts": label,
                "variant": "in-process collate_fn (parallelism off)",
                "rate": human(local["batches_per_s"]) + " b/s",
                "ratio": "baseline",
                "cpu": f"collate {local['collate_cpu_ms_per_batch']:.3g}/batch",
            }
        )
        for name, ratios in cell["ratios_vs_inprocess"].items():
            figures = cell[name]
            rows.append(
                {
                    "scenario": "3",
                    "texts": label,
                    "variant": f"SDK collator ({name})",
                    "rate": human(figures["batches_per_s"]) + " b/s",
                    "ratio": f"{ratios['batches_per_s']:.2f}x in-proc",
                    "cpu": f"collate {figures['collate_cpu_ms_per_batch']:.3g} + srv "
                    f"{figures['server_cpu_ms_per_batch']:.3g} = "
                    f"{figures['collate_cpu_ms_per_batch'] + figures['server_cpu_ms_per_batch']:.3g}/batch",
                }
            )
    return rows


def _scenario4(s4: dict[str, Any], profile: Profile) -> list[Row]:
    rows: list[Row] = []
    for tok in profile.tokenizers:
        for chars in profile.long_lengths:
            group = {p["label"]: p for p in s4["points"] if p["tokenizer"] == tok and p["chars"] == chars}
            if not group:
                continue
            enc = group["in-process encode_batch"]["tokens_per_s"]
            for label, where, _ in long_texts.METHODS:
                p = group[label]
                if label == "in-process encode_batch":
                    ratio = "baseline"
                elif where == "service":
                    ratio = versus(p["tokens_per_s"], group, "tokens_per_s")
                else:
                    ratio = f"{p['tokens_per_s'] / enc:.2f}x enc"
                rows.append(
                    {
                        "scenario": "4",
                        "tokenizer": tok,
                        "texts": f"mixed {chars} chars, {p['texts_per_request']}/req",
                        "variant": label,
                        "rate": human(p["texts_per_s"]),
                        "tokens_rate": human(p["tokens_per_s"]),
                        "ratio": ratio,
                        "latency": _latency(p["latency_ms"]),
                        "note": _busy(p["other_cpu_cores"]),
                    }
                )
    return rows


def _scenario5(s5: dict[str, Any]) -> list[Row]:
    for outcome in ("skipped", "failed"):
        if outcome in s5:
            return [
                {"scenario": "5", "variant": "less padding (padding_compare.py)", "note": f"{outcome}: {s5[outcome]}"}
            ]
    rows: list[Row] = []
    data = s5["data"]
    settings, loader = data["settings"], data["dataloader"]
    for loop, by_variant in padding.loops(s5).items():
        label = (
            f"DataLoader, {settings['step_us_per_position']:g} us/position step"
            if loop == "training step"
            else "DataLoader, loader only"
        )
        for variant, figures in by_variant.items():
            rows.append(
                {
                    "scenario": "5",
                    "texts": label,
                    "variant": variant + (f" ({settings['random_batch_size']} rows)" if variant == "random" else ""),
                    "rate": human(figures["texts_per_s"]),
                    "tokens_rate": human(figures["real_tokens_per_s"]),
                    "ratio": "baseline"
                    if variant == "random"
                    else f"{figures['real_tokens_per_s_vs_random']:.2f}x random",
                    "cpu": f"srv {figures['server_cpu_ms_per_1k_real_tokens']:.3g}/1k tokens",
                    "note": f"padding {figures['padding_fraction']:.1%}, {figures['rows_per_batch']:.0f} rows/batch",
                }
            )
    rows[-1]["note"] += f"; the samplers counted {loader['texts_counted']} texts in {loader['counting_seconds']:.1f} s"
    for set_name, figures in padding.counts(s5).items():
        for variant, f in figures["variants"].items():
            rows.append(
                {
                    "scenario": "5",
                    "texts": f"{set_name} ({figures['texts']}, {figures['distinct']} distinct)",
                    "variant": variant,
                    "rate": human(f["texts_per_s"]),
                    "ratio": "baseline" if variant == "lengths" else f"{f['vs_lengths']:.2f}x lengths",
                    "cpu": f"in-process {f['client_cpu_ms_per_1k_texts']:.3g}/1k texts"
                    if variant == padding.IN_PROCESS_COUNT
                    else f"srv {f['server_cpu_ms_per_1k_texts']:.3g}, cli {f['client_cpu_ms_per_1k_texts']:.3g}"
                    "/1k texts",
                }
            )
    return rows


def _scenario6(s6: dict[str, Any]) -> list[Row]:
    medians = s6.get("medians", {})
    if not medians:
        return (
            [{"scenario": "6", "variant": "pre-tokenization", "note": f"skipped: {s6['skipped']}"}]
            if "skipped" in s6
            else []
        )
    corpus = s6["corpus"]
    texts = f"{corpus['bytes'] / 2**20:.0f} MiB JSONL, {corpus['documents']:,} docs"
    rows: list[Row] = []
    for method in pretokenize.METHODS:
        m = medians[method]
        ratios = [
            f"{m['tokens_per_s'] / medians[base]['tokens_per_s']:.2f}x {short}"
            for base, short in (("encode_batch", "enc"), ("datasets_map", "map"))
        ]
        busy = _busy(m["other_cpu_cores"])
        rows.append(
            {
                "scenario": "6",
                "tokenizer": corpus["tokenizer"],
                "texts": texts,
                "variant": m["label"],
                "rate": human(m["documents_per_s"]) + " docs/s",
                "tokens_rate": human(m["tokens_per_s"]),
                "ratio": ", ".join(ratios) if method == "service" else ("baseline" if method == "encode_batch" else ""),
                "note": f"peak RSS {m['peak_rss_mb']:.0f} MB" + (f"; {busy}" if busy else ""),
            }
        )
    memory = s6.get("memory", {})
    if "peak_rss_mb" in memory:
        rows.append(
            {
                "scenario": "6",
                "tokenizer": corpus["tokenizer"],
                "texts": f"{memory['input_bytes'] / 2**20:.0f} MiB JSONL",
                "variant": f"service worker alone, {memory['format']}",
                "tokens_rate": human(memory["tokens"] / memory["seconds"]),
                "note": f"peak RSS {memory['peak_rss_mb']:.0f} MB",
            }
        )
    return rows


def _scenario7(s7: dict[str, Any]) -> list[Row]:
    medians = s7.get("medians", {})
    if not medians:
        return (
            [{"scenario": "7", "variant": "object storage", "note": f"skipped: {s7['skipped']}"}]
            if "skipped" in s7
            else []
        )
    corpus = s7["corpus"]
    rows: list[Row] = []
    for where in ("local", "s3"):
        m = medians[where]
        busy = _busy(m["other_cpu_cores"])
        rows.append(
            {
                "scenario": "7",
                "tokenizer": corpus["tokenizer"],
                "texts": f"{corpus['bytes'] / 2**20:.0f} MiB JSONL, {corpus['documents']:,} docs",
                "variant": m["label"],
                "tokens_rate": human(m["tokens_per_s"]),
                "ratio": f"{m['tokens_per_s'] / medians['local']['tokens_per_s']:.2f}x local"
                if where == "s3"
                else "baseline",
                "note": f"peak RSS {m['peak_rss_mb']:.0f} MB" + (f"; {busy}" if busy else ""),
            }
        )
    memory = s7.get("memory", {})
    for where in ("local", "s3"):
        if where in memory:
            m = memory[where]
            rows.append(
                {
                    "scenario": "7",
                    "tokenizer": corpus["tokenizer"],
                    "texts": f"{memory['input_bytes'] / 2**20:.0f} MiB JSONL",
                    "variant": f"worker alone, {memory['format']}, {where}",
                    "tokens_rate": human(m["tokens"] / m["seconds"]),
                    "note": f"peak RSS {m['peak_rss_mb']:.0f} MB",
                }
            )
    return rows


def _memory(results: dict[str, Any]) -> list[Row]:
    servers = list(results["servers"].values())
    if "memory" in results["rss_soak"]:
        servers.append({**results["rss_soak"], "setup": results["rss_soak"]["setup"] + " (soak)"})
    rows: list[Row] = []
    for server in servers:
        memory = server["memory"]
        rows.append(
            {
                "scenario": "RSS",
                "tokenizer": server["name"].split(",")[0] if "name" in server else "",
                "variant": f"server, {server['setup']}",
                "note": f"RSS start {memory[0]['rss_mb']:.0f} MB, end {memory[-1]['rss_mb']:.0f} MB, "
                f"peak {max(m['peak_mb'] for m in memory):.0f} MB; torch "
                f"{'loaded' if server['torch_loaded'] else 'not loaded'}",
            }
        )
    return rows


def _targets(targets: list[dict[str, Any]]) -> list[Row]:
    rows: list[Row] = []
    for t in targets:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        measured = "-" if t["measured"] is None else f"{t['measured']:.3g}"
        extra = f" (worst cell {t['worst']:.2f})" if t.get("worst") is not None else ""
        rows.append(
            {
                "scenario": "target",
                "variant": t["target"],
                "ratio": f"{measured} vs {t.get('direction', '>=')} {t['threshold']:g}{extra}",
                "note": verdict + (f": {t['reason']}" if t.get("reason") else ""),
            }
        )
    return rows
