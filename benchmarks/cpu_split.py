"""One server process's CPU per batch, split by thread: the GIL side (Python threads) and the Rust pool.

    .venv/bin/python -m benchmarks.cpu_split                                # the four corpora: ~1 min on 2 cores
    .venv/bin/python -m benchmarks.cpu_split --against /tmp/main-copy       # + ~1 min per checkout beside it
    .venv/bin/python -m benchmarks.cpu_split --smoke --out /tmp/split.json  # one corpus, tiny counts: ~30 s

Run from the repository root. For each corpus it starts ``tokenizer-service serve`` of this checkout (and of
each ``--against`` checkout: same interpreter and packages, only ``service`` differs) through
``benchmarks/instrumented_server.py``, loads it with 3 keep-alive clients sending batches of 256 texts
(``padding="longest"``, ``truncation=True``, ``max_length=128``, binary answers as the SDK asks for tensors),
and reads the CPU each thread spent over a window that starts and ends with the server idle (every request
sent in the window is answered in it), divided by the batches answered:

- **GIL side**: the CPU of every Python thread (the event loop thread, the tokenizer thread, any other
  thread ``threading`` knows), each read from its own nanosecond CPU clock inside the server. The tokenizer
  thread's CPU is counted whole, its time inside the Rust call included: while the pool encodes, that thread
  waits on rayon's latch with ~0 CPU, so what it spends inside the call is the call's Python side (pyo3
  turning the texts into Rust strings and the encodings into Python objects, GIL held). That part is also
  shown apart ("in encode call", ``time.thread_time()`` around the engine's Rust call, measured from the
  thread itself). Python threads' CPU bounds their GIL-held time from above (a socket syscall runs without the
  GIL), so the ceiling below is a slight underestimate, never an overestimate.
- **Rust pool**: the process's CPU (``time.process_time()``: every thread) minus the Python threads and minus
  the native threads that existed before the tokenizer was loaded (numpy's BLAS pool, read from
  ``/proc/PID/task/TID/stat``; shown as "other native", ~0).
- **1 worker**: one process tokenizing the same batches with ``tokenizer(texts, ..., return_tensors="np")``,
  ``TOKENIZERS_PARALLELISM=false``, as each DataLoader worker of the workaround does: its CPU per batch.
- **ceiling**: ``1 / GIL side``, the batches per second one process can never exceed whatever its cores,
  since its Python threads share one GIL.

Corpora (``--corpora``): the embedded default WordPiece on ~300-character Chinese (``zh-medium``), short
Chinese reviews (``zh-short``) and ~1000-character Chinese (``zh-long``); the byte-level BPE on ~300-character
English (``en-medium-bpe``). Each measurement is repeated in ``--rounds`` rounds, the variants in rotated order;
the figures are medians over rounds, and the ``--against`` ratios are ratios of those medians. Every process
it starts is stopped by PID, also on error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from benchmarks import corpus, loadgen
from benchmarks.loadgen import SAFETENSORS_MEDIA_TYPE, CpuProbe, HttpConnection
from benchmarks.machine import available_cpus, machine_noise
from benchmarks.processes import tokenizer_dir
from benchmarks.progress import log
from benchmarks.scenarios.measuring import OPTIONS_BATCH, rotated
from testkit.servers import REPO, free_port

BATCH = 256
CLIENTS = 3
CHILD = Path(__file__).with_name("instrumented_server.py")
THIS_CHECKOUT = "this checkout"


@dataclass(frozen=True)
class Corpus:
    """One row of the table: a text set and the tokenizer that encodes it."""

    name: str
    label: str
    tokenizer: str  # "default" or a testkit.assets tokenizer
    language: str
    bucket: str


CORPORA = (
    Corpus("zh-medium", "~300-char Chinese, WordPiece (embedded default)", "default", "zh", "medium"),
    Corpus("zh-short", "short Chinese reviews, WordPiece", "default", "zh", "short"),
    Corpus("zh-long", "~1000-char Chinese, WordPiece", "default", "zh", "long"),
    Corpus("en-medium-bpe", "~300-char English, byte-level BPE", "bytelevel_bpe", "en", "medium"),
)


@dataclass(frozen=True)
class Counts:
    """How much to measure: every measurement is bounded by ``seconds`` (and the answers in flight)."""

    corpora: tuple[str, ...] = tuple(c.name for c in CORPORA)
    rounds: int = 3
    seconds: float = 2.0
    set_size: int = 1024  # texts per corpus: the batches the clients cycle through


FULL = Counts()
SMOKE = Counts(corpora=("zh-medium",), rounds=1, seconds=0.3, set_size=BATCH)


# -- the server under test ---------------------------------------------------------------------------------
def thread_ticks(pid: int) -> dict[int, int]:
    """utime + stime of every thread of ``pid``, in clock ticks, by thread id (``/proc/PID/task/TID/stat``)."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])
    return ticks


