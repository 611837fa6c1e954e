"""The one harness every scenario runs on: a scenario declares a :class:`Scenario`; the runner (``benchmarks.run``)
owns the rest -- rounds in rotated order (:func:`in_rounds`), medians over rounds (:func:`medians`), the CPU other
processes used meanwhile (:class:`CpuProbe`, a note over :data:`BUSY_CORES`), the table, the JSON and the plots.
"""

from __future__ import annotations

import json
import math
import os
import platform
import select
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from service.sizing import available_cpus  # the CPUs this process may run on, as the server sizes its Rust pool

# The process of the scenarios that fork DataLoader workers with the tokenizer in-process, parallelism off
FORKS_WITH_PARALLELISM_OFF = "forks DataLoader workers, TOKENIZERS_PARALLELISM=false"
# The process of the scenarios that tokenize in-process at their best, parallelism on (8)
TOKENIZES_WITH_PARALLELISM_ON = "tokenizes in-process, TOKENIZERS_PARALLELISM=true"
BUSY_CORES = 0.25  # other processes using more than this during a measurement: the figure is noted as busy
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

V = TypeVar("V", bound=Hashable)
C = TypeVar("C")
Row = dict[str, Any]  # one line of the table: keys of benchmarks.report.COLUMNS


def log(message: str) -> None:
    """One time-stamped progress line on stderr (stdout is for the results)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- processes of the run ---------------------------------------------------------------------------------
def child_command(function: str, *arguments: Any) -> list[str]:
    """The command that runs ``function`` ("module:name") with ``arguments`` (JSON) in a process of its own: what it
    returns is the process's exit status (an int) or its last line of output (anything else, as JSON)."""
    return [sys.executable, "-m", "benchmarks.run", "--call", function, json.dumps(arguments)]


