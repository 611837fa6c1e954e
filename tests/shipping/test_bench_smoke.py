"""The benchmark in smoke mode completes, writes its files, and every scenario produced data. No timing
asserts: CI machines are noisy."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

import benchmarks.run
from service.engine.parallelism import available_cpus
from testkit.servers import REPO

PLOTS = (
    "throughput_vs_batch.png",
    "throughput_vs_concurrency.png",
    "latency_percentiles.png",
    "long_text_scaling.png",
    "pretokenize_throughput.png",
)
SECTIONS = (
    "meta",
    "scenario1",
    "scenario2",
    "scenario3",
    "scenario4",
    "scenario5",
    "scenario6",
    "scenario7",
    "scenario8",
    "split",
    "scaling",
    "servers",
    "rss_soak",
    "targets",
    "table",
)


#: Every scenario of a default run but scaling, whose smoke run test_scaling.py makes (one run of it in CI).
SMOKED_HERE = ",".join(name for name in benchmarks.run.parse_args([]).scenarios.split(",") if name != "scaling")


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_benchmark_smoke_run_writes_json_and_plots(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--scenarios", SMOKED_HERE, "--out-dir", str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = proc.communicate(timeout=360)
    except subprocess.TimeoutExpired:
        proc.terminate()  # benchmarks.run turns SIGTERM into a clean exit that stops its servers
        output, _ = proc.communicate(timeout=60)
        pytest.fail(f"the smoke benchmark did not finish in 360 s:\n{output[-3000:]}")
    assert proc.returncode == 0, output[-3000:]  # a scenario that crashed or timed out fails the run

    results = json.loads((tmp_path / "benchmark.json").read_text())
    for section in SECTIONS:
        assert section in results, section
    assert results["scenario1"]["cells"] and results["scenario1"]["sweep"]
    assert results["scenario2"]["runs"] and results["scenario2"]["inprocess"]
    assert results["scenario4"]["points"]
    assert results["rss_soak"]["memory"]
    for name in ("scenario3", "scenario5", "scenario8"):  # the scenarios that run in their own process
        section = results[name]
        assert "failed" not in section, section
        if importlib.util.find_spec("torch") is None:  # the one acceptable skip
            assert section.get("skipped", "").startswith("torch is not installed"), section
        else:
            assert "skipped" not in section, section
            assert section["data"]["dataloader"], section
    if "data" in results["scenario5"]:
        loops = results["scenario5"]["data"]["dataloader"]["loops"]
        assert set(loops) == {"training step", "loader only"}
        assert all(set(by_variant) == {"random", "token budget", "packed"} for by_variant in loops.values())
        assert loops["training step"]["packed"]["padding_fraction"] == 0
        assert set(results["scenario5"]["data"]["counts"]) == {"reviews", "reviews, distinct only"}
    scenario6 = results["scenario6"]
    assert "failed" not in scenario6, scenario6
    assert set(scenario6["medians"]) == {"service", "encode_batch", "encode_batch_fast", "datasets_map"}
    assert len({m["tokens"] for m in scenario6["medians"].values()}) == 1  # every method, the same tokens
    assert scenario6["memory"]["peak_rss_mb"] > 0
    scenario7 = results["scenario7"]  # object storage: the same job on local files and on s3://
    assert "failed" not in scenario7, scenario7
    assert set(scenario7["medians"]) == {"local", "s3"}
    assert len({m["tokens"] for m in scenario7["medians"].values()}) == 1
    assert scenario7["memory"]["s3"]["peak_rss_mb"] > 0 and scenario7["memory"]["local"]["peak_rss_mb"] > 0
    assert {"s7_s3_vs_local", "s7_s3_worker_peak_rss_mb"} <= {t["target"] for t in results["targets"]}
    assert all({"target", "met"} <= set(t) for t in results["targets"])
    if "data" in results["scenario8"]:  # conversations: /chat/encode vs apply_chat_template, and the collator
        throughput = results["scenario8"]["data"]["throughput"]
        assert all(
            {"ragged_vs_apply_chat_template", "pt_vs_apply_chat_template_pt"} <= set(figures["ratios"])
            for figures in throughput.values()
        )
        assert {"s8_chat_encode_vs_apply_chat_template", "s8_chat_collator_vs_collate_fn"} <= {
            t["target"] for t in results["targets"]
        }
    split = results["split"]  # one server's CPU per batch by thread (benchmarks.cpu_split)
    assert "failed" not in split and "skipped" not in split, split
    assert all(row["figures"]["this checkout"]["gil_side_ms"] > 0 for row in split["data"]["corpora"])
    assert any(row["scenario"] == "split" for row in results["table"])
    assert results["scaling"] == {"skipped": "not selected (--scenarios)"}
    for name in PLOTS:
        assert (tmp_path / name).stat().st_size > 0, name


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_compare_smoke_run_writes_its_figures_and_checks_the_result(tmp_path):
    out = tmp_path / "train_compare.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.train_compare",
            "--smoke",
            "--models",
            "byte-level-bpe",
            "--out",
            str(out),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())["models"]["byte-level-bpe"]
    assert figures["check"]["vocab_and_ids_equal"] and figures["check"]["merges_equal"]
    assert set(figures["count"]) == {"1 worker x 1 process", "1 worker x 2 processes", "2 workers x 1 process"}
    assert all(count["mb_per_s"] > 0 and count["peak_rss_mb"] > 0 for count in figures["count"].values())
    assert figures["merge"]["train_seconds"] > 0 and figures["baseline"]["peak_rss_mb"] > 0
    assert "count (best) + merge+train vs baseline" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_launch_benchmark_smoke_run_measures_every_part(tmp_path):
    """benchmarks.launch_compare --smoke: round trips over both sockets, the three DataLoader variants (their
    batches checked identical before measuring), and the start-up cost."""
    out = tmp_path / "launch.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.launch_compare", "--smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    for kind in ("encode 1 text", "GET /healthz"):
        assert {f"{kind} | unix socket | 1 thread(s)", f"{kind} | tcp loopback | 8 thread(s)"} <= set(
            results["round_trips"]
        )
    cell = results["dataloader"][0]
    assert cell["identical_batches"] and set(cell["ratios"]) == {
        "launched / in-process",
        "tcp / in-process",
        "launched / tcp",
    }
    assert all(figures["launch_seconds"] > 0 for figures in results["startup"].values())


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_cpu_split_smoke_run_tells_the_threads_apart(tmp_path):
    """benchmarks.cpu_split --smoke, against this very checkout too: every figure of the split is there and
    plausible -- the event loop, the tokenizer thread (and its Rust call) and the Rust pool each spent CPU,
    the pool most of it, and the native threads that predate the tokenizer next to none."""
    out = tmp_path / "split.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cpu_split", "--smoke", "--against", str(REPO), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert len(results["meta"]["checkouts"]) == 2
    (row,) = results["corpora"]
    assert row["figures"]["1 worker"]["cpu_ms"] > 0
    for checkout in results["meta"]["checkouts"]:
        split = row["figures"][checkout]
        assert split["batches"] > 0
        assert split["event_loop_ms"] > 0 and split["tokenizer_thread_ms"] > 0
        assert 0 < split["in_encode_call_ms"] < split["tokenizer_thread_ms"]
        assert split["rust_pool_ms"] > split["gil_side_ms"] > 0
        assert split["other_native_ms"] < 0.1 * split["process_ms"]
        assert split["ceiling_batches_per_s"] == pytest.approx(1000 / split["gil_side_ms"])
    assert "GIL side ms/batch, each checkout against this checkout" in done.stdout
    assert all(row["api_floor_ms"][part] > 0 for part in ("parse", "read", "free"))
    assert "The floor of tokenizers 0.23's Python API" in done.stdout