class SplitServer:
    """One instrumented ``serve`` of one checkout (``benchmarks/instrumented_server.py``), and its clients."""

    def __init__(self, checkout: str, repo: Path, tokenizer: str, work_dir: Path) -> None:
        self.checkout = checkout
        self.repo = repo
        self.tokenizer = tokenizer
        slug = f"{checkout}-{tokenizer}".replace(" ", "-").replace("/", "_")
        self.state_file = work_dir / f"state-{slug}.json"
        self.log_path = work_dir / f"server-{slug}.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.connections: list[HttpConnection] = []
        self.sequence = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 180.0) -> SplitServer:
        """Start the server, wait for /readyz, open the clients' connections."""
        args = ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        if self.tokenizer != "default":
            args += ["--model", str(tokenizer_dir(self.tokenizer))]
        env = {**os.environ, "PYTHONPATH": str(self.repo)}
        self.state_file.unlink(missing_ok=True)  # (a stale one would answer for this server)
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, str(CHILD), str(self.state_file), *args],
                cwd=self.repo,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the server of {self.checkout} exited with {self.proc.returncode}: {tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server of {self.checkout} was not ready in {timeout:g} s")
            time.sleep(0.1)
        self.connections = [HttpConnection("127.0.0.1", self.port) for _ in range(CLIENTS)]
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def state(self, timeout: float = 10.0) -> dict[str, Any]:
        """The server's thread CPU now (SIGUSR1: it writes its state file; the next sequence number is waited for)."""
        self.sequence += 1
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                state: dict[str, Any] = json.loads(self.state_file.read_text())
                if state["sequence"] >= self.sequence:
                    return state
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            time.sleep(0.002)
        raise TimeoutError(f"the server of {self.checkout} wrote no state in {timeout:g} s")

    def post(self, client: int, body: bytes) -> None:
        status, payload = self.connections[client].post("/encode", body, SAFETENSORS_MEDIA_TYPE)
        if status != 200:
            raise RuntimeError(f"/encode on {self.checkout} answered {status}: {payload[:300]!r}")

    def stop(self) -> None:
        """Close the connections and stop the server by PID (SIGTERM; SIGKILL if it lingers)."""
        for connection in self.connections:
            connection.close()
        self.connections = []
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@dataclass(frozen=True)
class Answered:
    """What a closed loop of clients got: every answer (``total``), and those that came by its deadline, the last
    of them ``by_deadline_seconds`` after the start: ``by_deadline / by_deadline_seconds`` is the rate while
    every client was sending, without the tail where the last answers come in one by one."""

    total: int
    by_deadline: int
    by_deadline_seconds: float

    @property
    def rate(self) -> float:
        """Answers per second while every client was sending."""
        if self.by_deadline == 0:  # one answer took longer than the whole window
            return 0.0
        return self.by_deadline / self.by_deadline_seconds


def closed_loop(send: Callable[[int, int], object], clients: int, seconds: float) -> Answered:
    """``clients`` threads, each calling ``send(client, n)`` for its n-th request as soon as its last is answered,
    until ``seconds`` have passed; returns when every request sent is answered."""
    started = time.perf_counter()
    deadline = started + seconds

    def client(index: int) -> tuple[int, int, float]:
        sent = by_deadline = 0
        last = started
        while time.perf_counter() < deadline:
            send(index, sent)
            sent += 1
            now = time.perf_counter()
            if now <= deadline:
                by_deadline, last = sent, now
        return sent, by_deadline, last

    with ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(client, range(clients)))
    return Answered(sum(o[0] for o in outcomes), sum(o[1] for o in outcomes), max(o[2] for o in outcomes) - started)


