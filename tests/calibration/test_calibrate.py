"""``tokenizer-service calibrate``, for real on this machine's cores: probe processes started by exec measure the Rust
pool at 1, 2, ... threads, a real server's GIL side (its /metrics), the workaround's worker and a replica's memory;
the plan printed is the planner's on what was measured; a busy machine (a CPU burner on the probed core) is said,
the calibration stops at the probe that found it, and the default plan stands in, never one from the noise; bad
input gets a clear error. The kept records: a damaged or stale one is ignored and made again; a busy one keeps
what it did not measure as null. No timing asserts: the figures are printed, never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from service.calibration import auto, store
from service.calibration.measure import MEASURED_AT, Calibration, Point, thread_counts
from service.calibration.store import CALIBRATION_DIR_ENV, Key, keep, kept
from service.sizing import available_cpus, choose_plan, cpu_model, memory_limit
from testkit.servers import script_env

pytestmark = pytest.mark.slow  # each calibration is a few probe processes: ~15-30 s on 2 cores
RELAXED = ["--max-spread", "100", "--max-others", "1"]  # the suite shares the cores: accept its noise


def calibrate(*args: str, tmp_path: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**script_env(), CALIBRATION_DIR_ENV: str(tmp_path / "kept")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "service", "calibrate", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    print(f"calibrate {' '.join(args)}: {time.monotonic() - started:.1f} s\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One real calibration on every core this process may use, its report and the folder it was kept in."""
    folder = tmp_path_factory.mktemp("calibration")
    done = calibrate(*RELAXED, tmp_path=folder)
    assert done.returncode == 0, done.stderr
    return done, folder / "kept"


def test_a_real_calibration_measures_the_curve_at_each_thread_count_and_plans_what_the_planner_says(calibrated):
    done, folder = calibrated
    (record,) = folder.glob("*.json")
    calibration = Calibration.from_json(json.loads(record.read_text())["body"]["calibration"])
    cores = available_cpus()
    assert [p.threads for p in calibration.curve] == thread_counts(cores)
    assert all(p.rate > 0 for p in calibration.curve)
    assert calibration.gil_ms > 0 and calibration.rust_ms > 0 and calibration.worker_ms > 0
    assert 30 << 20 < calibration.replica_bytes < 4 << 30  # a real server's peak RSS
    assert calibration.cores == cores and calibration.cpu_model == cpu_model()
    assert calibration.fingerprint.startswith("sha256:") and calibration.texts == "built-in mix"
    assert set(calibration.versions) == {"python", "tokenizer-service", "tokenizers", "transformers"}
    assert kept(Key.of(calibration), folder).calibration == calibration  # where replicas="auto" finds it
    plan = choose_plan(calibration.measurement, cores, memory_limit())
    each = "1 Rust thread" if plan.threads == 1 else f"{plan.threads} Rust threads"
    assert f'replicas="auto" = {plan.replicas} x {each}' in done.stdout  # the planner's plan of what it measured
    assert f"Kept at {record}" in done.stdout


def test_the_report_prints_the_curve_the_costs_and_the_plan_each_labelled(calibrated):
    done, _ = calibrated
    out = done.stdout
    assert "The Rust pool of one tokenizer (measured)" in out and "threads  batches/s  speedup" in out
    for label in ("G  GIL side", "R  Rust pool", "W  one worker", "replica RSS"):
        assert label in out
    assert "Kubernetes: pods of one process with" in out and "(cpu limit = --threads" in out
    assert "derived, not measured" in out and "model: one process of t Rust threads" in out
    assert "measuring the Rust pool at 1 thread" in done.stderr  # what it is doing, as it goes


def test_the_report_of_one_core_says_it_in_the_singular():
    from service.calibration.cli import report

    calibration = synthetic(cores=1, rates=(10.0,))
    text = report(calibration, calibration.plan(), memory_limit(), None, None)
    assert 'replicas="auto" = 1 x 1 Rust thread' in text and "1 per 1 core of" in text
    assert "(1 parallelism-off worker:" in text and "Not kept (--no-keep)." in text