def call_in_own_process(function: str, *arguments: Any, timeout: float, env: dict[str, str] | None = None) -> Any:
    """What ``function`` returns, called with ``arguments`` in a process of its own (:func:`child_command`)."""
    command = child_command(function, *arguments)
    done = subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{function}{tuple(arguments)}: exit {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def answer_lines(handle: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
    """The child's side of :class:`ChildProcess`: one JSON command per line on stdin, one JSON answer per line on
    stdout (``ok``, and ``error`` when ``handle`` raised: the driver decides), until the input ends."""
    for line in sys.stdin:
        try:
            answer = {"ok": True, **handle(json.loads(line))}
        except Exception as exc:  # noqa: BLE001 -- reported to the driver, which stops the run
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    return 0


class ChildProcess:
    """A process of this run (``function`` through :func:`child_command`) driven by JSON lines over stdin/stdout, its
    stderr in ``log_path``; stopped by the end of its input, else killed by PID."""

    def __init__(self, function: str, log_path: Path, env: dict[str, str] | None = None, *arguments: Any) -> None:
        self.command, self.log_path, self.env = child_command(function, *arguments), log_path, env
        self.proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> ChildProcess:
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                self.command, env={**os.environ, **(self.env or {})}, text=True, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log_file,
            )  # fmt: skip
        return self

    def send(self, command: dict[str, Any]) -> None:
        """Send ``command`` without waiting (several children then work at once; :meth:`receive` each answer)."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def receive(self, what: str, timeout: float) -> dict[str, Any]:
        """The next answer (to ``what``), within ``timeout`` seconds."""
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"{self.command[4]} gave no answer to {what} (exit {self.proc.poll()}): {tail}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok", True):
            raise RuntimeError(f"{self.command[4]}: {answer['error']}")
        return answer

    def ask(self, command: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
        """Send ``command`` (its ``op`` names it) and wait for its answer."""
        self.send(command)
        return self.receive(command["op"], timeout)

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # end of commands: it exits
            self.proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()  # by PID
            self.proc.wait(5)


# -- the machine -------------------------------------------------------------------------------------------
def host_facts() -> dict[str, Any]:
    """What a table names the machine by: the CPU model, the CPUs this process may use and the host's count, the
    memory the kernel reports (MemTotal), the OS and the Python."""

    def field_of(path: str, name: str) -> str | None:
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
        return None

    memory_kb = int((field_of("/proc/meminfo", "MemTotal") or "0 kB").split()[0])
    return {
        "cpu_model": field_of("/proc/cpuinfo", "model name") or platform.processor() or platform.machine(),
        "cpus_available": available_cpus(),
        "cpus_on_host": os.cpu_count(),
        "memory_gib": round(memory_kb / 2**20, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def process_ticks(pid: int | str) -> int:
    """utime + stime of a process (all its threads; of one thread with ``"PID/task/TID"``), in clock ticks."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    values = stat[stat.rindex(")") + 2 :].split()
    return int(values[11]) + int(values[12])


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all threads, in seconds."""
    return process_ticks(pid) / CLOCK_TICKS


def in_threads(work: Callable[[int], object], count: int) -> None:
    """``work(index)`` in ``count`` threads at once; returns when all are done."""
    threads = [threading.Thread(target=work, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def busy_ticks(cores: Sequence[int] | set[int] | None = None) -> int:
    """Busy CPU ticks (all but idle and iowait) of the whole machine, or of ``cores`` only, from /proc/stat."""
    lines = Path("/proc/stat").read_text().splitlines()
    wanted = None if cores is None else {f"cpu{core}" for core in cores}
    total = 0
    for line in lines[:1] if wanted is None else lines[1:]:
        name, *values = line.split()
        if wanted is None or name in wanted:
            user, nice, system, _idle, _iowait, irq, softirq, steal = ([int(v) for v in values] + [0] * 8)[:8]
            total += user + nice + system + irq + softirq + steal
    return total


class CpuProbe:
    """CPU used over a window by this process (the client), by the watched processes (a server, a worker), and by
    everything else on the machine (other work: the noise). ``reaped_children``: children this process waited for
    meanwhile (DataLoader workers) count as ours. ``cores``: other work is counted on these cores only."""

    def __init__(self, *pids: int, reaped_children: bool = False, cores: Sequence[int] | None = None) -> None:
        self.pids, self.reaped_children, self.cores = pids, reaped_children, cores

    def snapshot(self) -> dict[str, Any]:
        children = os.times() if self.reaped_children else None
        return {
            "wall": time.perf_counter(),
            "client": time.process_time(),
            "self": process_ticks("self"),
            "pids": {pid: process_ticks(pid) for pid in self.pids},
            "machine": busy_ticks(self.cores),
            "children": (children.children_user + children.children_system) * CLOCK_TICKS if children else 0.0,
        }

    @staticmethod
    def delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
        wall = b["wall"] - a["wall"]
        watched = sum(b["pids"][pid] - a["pids"][pid] for pid in a["pids"])
        ours = watched + (b["self"] - a["self"]) + (b["children"] - a["children"])
        other = max(0, (b["machine"] - a["machine"]) - ours) / CLOCK_TICKS
        return {
            "wall_seconds": wall,
            "client_cpu_seconds": b["client"] - a["client"],
            "watched_cpu_seconds": watched / CLOCK_TICKS,
            "other_cpu_cores": other / wall if wall > 0 else 0.0,
        }


def machine_noise(seconds: float = 0.5) -> float:
    """Cores other processes keep busy, over a short idle window of this one."""
    probe = CpuProbe()
    before = probe.snapshot()
    time.sleep(seconds)
    return CpuProbe.delta(before, probe.snapshot())["other_cpu_cores"]


def wait_for_quiet(limit: float) -> float:
    """Wait, at most ``limit`` seconds, until other processes use under BUSY_CORES cores; the last reading.
    With no time to wait (smoke runs), one short reading."""
    deadline = time.monotonic() + limit
    while True:
        noise = machine_noise(2.0 if limit > 0 else 0.2)
        left = deadline - time.monotonic()
        if noise <= BUSY_CORES or left <= 0:
            return noise
        log(f"other processes are using {noise:.2f} cores; waiting for a quieter machine ({left:.0f} s left)")


def busy_note(other_cpu_cores: float) -> str:
    """The table's note on a figure taken while other processes used more than BUSY_CORES cores."""
    return f"busy machine: +{other_cpu_cores:.2f} cores" if other_cpu_cores > BUSY_CORES else ""


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            name, value = line.split(":", 1)
            out[name] = int(value.split()[0])
    return out


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM), in MB."""
    return memory_kib(os.getpid())["VmHWM"] / 1024


# -- rounds and medians ------------------------------------------------------------------------------------
def rotated(items: Sequence[V], shift: int) -> list[V]:
    """``items`` rotated left by ``shift``: round ``shift`` measures the variants in this order."""
    items = list(items)
    shift %= max(1, len(items))
    return items[shift:] + items[:shift]


def in_rounds(
    variants: Sequence[V],
    measure: Callable[..., dict[str, Any]],
    rounds: int,
    progress: str = "",
    points: Sequence[Hashable] | None = None,
) -> dict[Any, list[dict[str, Any]]]:
    """Every variant measured once per round, in ``rounds`` rounds, in rotated order: ``measure(variant)``, keyed
    by variant; or, at several ``points`` (text sets, batch sizes...), ``measure(point, variant)`` at each point
    in turn, the variants rotated at every point, keyed by (point, variant)."""
    runs: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for round_ in range(rounds):
        if progress:
            log(f"{progress}, round {round_ + 1}/{rounds}")
        for point in points if points is not None else [None]:
            for variant in rotated(variants, round_):
                if points is None:
                    runs[variant].append(measure(variant))
                else:
                    runs[(point, variant)].append(measure(point, variant))
    return runs


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over rounds of every number the rounds have in common, the most CPU other processes used in any
    of them (``other_cpu_cores``), and the rounds themselves."""
    numbers = [k for k, v in runs[0].items() if isinstance(v, int | float) and not isinstance(v, bool)]
    figures: dict[str, Any] = {k: statistics.median(run[k] for run in runs) for k in numbers}
    if "other_cpu_cores" in figures:
        figures["other_cpu_cores"] = max(run["other_cpu_cores"] for run in runs)
    return {**figures, "rounds": runs}