def closed_load(server: SplitServer, bodies: list[bytes], seconds: float) -> int:
    """:data:`CLIENTS` clients, each sending its next batch as soon as its last is answered, until ``seconds``
    have passed; returns when every request sent is answered (the server idle again): the batches answered."""

    def send(client: int, n: int) -> None:
        server.post(client, bodies[(client + n * CLIENTS) % len(bodies)])

    return closed_loop(send, CLIENTS, seconds).total


def measure_server(server: SplitServer, bodies: list[bytes], seconds: float) -> dict[str, Any]:
    """One window of load on ``server``: its CPU per batch by kind of thread (see the module docstring)."""
    probe = CpuProbe(server.pid)
    ticks_before = thread_ticks(server.pid)
    before = server.state()
    machine_before = probe.snapshot()
    batches = closed_load(server, bodies, seconds)
    machine = CpuProbe.delta(machine_before, probe.snapshot())
    after = server.state()
    ticks_after = thread_ticks(server.pid)

    def python_cpu(tid: str) -> float:
        was = before["python_threads"].get(tid)
        return after["python_threads"][tid]["cpu_seconds"] - (was["cpu_seconds"] if was else 0.0)

    threads = after["python_threads"]
    python = {tid: python_cpu(tid) for tid in threads}
    loop = sum(cpu for tid, cpu in python.items() if int(tid) == after["pid"])
    tokenizer = sum(cpu for tid, cpu in python.items() if threads[tid]["name"].startswith("tokenizer"))
    other_native = (
        sum(ticks_after.get(tid, 0) - ticks_before.get(tid, 0) for tid in after["natives_before_load"])
        / loadgen.CLOCK_TICKS
    )
    gil_side = sum(python.values())
    process = after["process_cpu_seconds"] - before["process_cpu_seconds"]
    in_encode = None
    if after["encode_call_seconds"] is not None:
        in_encode = after["encode_call_seconds"] - before["encode_call_seconds"]

    def per_batch(seconds_: float | None) -> float | None:
        return None if seconds_ is None else 1000 * seconds_ / batches

    return {
        "batches": batches,
        "wall_seconds": machine["wall_seconds"],
        "gil_side_ms": per_batch(gil_side),
        "event_loop_ms": per_batch(loop),
        "tokenizer_thread_ms": per_batch(tokenizer),
        "in_encode_call_ms": per_batch(in_encode),
        "other_python_ms": per_batch(gil_side - loop - tokenizer),
        "rust_pool_ms": per_batch(process - gil_side - other_native),
        "other_native_ms": per_batch(other_native),
        "process_ms": per_batch(process),
        "other_cpu_cores": machine["other_cpu_cores"],
    }


