"""A calibration: what one tokenizer does on this machine, measured by short probe processes
(:mod:`.probes`, each started by exec with the server's interpreter; this process never loads the tokenizer), in
order: ``identify`` (fingerprint, versions, the texts), ``rust`` at 1, 2, 4, ... threads up to the cores (each on
as many CPUs), ``worker`` (the workaround's worker on one CPU) and a real server of one Rust thread under load.
From them, per batch of 256 texts:

- the Rust pool's curve: batches a second at t threads (measured: the wall time outside the calling thread's CPU);
- R, the pool's CPU on one thread (measured); W, one parallelism-off worker's CPU (measured);
- G, one server process's GIL side: its Python threads' CPU per batch under load, as its /metrics says (measured);
- a replica's peak resident memory (measured).

Noise: each probe measures in rounds; a probe whose rounds differ by more than ``max_spread`` of their median, or
whose CPUs other processes kept busier than ``max_others``, makes the calibration *busy*: reported, never
planned from. Since nothing is planned from it, a busy calibration ends at that probe: the later ones are not run,
and their figures are None (not measured), never a made-up number. Standard library only (the launcher calls it)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..processes import child_environment
from ..sizing import Curve, Measurement, Plan, allowed_cpus, available_cpus, choose_plan, cpu_model, memory_limit
from .texts import BUILT_IN, read_texts

__all__ = [
    "MAX_OTHERS",
    "MEASURED_AT",
    "MAX_SPREAD",
    "Calibration",
    "CalibrationError",
    "Noise",
    "SERVER_PROBE",
    "WORKER_PROBE",
    "calibrate",
    "rust_probe",
    "thread_counts",
]

#: How a calibration's time is written (UTC).
MEASURED_AT = "%Y-%m-%d %H:%M:%S UTC"
#: A probe's rounds may differ by this share of their median, and no more, for its figure to be planned from.
MAX_SPREAD = 0.25
#: Other processes may keep a probe's CPUs busy this share of the time, and no more.
MAX_OTHERS = 0.25
#: How long one probe may take (loading a hub tokenizer included) before the calibration gives up.
PROBE_TIMEOUT = 300.0
PROBES = "service.calibration.probes"
#: The probes' names, in the order a calibration runs them (the Rust pool's at each of :func:`thread_counts`): what
#: its busy reasons and its report call them.
WORKER_PROBE = "the worker"
SERVER_PROBE = "the server"


def rust_probe(threads: int) -> str:
    return f"rust at {threads} thread(s)"


class CalibrationError(Exception):
    """A probe could not run (the tokenizer does not load, the texts cannot be read...): the message says why."""


@dataclass(frozen=True)
class Noise:
    """The bounds a calibration's probes must keep to be planned from."""

    max_spread: float = MAX_SPREAD
    max_others: float = MAX_OTHERS


@dataclass(frozen=True)
class Point:
    """The Rust pool at ``threads`` threads: batches a second, its rounds' spread and other processes' share."""

    threads: int
    rate: float
    spread: float
    others: float


@dataclass(frozen=True)
class Calibration:
    """What the probes measured (and derived: G), where, of which tokenizer, and whether it may be planned from.

    A busy calibration stops at the probe that found the machine busy: the curve holds the thread counts measured
    (1 at least: the first probe), and the figures of the probes not run are None."""

    cpu_model: str
    cores: int
    fingerprint: str
    versions: dict[str, str]
    texts: str
    measured_at: str
    curve: tuple[Point, ...]
    gil_ms: float | None  # a server of one Rust thread under load: its Python threads' CPU per batch
    rust_ms: float  # the first probe's: measured by every calibration
    worker_ms: float | None
    replica_bytes: int | None
    busy: tuple[str, ...] = field(default=())  # why it may not be planned from; empty: it may

    def __post_init__(self) -> None:
        Curve(tuple((p.threads, p.rate) for p in self.curve))  # a curve that is not one raises here
        if not self.busy and self.not_run:
            raise ValueError(f"a calibration that is not busy measures every probe; not run: {self.not_run}")

    @property
    def threads_not_run(self) -> tuple[int, ...]:
        """The thread counts of the Rust pool's curve it did not measure (after the probe that found it busy)."""
        measured = {p.threads for p in self.curve}
        return tuple(threads for threads in thread_counts(self.cores) if threads not in measured)

    @property
    def not_run(self) -> tuple[str, ...]:
        """The probes it did not run, in their order: those after the one that found the machine busy."""
        probes = [rust_probe(threads) for threads in self.threads_not_run]
        probes += [WORKER_PROBE] if self.worker_ms is None else []
        probes += [SERVER_PROBE] if self.gil_ms is None or self.replica_bytes is None else []
        return tuple(probes)

    @property
    def stopped_at(self) -> str | None:
        """The probe that found the machine busy and ended the calibration; None where none was left out."""
        if not self.not_run:
            return None
        return WORKER_PROBE if self.worker_ms is not None else rust_probe(self.curve[-1].threads)

    @property
    def measurement(self) -> Measurement:
        """What the planner is fed; ValueError where a busy calibration stopped before a figure was measured."""
        if self.gil_ms is None or self.worker_ms is None or self.replica_bytes is None:
            raise ValueError(f"not measured (busy): {', '.join(self.not_run)}")
        curve = Curve(tuple((p.threads, p.rate) for p in self.curve))
        return Measurement(self.gil_ms, curve, self.worker_ms, self.replica_bytes, self.rust_ms)

    def plan(self, memory_bytes: int | None = None) -> Plan | None:
        """The plan for its cores within ``memory_bytes`` (default: this process's limit); None when busy."""
        if self.busy:
            return None
        return choose_plan(self.measurement, self.cores, memory_limit() if memory_bytes is None else memory_bytes)

    def to_json(self) -> dict[str, Any]:
        """Its fields; a figure not measured (busy) is null."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        """A calibration from :meth:`to_json`'s document (a busy one of an earlier release, every figure measured,
        too); ValueError, KeyError or TypeError where it is not one."""
        points = tuple(Point(**point) for point in data["curve"])
        fields = {**data, "curve": points, "busy": tuple(data["busy"]), "versions": dict(data["versions"])}
        return cls(**fields)


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... below ``cores``, then ``cores``."""
    counts = [1]
    while counts[-1] * 2 < cores:
        counts.append(counts[-1] * 2)
    if cores > 1:
        counts.append(cores)
    return counts


