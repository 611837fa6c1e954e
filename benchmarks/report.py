"""The benchmark's outputs in ``--out-dir``, made from every scenario's section: ``benchmark.json`` (every figure,
the targets and the table rows), ``benchmark.txt`` (the table) and the PNG plots.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from benchmarks.harness import Row, human, outcome_row
from benchmarks.processes import LOAD_GENERATOR
from benchmarks.scenarios import SCENARIOS

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
LEGEND = (
    "texts/s and tokens/s: medians over rounds; tokens are real (unpadded) tokens; 'enc' = in-process "
    "encode_batch, 'fast' = in-process encode_batch_fast (the strongest in-process baseline), 'call' = "
    "in-process transformers __call__; CPU ms per request: srv = server process (all threads), cli = this "
    "load generator"
)
PLOTS = {
    "batch": "throughput_vs_batch.png",
    "concurrency": "throughput_vs_concurrency.png",
    "latency": "latency_percentiles.png",
    "long_text": "long_text_scaling.png",
    "pretokenize": "pretokenize_throughput.png",
}


def table_rows(results: dict[str, Any]) -> list[Row]:
    """Every scenario's rows (or why it did not run), then a row per target."""
    rows: list[Row] = []
    for name, scenario in SCENARIOS.items():
        section = results.get(name, {})
        if name in results["meta"]["scenarios"]:
            rows += outcome_row(name, section) or scenario.rows(section)
    for item in results["targets"]:
        measured = "-" if item["measured"] is None else f"{item['measured']:.3g}"
        verdict = {True: "met", False: "MISSED", None: "not measured"}[item["met"]]
        note = f"{verdict}; {item['description']}" + (f" ({item['reason']})" if "reason" in item else "")
        rows.append(
            {
                "scenario": "targets",
                "variant": item["target"],
                "ratio": f"{measured} vs {item['threshold']:g}",
                "note": note,
            }
        )
    return rows


def format_table(rows: list[Row]) -> str:
    """Fixed-width columns, the empty ones dropped, a rule between scenarios; numbers as 3 significant figures."""
    cells = [
        [human(v) if isinstance(v := row.get(key), float | int) else str(v or "") for key, _ in COLUMNS] for row in rows
    ]
    headers = [title for _, title in COLUMNS]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    keep = [i for i in range(len(headers)) if any(c[i] for c in cells)]

    def line(values: list[str]) -> str:
        return " | ".join(values[i].ljust(widths[i]) for i in keep).rstrip()

    rule = "-+-".join("-" * widths[i] for i in keep)
    out, previous = [line(headers), rule], None
    for row, values in zip(rows, cells, strict=True):
        if previous is not None and row.get("scenario") != previous:
            out.append(rule)
        previous = row.get("scenario")
        out.append(line(values))
    return "\n".join(out)


def render(results: dict[str, Any]) -> str:
    """The table as printed and written to benchmark.txt: a title line, the legend, the rows."""
    meta = results["meta"]
    title = (
        f"tokenizer-service benchmark ({'smoke' if meta['smoke'] else 'full'}; {meta['cpus']} CPUs; other processes "
        f"used {meta['other_cpu_cores_at_start']:.2f} cores at the start; load generator: {LOAD_GENERATOR}; "
        f"{meta['seconds']:.0f} s)"
    )
    return "\n".join([title, LEGEND, format_table(table_rows(results))])