# -- the workaround's worker -----------------------------------------------------------------------------
class OneWorker:
    """``python -m benchmarks.cpu_split --worker``: one process, parallelism off, driven over stdin/stdout."""

    def __init__(self, work_dir: Path) -> None:
        self.log_path = work_dir / "worker.log"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> OneWorker:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.cpu_split", "--worker"],
                cwd=REPO,
                env=env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def ask(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send ``command`` and wait for its answer."""
        self.send(command)
        return self.receive(command["op"], timeout)

    def send(self, command: dict[str, Any]) -> None:
        """Send ``command`` without waiting (several workers then measure at once; :meth:`receive` each answer)."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def receive(self, op: str, timeout: float) -> dict[str, Any]:
        """The answer to the command ``op`` sent last."""
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"the worker gave no answer to {op} (exit {self.proc.poll()}): {tail}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"the worker: {answer['error']}")
        return answer

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()  # end of commands: it exits
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()  # by PID
            self.proc.wait(5)


def api_floor_ms(backend: Any, bodies: list[bytes], rounds: int) -> dict[str, float]:
    """What any server on tokenizers 0.23's Python API holds the GIL for per batch beside the encode call's own
    Python side (which the servers measure, "in call"), CPU ms of this one thread, median over ``rounds`` passes
    of ``bodies``: parsing the texts out of the request body (orjson), reading each encoding's ids -- a Python
    list of Python ints per text, the only way that API gives them -- into one int64 buffer (``array.fromlist``,
    the cheapest conversion measured), and freeing the encodings (Rust frees them under the GIL). The encode
    call itself is untimed; it runs with parallelism on, as the servers' does (the pool's threads allocate what
    this thread frees, as there)."""
    from array import array

    parse, read, free = [], [], []
    for _ in range(rounds):
        for body in bodies:
            started = time.thread_time()
            texts = orjson.loads(body)["texts"]
            parsed = time.thread_time()
            encodings = backend.encode_batch_fast(texts)
            reading = time.thread_time()
            ids = array("Q")
            for encoding in encodings:
                ids.fromlist(encoding.ids)
            freeing = time.thread_time()
            del encodings
            freed = time.thread_time()
            parse.append(parsed - started)
            read.append(freeing - reading)
            free.append(freed - freeing)
    medians = {name: 1000 * statistics.median(values) for name, values in (("parse", parse), ("read", read))}
    return {**medians, "free": 1000 * statistics.median(free)}


def worker_main() -> int:
    """The worker's side: ``setup`` loads a tokenizer and batches, ``measure`` tokenizes them for a while,
    ``floor`` measures :func:`api_floor_ms`."""
    from transformers import AutoTokenizer

    tokenizer: Any = None
    batches: list[list[str]] = []
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command["op"] == "setup":
                tokenizer = AutoTokenizer.from_pretrained(command["tokenizer"])
                batches = json.loads(Path(command["batches_file"]).read_text("utf-8"))
                for batch in batches:  # untimed: the first calls warm caches up
                    tokenizer(batch, return_tensors="np", **OPTIONS_BATCH)
                answer: dict[str, Any] = {"ok": True}
            elif command["op"] == "floor":
                backend = tokenizer.backend_tokenizer
                backend.enable_truncation(max_length=OPTIONS_BATCH["max_length"])  # as the batches' call sets it
                os.environ["TOKENIZERS_PARALLELISM"] = "true"  # (read by tokenizers at each call)
                try:
                    bodies = [orjson.dumps({"texts": batch, **OPTIONS_BATCH}) for batch in batches]
                    answer = api_floor_ms(backend, bodies, command["rounds"])
                finally:
                    os.environ["TOKENIZERS_PARALLELISM"] = "false"
                    backend.no_truncation()
            else:
                done = by_deadline = 0
                started = time.process_time()
                start = last = time.perf_counter()
                deadline = start + command["seconds"]
                while time.perf_counter() < deadline:
                    tokenizer(batches[done % len(batches)], return_tensors="np", **OPTIONS_BATCH)
                    done += 1
                    if (now := time.perf_counter()) <= deadline:
                        by_deadline, last = done, now
                # by_deadline: the batches done by the deadline, the last one by_deadline_seconds after the start
                # (the rate while several workers measuring at once were all busy)
                answer = {
                    "batches": done,
                    "cpu_ms": 1000 * (time.process_time() - started) / done,
                    "by_deadline": by_deadline,
                    "by_deadline_seconds": last - start,
                }
        except Exception as exc:  # noqa: BLE001 -- reported to the driver, which stops the run
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


# -- the run ---------------------------------------------------------------------------------------------
def measure_corpus(
    row: Corpus, checkouts: dict[str, Path], worker: OneWorker, counts: Counts, work_dir: Path
) -> dict[str, Any]:
    """Every checkout's server and the worker on one corpus, in interleaved rounds; the medians and the rounds."""
    texts = corpus.bucket_texts(row.language, row.bucket, counts.set_size)
    batches = corpus.batches_of(texts, BATCH)
    bodies = [orjson.dumps({"texts": batch, **OPTIONS_BATCH}) for batch in batches]
    batches_file = work_dir / f"batches-{row.name}.json"
    batches_file.write_text(json.dumps(batches, ensure_ascii=False), "utf-8")
    servers = {name: SplitServer(name, repo, row.tokenizer, work_dir) for name, repo in checkouts.items()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in (*servers, "1 worker")}
    try:
        log(f"{row.name}: starting {len(servers)} server(s); the worker loads {row.tokenizer}")
        for server in servers.values():
            server.start()
        worker.ask(
            {"op": "setup", "tokenizer": str(tokenizer_dir(row.tokenizer)), "batches_file": str(batches_file)}, 300
        )
        for server in servers.values():  # every batch once through each server before measuring
            for body in bodies:
                server.post(0, body)
        floor = worker.ask({"op": "floor", "rounds": counts.rounds}, 300)
        variants = tuple(runs)
        for round_ in range(counts.rounds):
            log(f"{row.name}: round {round_ + 1}/{counts.rounds}")
            for variant in rotated(variants, round_):
                if variant == "1 worker":
                    runs[variant].append(worker.ask({"op": "measure", "seconds": counts.seconds}, counts.seconds + 120))
                else:
                    runs[variant].append(measure_server(servers[variant], bodies, counts.seconds))
    finally:
        for server in servers.values():
            server.stop()
    figures = {name: _medians(name_runs) for name, name_runs in runs.items()}
    return {**asdict(row), "figures": figures, "rounds": runs, "api_floor_ms": floor}


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [key for key, value in runs[0].items() if isinstance(value, (int, float)) and value is not None]
    medians: dict[str, Any] = {key: statistics.median(run[key] for run in runs) for key in keys}
    if "gil_side_ms" in medians:
        medians["ceiling_batches_per_s"] = 1000 / medians["gil_side_ms"]
        medians["other_cpu_cores"] = max(run["other_cpu_cores"] for run in runs)
    if runs[0].get("in_encode_call_ms") is None:
        medians["in_encode_call_ms"] = None
    return medians


def report(results: dict[str, Any]) -> str:
    """The figures as printed: a table per checkout, then the GIL side of each checkout against the first."""
    meta = results["meta"]
    lines = [
        f"One `serve` process under load: {CLIENTS} clients, batches of {BATCH} texts ({meta['options']}, binary "
        f"answers), {meta['rust_threads']} Rust threads, on {meta['cpus']} CPUs; CPU ms per batch, median over "
        f"{meta['counts']['rounds']} round(s) of {meta['counts']['seconds']:g} s"
    ]
    header = (
        f"{'corpus, tokenizer':48} | {'GIL side':>8} | {'loop':>5} {'tok.thr':>7} {'in call':>7} {'other':>5} | "
        f"{'Rust pool':>9} | {'1 worker':>8} | {'ceiling':>12} | note"
    )
    for checkout in meta["checkouts"]:
        lines += ["", f"{checkout}:", header, "-" * len(header)]
        for row in results["corpora"]:
            f = row["figures"][checkout]
            worker = row["figures"]["1 worker"]
            in_call = "-" if f["in_encode_call_ms"] is None else f"{f['in_encode_call_ms']:7.2f}"
            busy = f"busy machine: {f['other_cpu_cores']:.2f} other cores" if f["other_cpu_cores"] > 0.25 else ""
            lines.append(
                f"{row['label']:48} | {f['gil_side_ms']:8.2f} | {f['event_loop_ms']:5.2f} "
                f"{f['tokenizer_thread_ms']:7.2f} {in_call:>7} {f['other_python_ms']:5.2f} | "
                f"{f['rust_pool_ms']:9.1f} | {worker['cpu_ms']:8.1f} | {f['ceiling_batches_per_s']:6.0f} batch/s"
                f" | {busy}"
            )
    if len(meta["checkouts"]) > 1:
        base, *others = meta["checkouts"]
        lines += ["", f"GIL side ms/batch, each checkout against {base} (ratio of medians):"]
        for row in results["corpora"]:
            figures = row["figures"]
            cells = [f"{base} {figures[base]['gil_side_ms']:.2f}"]
            for other in others:
                value = figures[other]["gil_side_ms"]
                cells.append(f"{other} {value:.2f} ({value / figures[base]['gil_side_ms']:.2f}x)")
            lines.append(f"  {row['label']:48} " + ", ".join(cells))
    lines += [
        "",
        "The floor of tokenizers 0.23's Python API, ms/batch: the servers' 'in call' (the encode call's Python",
        "side) + what any server must do with its answer under the GIL (measured alone, in the worker):",
    ]
    for row in results["corpora"]:
        floor = row.get("api_floor_ms")
        if floor is None:
            continue
        for checkout in meta["checkouts"]:
            f = row["figures"][checkout]
            if f["in_encode_call_ms"] is None:
                continue
            total = f["in_encode_call_ms"] + floor["parse"] + floor["read"] + floor["free"]
            lines.append(
                f"  {row['label']:48} {checkout}: in call {f['in_encode_call_ms']:.2f} + parse {floor['parse']:.2f} "
                f"+ ids read {floor['read']:.2f} + encodings freed {floor['free']:.2f} = {total:.2f} "
                f"({total / f['gil_side_ms']:.0%} of its GIL side)"
            )
    lines.append(
        "\nGIL side: CPU of the Python threads (loop: the event loop thread; tok.thr: the tokenizer thread, of "
        "which 'in call' inside the Rust encode call, GIL held there but for a wait of ~0 CPU; other: any other "
        "Python thread). Rust pool: the process's CPU less the Python threads and the native threads that "
        "predate the tokenizer. 1 worker: tokenizer(..., return_tensors='np'), parallelism off, in its own "
        "process. ceiling: 1 / GIL side, the most batches/s one process can answer, whatever its cores."
    )
    return "\n".join(lines)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the servers


def main(argv: list[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cpu_split",
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help="one corpus, one short round (for CI)")
    parser.add_argument(
        "--against", type=Path, action="append", default=[], help="another checkout to measure side by side"
    )
    parser.add_argument(
        "--corpora", default=None, help=f"comma-separated subset of {', '.join(c.name for c in CORPORA)}"
    )
    parser.add_argument("--rounds", type=int, default=None, help=f"rounds (default {FULL.rounds})")
    parser.add_argument("--seconds", type=float, default=None, help=f"per measurement (default {FULL.seconds:g})")
    parser.add_argument("--out", type=Path, default=None, help="also write every figure here, as JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main()
    counts = SMOKE if args.smoke else FULL
    if args.corpora:
        known = {c.name for c in CORPORA}
        names = tuple(name.strip() for name in args.corpora.split(",") if name.strip())
        unknown = [name for name in names if name not in known]
        if unknown:
            parser.error(f"unknown corpora {', '.join(unknown)}: choose among {', '.join(sorted(known))}")
        counts = Counts(names, counts.rounds, counts.seconds, counts.set_size)
    if args.rounds or args.seconds:
        counts = Counts(counts.corpora, args.rounds or counts.rounds, args.seconds or counts.seconds, counts.set_size)
    checkouts = {THIS_CHECKOUT: REPO}
    for other in args.against:
        if not (other / "service" / "__init__.py").is_file():
            parser.error(f"{other} is not a checkout (no service/__init__.py)")
        checkouts[f"checkout {other.name}"] = other.resolve()

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    started = time.time()
    noise = machine_noise(1.0)
    results: dict[str, Any] = {
        "meta": {
            "command": [sys.executable, *sys.argv],
            "cpus": os.cpu_count(),
            "rust_threads": available_cpus(),
            "options": OPTIONS_BATCH,
            "batch": BATCH,
            "clients": CLIENTS,
            "counts": asdict(counts),
            "checkouts": list(checkouts),
            "repos": {name: str(path) for name, path in checkouts.items()},
            "other_cpu_cores_at_start": noise,
        },
        "corpora": [],
    }
    by_name = {c.name: c for c in CORPORA}
    with tempfile.TemporaryDirectory(prefix="cpu-split-") as scratch:
        worker = OneWorker(Path(scratch)).start()
        try:
            for name in counts.corpora:
                results["corpora"].append(measure_corpus(by_name[name], checkouts, worker, counts, Path(scratch)))
        finally:
            worker.stop()
    results["seconds"] = time.time() - started
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