def calibrate(
    model: str | None,
    revision: str | None = None,
    *,
    texts: str | None = None,
    cores: int | None = None,
    python: str = sys.executable,
    noise: Noise = Noise(),
    rounds: int = 5,
    round_seconds: float = 0.25,
    say: Callable[[str], None] = lambda line: None,
) -> Calibration:
    """Measure ``model`` on ``cores`` of the CPUs this process may use (default: all of them); ``say`` hears a line
    per probe. CalibrationError when a probe cannot run; a busy machine gives a calibration with ``busy`` set, made
    by the probes up to the first that found it busy (the later ones are not run)."""
    allowed = available_cpus()
    if cores is None:
        cores = allowed
    elif not 1 <= cores <= allowed:
        raise CalibrationError(
            f"--cores {cores}: this process may use {allowed} CPU(s) (its affinity and cgroup quota); pass --cores "
            f"from 1 to {allowed}, or leave it out"
        )
    if texts is not None:
        read_texts(texts)  # a bad --texts is said at once, before a probe loads the tokenizer
    cpus = allowed_cpus()[:cores]
    source = ["--model", model] if model is not None else []
    source += ["--revision", revision] if revision is not None else []
    timing = ["--rounds", str(rounds), "--round-seconds", str(round_seconds)]
    points: list[Point] = []
    rust_ms = 0.0
    worker_ms: float | None = None
    gil_ms: float | None = None
    replica_bytes: int | None = None
    # The first probe that finds the machine busy ends the calibration: nothing is planned from a busy one, so the
    # later probes would cost their time (tens of seconds on a busy machine) for figures no one may use.
    with tempfile.TemporaryDirectory(prefix="tokenizer-service-calibration-") as folder:
        written = os.path.join(folder, "texts.jsonl")
        say("loading the tokenizer (identify)")
        given = ["--texts", texts] if texts is not None else []
        identity = _probe(python, ["identify", *source, *given, "--write-texts", written])
        common = [*source, "--texts", written]
        busy: list[str] = []
        for threads in thread_counts(cores):
            say(f"the Rust pool at {threads} thread{'s' if threads > 1 else ''}")
            pinned = ["--threads", str(threads), "--cpus", ",".join(map(str, cpus[:threads]))]
            report = _probe(python, ["rust", *common, *pinned, *timing])
            point, main_cpu = _point(threads, report["rounds"])
            points.append(point)
            if threads == 1:
                rust_ms = _per_batch(report["rounds"], "cpu") - main_cpu
            busy = _noisy(rust_probe(threads), point.spread, point.others, noise)
            if busy:
                break
        if not busy:
            say("the workaround's worker (parallelism off, one CPU)")
            worker = _probe(python, ["worker", *common, "--cpus", str(cpus[0]), *timing])
            worker_ms = _per_batch(worker["rounds"], "cpu")
            busy = _noisy(WORKER_PROBE, _spread(worker["rounds"]), _others(worker["rounds"]), noise)
        if not busy:
            say("a server of one Rust thread under load")
            server = _server_probe(python, source, ["--texts", written, *timing], folder)
            if server["fingerprint"] != identity["fingerprint"]:
                raise CalibrationError("the tokenizer's files changed while it was calibrated; calibrate again")
            gil_ms = max(_per_batch(server["rounds"], "python_cpu"), 0.001)
            replica_bytes = int(server["rss_bytes"])
            busy = _noisy(SERVER_PROBE, _spread(server["rounds"]), 0.0, noise)
    return Calibration(
        cpu_model=cpu_model(),
        cores=cores,
        fingerprint=identity["fingerprint"],
        versions=identity["versions"],
        texts=texts if texts is not None else BUILT_IN,
        measured_at=datetime.now(timezone.utc).strftime(MEASURED_AT),
        curve=tuple(points),
        gil_ms=gil_ms,
        rust_ms=rust_ms,
        worker_ms=worker_ms,
        replica_bytes=replica_bytes,
        busy=tuple(busy),
    )


