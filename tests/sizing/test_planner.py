"""The planner (service.sizing.planner): a measured curve + GIL side + memory per replica + cores -> replicas x
threads. Fed four pools -- a perfect one, tokenizers #2337's, HF tokbench's (60 % efficiency at 8 threads) and a flat
one -- it must pick what the model says is best (checked against every plan the cores allow), with the fewest
replicas among near-equals, within the memory limit. Pure functions: no process, no clock."""

from __future__ import annotations

import pytest

from service.sizing import MODEL, REFERENCE, TIE, Curve, Measurement, check_replicas, choose_plan, throughput
from service.sizing.planner import REPLICA_HEADROOM, memory_cap, process_rate

G, R, W = 3.09, 12.8, 15.9  # ms per batch: this project's tightest measured row (REFERENCE's)
ONE = 1000 / R
MIB = 1 << 20
CURVES = {
    "perfect": Curve(tuple((t, ONE * t) for t in (1, 2, 4, 8, 16, 32, 64, 128))),
    "tokenizers #2337": Curve.from_speedups(((1, 1.0), (2, 1.58), (4, 2.06), (8, 2.03), (14, 2.12)), ONE),
    "tokbench (60% at 8)": Curve.from_speedups(((1, 1.0), (8, 4.8)), ONE),  # its one published point
    "flat": Curve(((1, ONE),)),
}


def measured(curve: Curve, gil_ms: float = G, replica_bytes: int = 114 * MIB) -> Measurement:
    return Measurement(gil_ms, curve, W, replica_bytes)


def every_plan(measurement: Measurement, cores: int, cap: int | None = None) -> list[tuple[float, int, int]]:
    """(throughput, replicas, threads) of every plan that fits: any count and threads with count x threads <= cores."""
    return [
        (throughput(measurement, count, threads, cores), count, threads)
        for threads in range(1, cores + 1)
        for count in range(1, cores // threads + 1)
        if cap is None or count <= cap
    ]


@pytest.mark.parametrize("name", CURVES)
@pytest.mark.parametrize("cores", [1, 2, 16, 64, 128])
def test_the_choice_is_the_models_best_with_the_fewest_replicas_among_near_equals(name, cores):
    measurement = measured(CURVES[name])
    plan = choose_plan(measurement, cores)
    plans = every_plan(measurement, cores)
    best = max(value for value, _, _ in plans)
    assert plan.replicas * plan.threads <= cores
    assert plan.batches_per_second == pytest.approx(throughput(measurement, plan.replicas, plan.threads, cores))
    assert plan.batches_per_second >= (1 - TIE) * best
    full = [p for p in plans if p[1] == cores // p[2]]  # each thread count with the replicas the cores take
    assert not [p for p in full if p[0] >= (1 - TIE) * best and p[1] < plan.replicas]  # none as good with fewer
    assert plan.workaround_per_second == pytest.approx(1000 * cores / W)


def test_each_pool_gets_the_plan_its_shape_calls_for():
    """Perfect pool: a process per the cores one GIL side feeds ((G+R)/G = 5.1); #2337's: 2 threads (1.58x for
    twice the cores, within TIE of 1 each, half the replicas); tokbench's two published points, interpolated (77 %
    efficient at 2 threads, below 1 - TIE) and flat: one thread each."""
    shapes = {name: choose_plan(measured(curve), 64) for name, curve in CURVES.items()}
    assert (shapes["perfect"].replicas, shapes["perfect"].threads) == (16, 4)
    assert (shapes["tokenizers #2337"].replicas, shapes["tokenizers #2337"].threads) == (32, 2)
    assert (shapes["tokbench (60% at 8)"].replicas, shapes["tokbench (60% at 8)"].threads) == (64, 1)
    assert (shapes["flat"].replicas, shapes["flat"].threads) == (64, 1)
    # one process of 64 threads against each: the GIL side (perfect) or the pool (the others) caps it
    for name, plan in shapes.items():
        alone = throughput(measured(CURVES[name]), 1, 64, 64)
        assert plan.batches_per_second > 3 * alone, name


def test_a_gil_side_that_saturates_early_moves_the_plan_to_more_replicas():
    light, heavy = (
        choose_plan(measured(CURVES["perfect"], gil_ms=1.0), 64),
        choose_plan(measured(CURVES["perfect"], gil_ms=8.0), 64),
    )
    assert light.threads > heavy.threads and light.replicas < heavy.replicas
    assert process_rate(measured(CURVES["perfect"], gil_ms=8.0), heavy.threads) <= 1000 / 8.0


def test_the_memory_limit_caps_the_count_and_the_plan_says_so():
    flat = measured(CURVES["flat"], replica_bytes=200 * MIB)
    room = 4 * (200 * MIB + REPLICA_HEADROOM) + MIB
    assert memory_cap(flat, room) == 4 and memory_cap(flat, None) is None
    capped = choose_plan(flat, 64, room)
    assert (capped.replicas, capped.memory_cap) == (4, 4)
    assert capped.batches_per_second >= (1 - TIE) * max(v for v, _, _ in every_plan(flat, 64, cap=4))
    assert choose_plan(flat, 64, 1 << 40).memory_cap is None  # room for all: the cap does not bind
    assert choose_plan(flat, 8, MIB).replicas == 1  # never fewer than one


def test_a_curve_is_flat_past_its_last_point_and_interpolated_between():
    curve = CURVES["tokenizers #2337"]
    assert curve.rate(3) == pytest.approx(ONE * (1.58 + 2.06) / 2)
    assert curve.rate(128) == curve.rate(14) == pytest.approx(ONE * 2.12)
    assert curve.speedup(2) == pytest.approx(1.58)
    with pytest.raises(ValueError, match="starts at 1 thread"):
        Curve(((2, 5.0),))
    with pytest.raises(ValueError, match="ascend"):
        Curve(((1, 5.0), (4, 6.0), (2, 7.0)))
    with pytest.raises(ValueError, match="ascend"):
        Curve(((1, 0.0),))


def test_the_reference_is_the_evidence_and_labelled_as_such():
    assert REFERENCE.curve.speedup(2) == pytest.approx(1.58) and REFERENCE.gil_ms == G and REFERENCE.worker_ms == W
    assert choose_plan(REFERENCE, 64).threads == 2
    assert "min(1/G, rate(t), t/(G+R))" in MODEL and "c/W" in MODEL
    assert check_replicas(" Auto ") == "auto"
    with pytest.raises(ValueError, match="calibrat"):
        check_replicas("many")
    with pytest.raises(ValueError):
        choose_plan(REFERENCE, 0)