def test_a_busy_machine_is_said_and_the_default_plan_stands_in(tmp_path):
    """A CPU burner pinned to the probed core takes about half of it: the calibration says so at the first probe
    and stops there (the worker and the server are not run), plans nothing from it, keeps nothing, and names the
    plan replicas="auto" will use instead."""
    core = min(os.sched_getaffinity(0))
    burner = subprocess.Popen(
        [sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"]
    )
    try:
        done = calibrate("--cores", "1", tmp_path=tmp_path)
    finally:
        burner.kill()
        burner.wait()
    assert done.returncode == 0, done.stderr
    assert "BUSY: this measurement is noise, and nothing is planned from it" in done.stdout
    assert "other processes kept its CPUs" in done.stdout
    assert 'replicas="auto" uses 1 replica x 1 Rust thread on 1 core, from the default plan' in done.stdout
    assert not list((tmp_path / "kept").glob("*.json"))
    # it stopped at the first probe: the later ones were not run, and their figures are said to be missing
    assert "  - rust at 1 thread(s): " in done.stdout
    stop = "the calibration stopped there, at rust at 1 thread(s): the worker and the server were not run"
    assert stop in done.stdout
    assert "measuring the Rust pool at 1 thread" in done.stderr
    assert "measuring the workaround's worker" not in done.stderr  # neither later probe was started
    assert "measuring a server" not in done.stderr
    for row in ("G  GIL side       not measured (busy)", "W  one worker     not measured (busy)"):
        assert row in done.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cores", "999"], "pass --cores from 1 to"),
        (["--model", "no/such-dir/"], "cannot load tokenizer"),
        (["--texts", "missing.txt"], "--texts missing.txt: no such file"),
        (["--texts", "empty.txt"], "holds no text"),
        (["--texts", "bad.jsonl"], "bad.jsonl:2: malformed JSON"),
    ],
)
def test_bad_input_gets_an_error_that_names_the_fix(args, says, tmp_path):
    (tmp_path / "empty.txt").write_text("\n  \n")
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": \n')
    done = calibrate(*args, tmp_path=tmp_path)
    assert done.returncode in (1, 2) and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# -- kept calibrations --------------------------------------------------------------------------------------
def synthetic(
    fingerprint: str = "sha256:" + "0" * 64, cores: int = 2, rates: tuple[float, ...] = (10.0, 20.0)
) -> Calibration:
    return Calibration(
        cpu_model=cpu_model(),
        cores=cores,
        fingerprint=fingerprint,
        versions={"python": "3", "tokenizer-service": "0", "tokenizers": "0", "transformers": "0"},
        texts="built-in mix",
        measured_at="2026-12-06 00:00:00 UTC",
        curve=tuple(Point(t, rate, 0.01, 0.0) for t, rate in zip(thread_counts(cores), rates, strict=False)),
        gil_ms=2.0,
        rust_ms=100.0,
        worker_ms=110.0,
        replica_bytes=100 << 20,
    )


def stopped(calibration: Calibration, threads: int = 1, reason: str = "rust at 1 thread(s): noise") -> Calibration:
    """``calibration`` as a busy one that stopped after the Rust pool at ``threads`` threads."""
    curve = tuple(p for p in calibration.curve if p.threads <= threads)
    figures = {"gil_ms": None, "worker_ms": None, "replica_bytes": None}
    return Calibration(**{**calibration.to_json(), **figures, "curve": curve, "busy": (reason,)})


def test_a_busy_calibration_keeps_what_it_did_not_measure_as_null_and_round_trips_through_the_store(tmp_path):
    """A busy calibration is kept (replicas="auto" keeps the verdict) with null for the figures of the probes it did
    not run, never a made-up number, and reads back equal; the report and --json say what was not run. A busy record
    of an earlier release (every figure measured) still loads; one that is not busy and lacks a figure is damaged."""
    from service.calibration.cli import report

    busy = stopped(synthetic(cores=4, rates=(10.0, 15.0, 18.0)), threads=2)
    assert busy.not_run == ("rust at 4 thread(s)", "the worker", "the server")
    assert busy.stopped_at == "rust at 2 thread(s)" and busy.plan() is None
    path = keep(busy, tmp_path)
    body = json.loads(path.read_text())["body"]["calibration"]
    assert (body["gil_ms"], body["worker_ms"], body["replica_bytes"]) == (None, None, None)
    assert [p["threads"] for p in body["curve"]] == [1, 2]
    assert kept(Key.of(busy), tmp_path).calibration == busy
    text = report(busy, None, memory_limit(), None, None)
    assert "        4  not measured (busy)" in text and "R  Rust pool        100.00 ms  measured" in text
    for row in ("G  GIL side       not measured (busy)", "     replica RSS    not measured (busy)"):
        assert row in text
    stop = "the calibration stopped there, at rust at 2 thread(s): rust at 4 thread(s), the worker and the server"
    assert f"{stop} were not run" in text
    with pytest.raises(ValueError, match=r"not measured \(busy\): rust at 4 thread\(s\), the worker, the server"):
        busy.measurement  # noqa: B018  # nothing to plan from: refused, not made up

    earlier = Calibration(**{**synthetic().to_json(), "curve": synthetic().curve, "busy": ("the server: noise",)})
    keep(earlier, tmp_path)  # as an earlier release kept a busy verdict: every probe run, every figure
    assert kept(Key.of(earlier), tmp_path).calibration == earlier and earlier.not_run == ()
    assert "stopped there" not in report(earlier, None, memory_limit(), None, None)
    unmeasured = {**synthetic().to_json(), "worker_ms": None}  # not busy, yet a figure is missing
    with pytest.raises(ValueError, match="not busy"):
        Calibration.from_json(unmeasured)


