"""The benchmark in smoke mode: one run of every scenario (``python -m benchmarks.run --smoke --scenarios ALL``, once
for this module) completes, writes its files, and every scenario produced its figures, its table rows and its
targets. No timing asserts: CI machines are noisy. The harness's own rules (rotation, medians) are tested apart."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from benchmarks import projection
from benchmarks.harness import in_rounds, medians, rotated
from benchmarks.projection import Costs
from benchmarks.run import parse_args
from benchmarks.scenarios import SCENARIOS
from testkit.servers import REPO

PLOTS = (
    "throughput_vs_batch.png",
    "throughput_vs_concurrency.png",
    "latency_percentiles.png",
    "long_text_scaling.png",
    "pretokenize_throughput.png",
)
TORCH = importlib.util.find_spec("torch") is not None


def test_rounds_measure_every_variant_once_each_in_rotated_order():
    calls = []
    runs = in_rounds(("a", "b", "c"), lambda v: calls.append(v) or {"x": len(calls)}, rounds=3)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert {v: [r["x"] for r in rs] for v, rs in runs.items()} == {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]}
    at_points = in_rounds(("a", "b"), lambda p, v: {"x": p}, rounds=2, points=(1, 2))
    assert set(at_points) == {(1, "a"), (1, "b"), (2, "a"), (2, "b")} and all(len(r) == 2 for r in at_points.values())
    assert rotated([1, 2, 3], 4) == [2, 3, 1]


def test_medians_are_of_every_shared_number_and_noise_is_the_worst_round():
    figures = medians([{"rate": 1.0, "other_cpu_cores": 0.1, "n": 3}, {"rate": 5.0, "other_cpu_cores": 0.9, "n": 1}])
    assert figures["rate"] == 3.0 and figures["n"] == 2 and figures["other_cpu_cores"] == 0.9
    assert len(figures["rounds"]) == 2


def test_every_scenario_is_one_name_of_the_one_command_line():
    assert set(parse_args([]).scenario_names) <= set(SCENARIOS)
    with pytest.raises(SystemExit):
        parse_args(["--scenarios", "1,nope"])


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One smoke run of every scenario; its results, its table and its output."""
    out = tmp_path_factory.mktemp("bench")
    command = [
        sys.executable,
        "-m",
        "benchmarks.run",
        "--smoke",
        "--scenarios",
        ",".join(SCENARIOS),
        "--out-dir",
        str(out),
    ]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        proc.terminate()  # benchmarks.run turns SIGTERM into a clean exit that stops its servers
        output, _ = proc.communicate(timeout=60)
        pytest.fail(f"the smoke benchmark did not finish in 540 s:\n{output[-3000:]}")
    assert proc.returncode == 0, output[-3000:]  # a scenario that crashed or timed out fails the run
    return {"results": json.loads((out / "benchmark.json").read_text()), "out": out, "output": output}


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_smoke_run_writes_every_section_table_row_target_and_plot(smoke):
    results, out = smoke["results"], smoke["out"]
    assert set(SCENARIOS) <= set(results) and {"meta", "targets", "table", "plots"} <= set(results)
    skipped = {name for name, section in results.items() if isinstance(section, dict) and "skipped" in section}
    assert skipped == (set() if TORCH else {"3", "5", "8"}), skipped
    ran = set(SCENARIOS) - skipped
    assert {row["scenario"] for row in results["table"]} >= (ran - {"rss"}) | {"memory", "targets"}
    assert all({"target", "met"} <= set(t) for t in results["targets"])
    assert (out / "benchmark.txt").read_text().strip() in smoke["output"]
    for name in PLOTS:
        assert (out / name).stat().st_size > 0, name


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_one_client_and_concurrency_scenarios_measure_every_variant(smoke):
    results = smoke["results"]
    labels = {cell["label"] for cell in results["1"]["cells"]}
    assert len(labels) == 5 and results["1"]["sweep"]
    assert all(cell["texts_per_s"] > 0 and cell["tokens_per_s"] > 0 for cell in results["1"]["cells"])
    assert {p["label"] for p in results["4"]["points"]} == labels - {"service JSON"}
    runs = results["2"]["runs"]
    assert {r["mode"] for r in runs} == {"on", "off"} and all(r["rate"] > 0 and r["errors"] == 0 for r in runs)
    assert set(results["2"]["inprocess"]["default"]) == labels - {"service JSON", "service binary"}
    soak = results["rss"]
    assert len(soak["memory"]) >= 3 and soak["peak_mb"] > 0
    assert {"s1_binary_vs_encode_batch[default]", "s2_on_vs_off[default]"} <= {t["target"] for t in results["targets"]}


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_pretokenize_scenario_measures_every_method_on_the_same_tokens(smoke):
    results = smoke["results"]
    scenario6 = results["6"]
    assert set(scenario6["medians"]) == {"service", "encode_batch", "encode_batch_fast", "datasets_map"}
    assert len({m["tokens"] for m in scenario6["medians"].values()}) == 1  # every method, the same tokens
    assert scenario6["memory"]["peak_rss_mb"] > 0
    assert {"s6_service_vs_encode_batch", "s6_worker_peak_rss_mb"} <= {t["target"] for t in results["targets"]}


