"""The benchmark's outputs in ``--out-dir``: ``benchmark.json`` (every figure, the targets and the table rows),
``benchmark.txt`` (the printed table) and the PNG plots (matplotlib, Agg backend: no display needed).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from benchmarks.profiles import Profile
from benchmarks.table import build_table, render

PLOTS = {
    "batch": "throughput_vs_batch.png",
    "concurrency": "throughput_vs_concurrency.png",
    "latency": "latency_percentiles.png",
    "long_text": "long_text_scaling.png",
    "pretokenize": "pretokenize_throughput.png",
}


def write_report(results: dict[str, Any], profile: Profile, out_dir: Path) -> str:
    """Add the table rows and the plots to ``results``, write the JSON and the text table; the text table."""
    results["table"] = build_table(results, profile)
    text = render(results, results["table"])
    results["plots"] = draw_plots(results, out_dir)
    json_bytes = orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
    (out_dir / "benchmark.json").write_bytes(json_bytes)
    (out_dir / "benchmark.txt").write_text(text + "\n", "utf-8")
    return text


# -- plots ------------------------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _subplots(plt: Any, count: int, title: str) -> tuple[Any, list[Any]]:
    fig, axes = plt.subplots(1, max(1, count), figsize=(6.2 * max(1, count), 4.6), squeeze=False)
    fig.suptitle(title)
    return fig, list(axes[0])


def draw_plots(results: dict[str, Any], out_dir: Path) -> dict[str, str]:
    plt = _pyplot()
    written: dict[str, str] = {}
    tokenizers = results["meta"]["tokenizers"]
    machine = f"{results['meta']['cpus']} CPUs"

    # throughput vs batch size (scenario 1 sweep)
    sweep = results["scenario1"].get("sweep", [])
    fig, axes = _subplots(plt, len(tokenizers), f"Throughput vs batch size, ~300-char texts, one client ({machine})")
    for ax, tok in zip(axes, tokenizers, strict=False):
        _plot_by_label(ax, sweep, tok, "batch", "texts_per_s")
        _finish(ax, tok, "texts per request (batch size)", "texts/s", logx=True, logy=True)
    written["batch"] = _save(fig, plt, out_dir / PLOTS["batch"])

    # throughput vs concurrency and latency percentiles (scenario 2)
    s2 = results["scenario2"]
    title = f"Throughput vs concurrency, 1 text (~300 chars) per request ({machine})"
    fig, axes = _subplots(plt, len(tokenizers), title)
    for ax, tok in zip(axes, tokenizers, strict=False):
        for mode, label in _modes(s2):
            points = sorted(
                (r["concurrency"], r["rate"]) for r in s2.get("runs", []) if r["tokenizer"] == tok and r["mode"] == mode
            )
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"service, {label}")
        inproc = s2.get("inprocess", {}).get(tok)
        if inproc:
            ax.axhline(
                inproc["texts_per_s"], color="gray", linestyle="--", label="in-process encode_batch, batches of 256"
            )
        _finish(ax, tok, "concurrent clients", "requests/s (= texts/s)", logx=True, logy=False)
    written["concurrency"] = _save(fig, plt, out_dir / PLOTS["concurrency"])

    fig, axes = _subplots(plt, len(tokenizers), "Latency percentiles, 1 text (~300 chars) per request")
    for ax, tok in zip(axes, tokenizers, strict=False):
        for (mode, label), color in zip(_modes(s2), ("tab:blue", "tab:green", "tab:orange", "tab:red"), strict=False):
            runs = sorted(
                (r for r in s2.get("runs", []) if r["tokenizer"] == tok and r["mode"] == mode),
                key=lambda r: r["concurrency"],
            )
            if not runs:
                continue
            xs = [r["concurrency"] for r in runs]
            for pct, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
                ax.plot(
                    xs, [r["latency_ms"][pct] for r in runs], style, marker="o", color=color, label=f"{label} {pct}"
                )
        _finish(ax, tok, "concurrent clients", "latency (ms)", logx=True, logy=True)
    written["latency"] = _save(fig, plt, out_dir / PLOTS["latency"])

    # long-text scaling (scenario 4)
    s4 = results["scenario4"].get("points", [])
    fig, axes = _subplots(plt, len(tokenizers), "Long-text scaling: tokens/s vs text length (no truncation)")
    for ax, tok in zip(axes, tokenizers, strict=False):
        _plot_by_label(ax, s4, tok, "chars", "tokens_per_s")
        _finish(ax, tok, "characters per text", "tokens/s", logx=True, logy=False)
        ax.set_ylim(bottom=0)
    written["long_text"] = _save(fig, plt, out_dir / PLOTS["long_text"])

    # pre-tokenization (scenario 6): tokens/s of each method, peak RSS beside each bar
    s6 = results.get("scenario6", {})
    medians = s6.get("medians", {})
    if medians:
        written["pretokenize"] = _pretokenize_plot(plt, s6, machine, out_dir / PLOTS["pretokenize"])
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


def _modes(s2: dict[str, Any]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for run in s2.get("runs", []):
        seen.setdefault(run["mode"], run.get("label", run["mode"]))
    return list(seen.items())


def _plot_by_label(ax: Any, points: list[dict], tokenizer: str, x: str, y: str) -> None:
    """One line per variant label: this tokenizer's points, sorted by ``x``."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for point in points:
        if point["tokenizer"] == tokenizer:
            series[point["label"]].append((point[x], point[y]))
    for label, xy in series.items():
        xy.sort()
        ax.plot([p[0] for p in xy], [p[1] for p in xy], marker="o", label=label)


def _finish(ax: Any, title: str, xlabel: str, ylabel: str, *, logx: bool, logy: bool) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        from matplotlib.ticker import FixedLocator, NullLocator

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
