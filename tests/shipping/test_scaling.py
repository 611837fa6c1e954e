"""The scaling scenario's model (benchmarks.projection): the projection sizes replicas="auto" with the launcher's own
plan and says what bounds each figure; a calibration gives it its curve; pinning moves every thread of a process.
The scenario's smoke run is tested with every other scenario's (test_bench_smoke.py)."""

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
    """--calibration reads `calibrate --json`'s output or a kept record: the projection takes its measured curve; a
    busy calibration is refused."""
    from benchmarks.scenarios.scaling import calibration_pool, pool_of
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
    unmeasured = {"gil_ms": None, "worker_ms": None, "replica_bytes": None}  # a busy one stops at its first probe
    busy = Calibration(**{**calibration.to_json(), **unmeasured, "curve": calibration.curve[:1], "busy": ("noise",)})
    printed_busy = {"calibration": busy.to_json(), "not_run": busy.not_run, "plan": None}  # as --json prints it
    (tmp_path / "busy.json").write_text(json.dumps(printed_busy))
    with pytest.raises(ValueError, match="a busy calibration"):
        calibration_pool(tmp_path / "busy.json")  # part of a curve, and noise: never projected from
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