@pytest.mark.slow
@pytest.mark.timeout(660)
@pytest.mark.skipif(not TORCH, reason="the DataLoader scenarios need torch")
def test_dataloader_scenarios_measure_every_variant(smoke):
    results = smoke["results"]
    assert results["3"]["dataloader"] and all(c["identical_batches"] for c in results["3"]["dataloader"])
    assert set(results["3"]["dataloader"][0]["vs_in_process"]) == {
        "sdk",
        "sdk, --batch-wait-ms 2",
        "sdk, launched on a unix socket",
        "in-process",
    }
    loops = results["5"]["dataloader"]["loops"]
    assert set(loops) == {"training step", "loader only"}
    assert all(set(by_variant) == {"random", "token budget", "packed"} for by_variant in loops.values())
    assert loops["training step"]["packed"]["padding_fraction"] == 0
    assert set(results["5"]["counts"]) == {"reviews", "reviews, distinct only"}
    throughput = results["8"]["throughput"]
    assert all(
        {"ragged_vs_apply_chat_template", "pt_vs_apply_chat_template_pt"} <= set(f["ratios"])
        for f in throughput.values()
    )
    assert {"s8_chat_encode_vs_apply_chat_template", "s8_chat_collator_vs_collate_fn"} <= {
        t["target"] for t in results["targets"]
    }


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_the_split_tells_the_threads_apart(smoke):
    """The event loop and the tokenizer thread each spent CPU, the Rust pool most of it, the native threads that
    predate the tokenizer next to none; the ceiling is 1 / GIL side."""
    (row,) = smoke["results"]["split"]["corpora"]
    server = row["server"]
    assert row["worker"]["cpu_ms"] > 0 and server["batches"] > 0
    assert server["event_loop_ms"] > 0 and server["tokenizer_thread_ms"] > 0
    assert server["rust_pool_ms"] > server["gil_side_ms"] > 0
    assert server["other_native_ms"] < 0.1 * server["process_ms"]
    assert server["ceiling_batches_per_s"] == pytest.approx(1000 / server["gil_side_ms"])


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_scaling_measures_every_cell_and_projects_every_row(smoke):
    """The split, each variant at 1 and 2 cores on both paths with its rounds and the model beside it, the projection
    of every row at 16/64/128 cores, a target per row, and the table's rows labelled measured or projection."""
    results = smoke["results"]
    data = results["scaling"]
    (row,) = data["corpora"]
    assert row["split"]["server"]["gil_side_ms"] > 0 and row["split"]["worker"]["cpu_ms"] > 0
    variants = ("1 replica x 2 threads", "2 replicas x 1 thread", "workaround")
    cells = {(c["cores"], c["path"], c["variant"]) for c in row["cells"]}
    assert cells == {(cores, path, variant) for cores in (1, 2) for path in row["costs"] for variant in variants}
    assert set(row["costs"]) == ({"batches of 256", "DataLoader collator"} if TORCH else {"batches of 256"})
    for cell in row["cells"]:  # each measured on the first N cores of the run's, every process that makes its batches
        assert cell["figures"]["batches_per_s"] > 0 and cell["model_batches_per_s"] > 0, cell
        assert {run["pinned"] for run in cell["rounds"]} == {",".join(map(str, data["meta"]["cores"][: cell["cores"]]))}
    for projected in row["projection"]:
        assert [p["cores"] for p in projected["points"]] == [16, 64, 128]
        for p in projected["points"]:
            costs = Costs(**row["costs"][projected["path"]])
            plan = projection.auto_plan(costs, p["cores"], projection.pool(costs, projection.SPEEDUPS_2337))
            assert (p["auto_replicas"], p["auto_threads"]) == (plan.replicas, plan.threads)
            assert p["perfect_pool"]["auto_vs_workaround"] > 0
    kinds = [t["kind"] for t in data["targets"]]
    per_path = len(row["costs"])
    assert kinds.count("measured") == kinds.count("measured, per core left") == 2 * per_path
    assert kinds.count("projection") == per_path
    assert {t["target"] for t in results["targets"]} >= {
        "scaling_2_replicas_vs_1",
        "scaling_2_replicas_vs_1_per_core_left",
        "scaling_auto_vs_workaround_projected",
    }
    assert data["model"] == projection.MODEL
    table = (smoke["out"] / "benchmark.txt").read_text()
    assert "PROJECTION, 64 cores" in table and "projection model" in table and "measured, 2 core(s)" in table


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_a_saved_run_prints_the_same_table_again(smoke):
    saved = smoke["out"] / "benchmark.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--report", str(saved)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == (smoke["out"] / "benchmark.txt").read_text()