def percentiles(values: list[float], points: tuple[float, ...] = (50, 90, 99)) -> dict[str, float]:
    """Nearest-rank percentiles of seconds, in milliseconds."""
    if not values:
        return {f"p{p:g}": float("nan") for p in points}
    ordered = sorted(values)
    return {
        f"p{p:g}": 1000 * ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))] for p in points
    }


# -- targets -----------------------------------------------------------------------------------------------
def target(
    name: str,
    description: str,
    measured: float | None,
    threshold: float,
    *,
    higher_is_better: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """One target: met when ``measured`` is on the right side of ``threshold`` (None: not measured)."""
    met = None if measured is None else (measured >= threshold if higher_is_better else measured <= threshold)
    return {
        "target": name,
        "description": description,
        "threshold": threshold,
        "measured": measured,
        "met": met,
        **extra,
    }


def per_cell_target(name: str, description: str, per_cell: dict[str, float], threshold: float) -> dict[str, Any]:
    """A target over several cells: the geometric mean of the cells' ratios, the worst cell shown beside it."""
    values = [v for v in per_cell.values() if v and v > 0]
    mean = math.exp(statistics.mean(math.log(v) for v in values)) if values else None
    worst = min(per_cell, key=lambda k: per_cell[k]) if values else None
    return target(name, description, mean, threshold, per_cell=per_cell, worst_cell=worst)


def not_run(name: str, description: str, threshold: float, section: dict[str, Any]) -> dict[str, Any]:
    """A target whose scenario did not run (skipped, failed or not selected), with the reason."""
    reason = section.get("skipped") or section.get("failed") or "not run"
    return {**target(name, description, None, threshold), "reason": reason}


# -- the run's settings ------------------------------------------------------------------------------------
@dataclass
class Settings:
    """What every scenario is given: the size of the run (smoke or full, the command line's overrides), where its
    files go, and the processes scenarios share (started once, stopped by the runner at the end)."""

    smoke: bool
    out_dir: Path
    work_dir: Path
    tokenizers: tuple[str, ...]
    rounds: int | None = None  # --rounds: every scenario's rounds
    time_scale: float = 1.0  # --time-scale: every measurement's duration
    calibration: Path | None = None  # --calibration: the Rust pool's curve for the scaling projection
    shared: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)

    @property
    def log_dir(self) -> Path:
        path = self.out_dir / "logs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def counts(self, full: C, smoke: C) -> C:
        """A scenario's counts for this run: its smoke or full declaration, with the command line's rounds and
        time scale applied to its ``rounds`` and ``seconds`` fields where it has them."""
        chosen = smoke if self.smoke else full
        names = {f.name for f in fields(chosen)}  # type: ignore[arg-type]
        changes: dict[str, Any] = {}
        if self.rounds and "rounds" in names:
            changes["rounds"] = self.rounds
        if self.time_scale != 1.0 and "seconds" in names:
            changes["seconds"] = chosen.seconds * self.time_scale  # type: ignore[attr-defined]
        return replace(chosen, **changes)  # type: ignore[type-var]

    def share(self, key: str, start: Callable[[], Any]) -> Any:
        """The shared process (or anything with ``stop()``) under ``key``, started by ``start`` on first use."""
        if key not in self.shared:
            self.shared[key] = start()
        return self.shared[key]

    def once(self, key: str, measure: Callable[[], Any]) -> Any:
        """What ``measure`` gives, measured once per process: two scenarios that need the same figures share them."""
        if key not in self.measured:
            self.measured[key] = measure()
        return self.measured[key]

    def stop_shared(self) -> None:
        for item in reversed(list(self.shared.values())):
            item.stop()
        self.shared.clear()


@dataclass(frozen=True)
class Scenario:
    """What a scenario declares; the runner does the rest (see the module docstring)."""

    name: str  # its name in --scenarios
    summary: str  # one line of --help
    measure: Callable[[Settings], dict[str, Any]]
    rows: Callable[[dict[str, Any]], list[Row]] = lambda section: []
    targets: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda section: []
    # "": measured in the runner's process. Else the process it needs (DataLoader workers forked from it, process-wide
    # state such as TOKENIZERS_PARALLELISM, cores pinned): the scenarios that name the same one share a process
    # of their own (`python -m benchmarks.run --scenarios THEM`), and the servers started in it.
    process: str = ""
    needs_torch: bool = False  # skipped, with the reason, where torch is not installed
    timeout: tuple[float, float] = (1800.0, 240.0)  # seconds, full and smoke, in a process of its own


def outcome_row(scenario: str, section: dict[str, Any]) -> list[Row]:
    """The one row of a scenario that was skipped or failed; none when it ran."""
    for outcome in ("skipped", "failed"):
        if outcome in section:
            return [{"scenario": scenario, "note": f"{outcome}: {section[outcome]}"}]
    return []


def human(value: float | None) -> str:
    """3 significant figures, k/M suffixes: 12345 -> 12.3k."""
    if value is None or math.isnan(value):
        return "-"
    for threshold, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}"
