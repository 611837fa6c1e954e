"""benchmarks.scaling and its model (benchmarks.projection): the projection sizes replicas="auto" with the launcher's
own plan and says what bounds each figure; pinning moves every thread of a process; the smoke run of the scenario
measures every cell of the split, of the measured table and of the projection, and reports a target per row. No
timing asserts: what is measured is printed, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import projection
from benchmarks.pinning import pin
from benchmarks.projection import Costs
from service import sizing
from testkit.servers import REPO

COSTS = Costs(gil_ms=4.0, rust_ms=36.0, client_ms=2.0, worker_ms=50.0)  # one process keeps 10 cores busy


def test_one_process_is_bound_by_its_cores_then_by_its_gil_side_or_its_pool():
    """c/(G+R+C) on few cores; 1/G once the cores outrun what one GIL side feeds (a perfect pool), or the pool's
    curve first (#2337's); the workaround grows with c."""
    perfect, curve = projection.pool(COSTS, projection.PERFECT), projection.pool(COSTS, projection.SPEEDUPS_2337)
    assert projection.one_process(COSTS, 2, perfect) == pytest.approx(1000 * 2 / 42)
    assert projection.one_process(COSTS, 64, perfect) == pytest.approx(1000 / 4.0)
    assert projection.one_process(COSTS, 128, perfect) == projection.one_process(COSTS, 64, perfect)
    assert projection.one_process(COSTS, 64, curve) == pytest.approx(1000 / 36.0 * 2.12)
    assert projection.workaround(COSTS, 64) == pytest.approx(1000 * 64 / 50)
    assert COSTS.fed_cores == pytest.approx(10.0)


CURVES = {"#2337": projection.SPEEDUPS_2337, "perfect": projection.PERFECT, "flat": ((1, 1.0),)}


@pytest.mark.parametrize("name", CURVES)
def test_replicas_auto_is_the_launchers_planner_times_one_replica(name):
    """K and t come from service.sizing.choose_plan at call time, on the same figures and curve (never a copy of
    its rule); each replica is one process on its t cores, bounded by the pool's curve; the node's cores cap the sum."""
    curve = projection.pool(COSTS, CURVES[name])
    for cores in (16, 64, 128):
        plan = projection.auto_plan(COSTS, cores, curve)
        chosen = sizing.choose_plan(sizing.Measurement(COSTS.gil_ms, curve, COSTS.worker_ms, 0), cores)
        assert (plan.replicas, plan.threads) == (chosen.replicas, chosen.threads)
        one_replica = min(1000 / COSTS.gil_ms, curve.rate(plan.threads), 1000 * plan.threads / 40.0)
        node = 1000 * cores / (COSTS.gil_ms + COSTS.rust_ms + COSTS.client_ms)
        assert projection.replicas_auto(COSTS, cores, curve) == pytest.approx(min(plan.replicas * one_replica, node))
    assert projection.pool(COSTS, projection.SPEEDUPS_2337).speedup(14) == pytest.approx(2.12)


def test_a_calibration_gives_the_projection_its_curve(tmp_path):
    """--calibration reads `calibrate --json`'s output or a kept record: the projection takes its measured curve."""
    from benchmarks.scaling import calibration_pool, pool_of
    from service.calibration.measure import Calibration, Point
    from service.calibration.store import keep

    calibration = Calibration(
        "a CPU", 2, "sha256:" + "0" * 64, {"python": "3"}, "built-in mix", "2026-12-06 00:00:00 UTC",
        (Point(1, 10.0, 0.0, 0.0), Point(2, 13.0, 0.0, 0.0)), 2.0, 100.0, 110.0, 1 << 27,
    )  # fmt: skip
    printed = tmp_path / "calibration.json"
    printed.write_text(json.dumps({"calibration": calibration.to_json(), "plan": None}))
    for path in (printed, keep(calibration, tmp_path / "kept")):
        name, speedups = pool_of({"pool": calibration_pool(path)})
        assert speedups == ((1, 1.0), (2, pytest.approx(1.3))) and "2 cores of a CPU" in name
    assert pool_of({}) == (projection.POOL_2337, projection.SPEEDUPS_2337)
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="neither"):
        calibration_pool(tmp_path / "other.json")


def _allowed(pid: int) -> dict[int, str]:
    lists = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        lists[int(task.name)] = next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
    return lists


def test_pin_moves_every_thread_of_a_process():
    """As taskset -a -p: the threads a process already runs (a Rust pool's, a DataLoader's) move too."""
    code = "import threading, sys; [threading.Thread(target=sys.stdin.read, daemon=True).start() for _ in range(3)];"
    code += " print('ready', flush=True); sys.stdin.read()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert len(_allowed(proc.pid)) >= 4
        pin([proc.pid], {0})
        assert set(_allowed(proc.pid).values()) == {"Cpus_allowed_list:\t0"}
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_scaling_smoke_run_measures_every_cell_and_projects_every_row(tmp_path):
    """benchmarks.run --smoke --scenarios scaling (benchmarks.scaling --smoke in its own process): the split, each
    variant at 1 and 2 cores on both paths with its rounds and the model beside it, the projection of every row at
    16/64/128 cores, a target per row, and the table's rows labelled measured or projection."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--scenarios", "scaling", "--out-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "benchmark.json").read_text())
    data = results["scaling"]["data"]
    (row,) = data["corpora"]
    assert row["split"]["server"]["gil_side_ms"] > 0 and row["split"]["worker"]["cpu_ms"] > 0
    cells = {(c["cores"], c["path"], c["variant"]) for c in row["cells"]}
    assert cells == {
        (cores, path, variant)
        for cores in (1, 2)
        for path in row["costs"]
        for variant in ("1 replica x 2 threads", "2 replicas x 1 thread", "workaround")
    }
    assert set(row["costs"]) == {"batches of 256", "DataLoader collator"}
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
    assert kinds.count("measured") == kinds.count("measured, per core left") == 4 and kinds.count("projection") == 2
    assert {t["target"] for t in results["targets"]} >= {
        "scaling_2_replicas_vs_1",
        "scaling_2_replicas_vs_1_per_core_left",
        "scaling_auto_vs_workaround_projected",
    }
    printed = (tmp_path / "logs" / "scaling.log").read_text()
    assert "PROJECTION to 16, 64, 128 cores -- not measured" in printed and projection.MODEL in printed
    table = (tmp_path / "benchmark.txt").read_text()
    assert "PROJECTION, 64 cores" in table and "projection model" in table and "measured, 2 core(s)" in table