def targets_of(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target of the scenarios that ran, evaluated on their sections."""
    ran = [(name, scenario) for name, scenario in SCENARIOS.items() if name in results["meta"]["scenarios"]]
    return [item for name, scenario in ran for item in scenario.targets(results[name])]


def write(results: dict[str, Any], out_dir: Path) -> str:
    """Add the targets, the table rows and the plots to ``results``, write the JSON and the text table; the table."""
    results["targets"] = targets_of(results)
    results["table"] = table_rows(results)
    text = render(results)
    results["plots"] = draw_plots(results, out_dir)
    json_bytes = orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY, default=str)
    (out_dir / "benchmark.json").write_bytes(json_bytes)
    (out_dir / "benchmark.txt").write_text(text + "\n", "utf-8")
    return text


# -- plots ------------------------------------------------------------------------------------------------
def draw_plots(results: dict[str, Any], out_dir: Path) -> dict[str, str]:
    """The plots of the scenarios that ran: 1's sweep, 2's rates and latencies, 4's long texts, 6's methods."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    tokenizers, machine = results["meta"]["tokenizers"], f"{results['meta']['cpus']} CPUs"
    runs = results["2"].get("runs", [])
    latencies = [
        {**r, "label": f"{r['label']} {p}", "ms": r["latency_ms"][p]} for r in runs for p in ("p50", "p90", "p99")
    ]
    one_text = "1 text (~300 chars) per request"
    lines = {  # plot: title, points, x, y, x label, y label, log y
        "batch": (
            f"Throughput vs batch size, ~300-char texts, one client ({machine})",
            *(results["1"].get("sweep", []), "batch", "texts_per_s", "texts per request (batch size)", "texts/s", True),
        ),
        "concurrency": (
            f"Throughput vs concurrency, {one_text} ({machine})",
            *(runs, "concurrency", "rate", "concurrent clients", "requests/s (= texts/s)", False),
        ),
        "latency": (
            f"Latency percentiles, {one_text}",
            *(latencies, "concurrency", "ms", "concurrent clients", "latency (ms)", True),
        ),
        "long_text": (
            "Long-text scaling: tokens/s vs text length (no truncation)",
            *(results["4"].get("points", []), "chars", "tokens_per_s", "characters per text", "tokens/s", False),
        ),
    }
    written: dict[str, str] = {}
    for name, (title, points, x, y, xlabel, ylabel, logy) in lines.items():
        fig, axes = plt.subplots(1, len(tokenizers), figsize=(6.2 * len(tokenizers), 4.6), squeeze=False)
        fig.suptitle(title)
        for ax, tokenizer in zip(axes[0], tokenizers, strict=True):
            _plot_by_label(ax, points, tokenizer, x, y)
            baseline = results["2"].get("inprocess", {}).get(tokenizer, {}).get("in-process encode_batch")
            if name == "concurrency" and baseline:
                label = "in-process encode_batch, batches of 256"
                ax.axhline(baseline["texts_per_s"], color="gray", linestyle="--", label=label)
            _finish(ax, tokenizer, xlabel, ylabel, logy=logy)
        written[name] = _save(fig, plt, out_dir / PLOTS[name])
    if "medians" in results["6"]:
        written["pretokenize"] = _pretokenize_plot(plt, results["6"], machine, out_dir / PLOTS["pretokenize"])
    return written


def _pretokenize_plot(plt: Any, s6: dict[str, Any], machine: str, path: Path) -> str:
    medians, corpus = s6["medians"], s6["corpus"]
    fig, ax = plt.subplots(figsize=(11, 3.8))
    fig.suptitle(f"Pre-tokenizing {corpus['bytes'] / 2**20:.0f} MiB of JSON Lines, default tokenizer ({machine})")
    names = list(medians)[::-1]
    rates = [medians[n]["tokens_per_s"] / 1e6 for n in names]
    ax.barh(
        [medians[n]["label"] for n in names], rates, color=["tab:blue" if n == "service" else "tab:gray" for n in names]
    )
    for y, name in enumerate(names):
        ax.text(rates[y], y, f"  {rates[y]:.2f}M tokens/s, peak RSS {medians[name]['peak_rss_mb']:.0f} MB", va="center")
    ax.set_xlim(0, max(rates) * 1.7)
    ax.set_xlabel("million tokens/s (median over rounds; each method in its own process)")
    memory = s6.get("memory", {})
    if "peak_rss_mb" in memory:
        ax.set_title(
            f"service worker alone on {memory['input_bytes'] / 2**20:.0f} MiB ({memory['format']}): peak RSS "
            f"{memory['peak_rss_mb']:.0f} MB, {memory['tokens'] / memory['seconds'] / 1e6:.2f}M tokens/s",
            fontsize=9,
        )
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, plt, path)


def _plot_by_label(ax: Any, points: list[dict], tokenizer: str, x: str, y: str) -> None:
    """One line per variant label: this tokenizer's points, sorted by ``x``."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for point in points:
        if point["tokenizer"] == tokenizer:
            series[point["label"]].append((point[x], point[y]))
    for label, xy in series.items():
        xy.sort()
        ax.plot([p[0] for p in xy], [p[1] for p in xy], marker="o", label=label)


def _finish(ax: Any, title: str, xlabel: str, ylabel: str, *, logy: bool) -> None:
    """Titles, a log2 x axis ticked at the points measured, the grid and the legend."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    marked = [line for line in ax.get_lines() if line.get_marker() not in (None, "None", "")]
    xs = sorted({x for line in marked for x in line.get_xdata()})
    ax.set_xscale("log", base=2)
    if xs:
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([f"{x:g}" for x in xs])
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _save(fig: Any, plt: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