def test_a_kept_calibration_is_found_by_its_key_and_a_damaged_or_stale_one_is_ignored(tmp_path):
    calibration = synthetic()
    path = keep(calibration, tmp_path)
    assert kept(Key.of(calibration), tmp_path).calibration == calibration
    other = Key.of(synthetic(fingerprint="sha256:" + "1" * 64))
    assert kept(other, tmp_path).calibration is None and kept(other, tmp_path).ignored is None  # none for it
    record = json.loads(path.read_text())
    record["body"]["calibration"]["gil_ms"] = 0.5  # edited by hand: the checksum no longer matches
    path.write_text(json.dumps(record))
    assert "damaged" in kept(Key.of(calibration), tmp_path).ignored
    path.write_text(path.read_text()[:40])  # cut short
    assert "damaged" in kept(Key.of(calibration), tmp_path).ignored
    keep(calibration, tmp_path)
    newer = Key(calibration.cpu_model, calibration.cores, calibration.fingerprint, (("python", "4"),))
    path.rename(store.path_of(newer, tmp_path))  # a record that names another key where this key's should be
    assert "stale" in kept(newer, tmp_path).ignored


def test_auto_ignores_a_damaged_record_calibrates_again_and_keeps_the_new_one(tmp_path, monkeypatch, caplog):
    """The flow of replicas="auto" with the probes stood in for (their real runs are above): a damaged record is
    said, measured again under the lock, kept; a busy measurement is said and kept, and stands for an hour (a later
    start takes the default plan without probing again); calibration off is the default plan."""
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(auto.sizing, "available_cpus", lambda: 2)
    fresh = synthetic(rates=(10.0, 10.0))  # a pool that does not scale: two replicas of one thread
    identity = {"fingerprint": fresh.fingerprint, "versions": fresh.versions}
    monkeypatch.setattr(auto, "identify", lambda *a, **k: identity)
    runs: list[int] = []
    monkeypatch.setattr(auto, "calibrate", lambda *a, **k: runs.append(1) or fresh)
    path = keep(synthetic(rates=(10.0, 20.0)))
    path.write_text("{not json")
    with caplog.at_level("INFO", logger="service.calibration.auto"):
        plan = auto.auto_plan(None)
    assert runs == [1] and "damaged" in caplog.text and "calibrating again" in caplog.text
    assert (plan.count, plan.threads) == (2, 1) and str(path) in plan.source
    assert kept(Key.of(fresh), tmp_path).calibration == fresh
    assert (auto.auto_plan(None).count, runs) == (2, [1])  # kept: not measured again
    assert "calibration turned off" in auto.auto_plan(None, use_calibration=False).source
    monkeypatch.setenv(CALIBRATION_DIR_ENV, "/proc/no-such-folder")  # cannot be made: the default plan, said
    unwritable = auto.auto_plan(None)
    assert "cannot keep a calibration" in unwritable.source and CALIBRATION_DIR_ENV in unwritable.source
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    now = datetime.now(timezone.utc).strftime(MEASURED_AT)
    busy = replace(stopped(fresh, reason="rust: noise"), measured_at=now)  # as calibrate makes it: stopped at once
    busy_runs: list[int] = []
    monkeypatch.setattr(auto, "calibrate", lambda *a, **k: busy_runs.append(1) or busy)
    path.unlink()
    plan = auto.auto_plan(None)
    assert f"this machine was busy at {busy.measured_at}: rust: noise" in plan.source and (
        plan.count,
        plan.threads,
    ) == (1, 2)
    assert kept(Key.of(busy), tmp_path).calibration == busy  # the verdict is kept, and stands:
    assert "busy" in auto.auto_plan(None).source and busy_runs == [1]  # the next start does not probe again
    an_hour_ago = (datetime.now(timezone.utc) - auto.BUSY_STANDS - timedelta(seconds=1)).strftime(MEASURED_AT)
    keep(replace(busy, measured_at=an_hour_ago), tmp_path)
    with caplog.at_level("INFO", logger="service.calibration.auto"):
        assert "busy" in auto.auto_plan(None).source and busy_runs == [1, 1]  # an old verdict: measured again
    assert "over 1:00:00 old: calibrating again" in caplog.text