def _point(threads: int, rounds: list[dict[str, float]]) -> tuple[Point, float]:
    """The pool's rate at ``threads`` (batches over the wall time the calling thread did not spend on CPU), and the
    calling thread's CPU per batch."""
    rates = [r["batches"] / max(r["wall"] - r["main_cpu"], 1e-9) for r in rounds]
    return Point(threads, statistics.median(rates), _relative_range(rates), _others(rounds)), _per_batch(
        rounds, "main_cpu"
    )


def _per_batch(rounds: list[dict[str, float]], what: str) -> float:
    """The median over rounds of ``what`` per batch, in ms."""
    return statistics.median(1000 * r[what] / max(r["batches"], 1) for r in rounds)


def _spread(rounds: list[dict[str, float]]) -> float:
    return _relative_range([r["batches"] / r["wall"] for r in rounds if r["wall"] > 0])


def _relative_range(values: Sequence[float]) -> float:
    middle = statistics.median(values) if values else 0.0
    return (max(values) - min(values)) / middle if middle > 0 else float("inf")


def _others(rounds: list[dict[str, float]]) -> float:
    return statistics.median(r.get("others", 0.0) for r in rounds)


def _noisy(what: str, spread: float, others: float, noise: Noise) -> list[str]:
    reasons = []
    if spread > noise.max_spread:
        reasons.append(f"{what}: rounds differ by {spread:.0%} of their median (bound {noise.max_spread:.0%})")
    if others > noise.max_others:
        reasons.append(f"{what}: other processes kept its CPUs {others:.0%} busy (bound {noise.max_others:.0%})")
    return reasons


def _probe(python: str, arguments: list[str]) -> dict[str, Any]:
    """Run one probe to its end; its JSON report, or CalibrationError with what it said."""
    command = [python, "-m", PROBES, *arguments]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=PROBE_TIMEOUT, env=child_environment(), check=False
        )
    except subprocess.TimeoutExpired:
        raise CalibrationError(
            f"the {arguments[0]} probe took more than {PROBE_TIMEOUT:.0f} s; is the machine busy?"
        ) from None
    except OSError as exc:
        raise CalibrationError(f"cannot run the probe with {python!r}: {exc}") from None
    return _report(arguments[0], done.returncode, done.stdout, done.stderr)


def _report(kind: str, code: int | None, stdout: str, stderr: str) -> dict[str, Any]:
    lines = stdout.strip().splitlines()
    try:
        report: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except ValueError:
        report = {}
    if "error" in report:
        raise CalibrationError(report["error"])
    if code != 0 or ("rounds" not in report and kind != "identify"):
        said = (stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise CalibrationError(f"the {kind} probe failed (exit {code}): {said}")
    return report


def _server_probe(python: str, source: list[str], load_args: list[str], folder: str) -> dict[str, Any]:
    """A server of one Rust thread (``serve``, as shipped) on a socket in ``folder``, loaded by the load probe;
    stopped by its pid whatever happens."""
    socket_path = os.path.join(folder, "server.sock")
    log_path = os.path.join(folder, "server.log")
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [python, "-m", "service", "serve", *source, "--uds", socket_path, "--threads", "1"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_environment(),
            start_new_session=True,
        )
    try:
        load = ["load", "--socket", socket_path, "--server-pid", str(server.pid), *load_args]
        try:
            return _probe(python, load)
        except CalibrationError as exc:
            if server.poll() is not None:
                with open(log_path, errors="replace") as said:
                    last = (said.read().strip().splitlines() or ["(no output)"])[-1]
                raise CalibrationError(f"the server probe exited with code {server.returncode}: {last}") from None
            raise exc
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(5)


def identify(model: str | None, revision: str | None = None, *, python: str = sys.executable) -> dict[str, Any]:
    """The tokenizer's fingerprint and the package versions of ``python``, from the ``identify`` probe."""
    arguments = ["identify"] + (["--model", model] if model is not None else [])
    return _probe(python, arguments + (["--revision", revision] if revision is not None else []))
