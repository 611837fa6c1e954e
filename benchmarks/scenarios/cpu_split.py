"""The CPU split ("split"): one server process's CPU per batch by thread -- the GIL side (its Python threads, each
read from its own clock inside the server) and the Rust pool (the rest) -- beside one parallelism-off worker; one
process's ceiling is 1 / GIL side. What each figure counts: docs/guides/performance.md, "One process".
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from benchmarks import corpus
from benchmarks.harness import (
    CLOCK_TICKS,
    ChildProcess,
    CpuProbe,
    Row,
    Scenario,
    Settings,
    answer_lines,
    busy_note,
    human,
    in_rounds,
    in_threads,
    log,
    medians,
    process_ticks,
)
from benchmarks.processes import SAFETENSORS_MEDIA_TYPE, encode_request, tokenizer_dir
from benchmarks.scenarios.measuring import OPTIONS_BATCH
from service.sizing import available_cpus
from service.transport.stdlib import HTTPTransport
from testkit.servers import free_port

BATCH = 256
CLIENTS = 3
CLOCKS_THREAD = "thread-clocks"  # the server's thread that answers with the clocks (not counted)


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
    """How much the split and scaling measure: every measurement is bounded by ``seconds`` (a DataLoader's also by
    ``loader_batches``, scaling's collator cells)."""

    corpora: tuple[str, ...] = tuple(c.name for c in CORPORA)
    rounds: int = 3
    seconds: float = 2.0
    set_size: int = 1024  # texts per corpus: the batches cycled through
    loader_batches: int = 400


FULL = Counts()
SMOKE = Counts(corpora=("zh-short",), rounds=1, seconds=0.3, set_size=BATCH, loader_batches=3)
# The process the split shares with scaling, which starts from the split of each corpus (the same figures, measured
# once in that process) and pins the process to cores cell by cell.
SPLIT_AND_SCALING = "the split and scaling"


# -- the server under test ---------------------------------------------------------------------------------
def serve_with_thread_clocks(*serve_args: str) -> int:
    """``tokenizer-service serve`` as shipped, beside a thread that answers each line on stdin with the CPU clocks of
    the process and of every Python thread, and the native threads alive before the tokenizer loaded (numpy's)."""
    import numpy  # noqa: F401 -- its BLAS threads start now, before the tokenizer loads

    import service.engine.tokenizer_thread  # noqa: F401 -- the engine, with tokenizers and transformers
    from service.http.cli import main as serve

    python_tids = {thread.native_id for thread in threading.enumerate()}
    natives = sorted(int(tid) for tid in os.listdir("/proc/self/task") if int(tid) not in python_tids)

    def clocks(command: dict[str, Any]) -> dict[str, Any]:
        threads = {}
        for thread in threading.enumerate():
            with contextlib.suppress(OSError):  # (a thread that ended meanwhile)
                cpu = time.clock_gettime(time.pthread_getcpuclockid(thread.ident or 0))
                threads[str(thread.native_id)] = {"name": thread.name, "cpu_seconds": cpu}
        return {"pid": os.getpid(), "process_cpu_seconds": time.process_time(), "python_threads": threads} | {
            "natives_before_load": natives
        }

    threading.Thread(target=answer_lines, args=(clocks,), name=CLOCKS_THREAD, daemon=True).start()
    return int(serve(list(serve_args)) or 0)


def thread_ticks(pid: int) -> dict[int, int]:
    """utime + stime of every thread of ``pid``, in clock ticks, by thread id."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # (a thread that ended meanwhile)
            ticks[int(task.name)] = process_ticks(f"{pid}/task/{task.name}")
    return ticks


class SplitServer(ChildProcess):
    """One :func:`serve_with_thread_clocks` on a free port, and the keep-alive connections of its clients."""

    def __init__(self, tokenizer: str, work_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]
        args += [] if tokenizer == "default" else ["--model", str(tokenizer_dir(tokenizer))]
        function = "benchmarks.scenarios.cpu_split:serve_with_thread_clocks"
        super().__init__(function, work_dir / f"server-split-{tokenizer}.log", None, *args)
        self.connections = [HTTPTransport() for _ in range(CLIENTS)]

    def start(self, timeout: float = 180.0) -> SplitServer:
        """Start the server and wait for /readyz."""
        super().start()
        deadline = time.monotonic() + timeout
        while self.proc is not None and self.proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as response:
                    if response.status == 200:
                        return self
            time.sleep(0.1)
        tail = self.log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the split server was not ready in {timeout:g} s: {tail}")

    def post(self, client: int, body: bytes) -> None:
        response = self.connections[client].handle_request(encode_request(self.url, body, SAFETENSORS_MEDIA_TYPE))
        if response.status != 200:
            raise RuntimeError(f"/encode on the split server: {response.status}: {bytes(response.body)[:300]!r}")

    def stop(self, timeout: float = 30.0) -> None:
        """Close the connections and stop the server by PID (SIGTERM; SIGKILL if it lingers)."""
        for connection in self.connections:
            connection.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        super().stop(timeout)


def closed_loop(send: Callable[[int, int], object], clients: int, seconds: float) -> dict[str, float]:
    """``clients`` threads, each calling ``send(client, n)`` for its n-th request as soon as its last is answered,
    until ``seconds`` have passed; returns when every request sent is answered: the batches answered and the rate
    while every client was sending (the answers by the deadline over the time of the last of them)."""
    started = time.perf_counter()
    deadline = started + seconds
    outcomes: list[tuple[int, int, float]] = []

    def client(index: int) -> None:
        sent = by_deadline = 0
        last = started
        while time.perf_counter() < deadline:
            send(index, sent)
            sent += 1
            now = time.perf_counter()
            if now <= deadline:
                by_deadline, last = sent, now
        outcomes.append((sent, by_deadline, last))

    in_threads(client, clients)
    by_deadline = sum(o[1] for o in outcomes)
    rate = by_deadline / (max(o[2] for o in outcomes) - started) if by_deadline else 0.0
    return {"batches": sum(o[0] for o in outcomes), "batches_per_s": rate}


def measure_server(server: SplitServer, bodies: list[bytes], seconds: float) -> dict[str, Any]:
    """One window of load on ``server``: its CPU per batch by kind of thread (see the module docstring)."""
    probe = CpuProbe(server.pid)
    ticks_before = thread_ticks(server.pid)
    before = server.ask({"op": "clocks"}, 10)
    machine_before = probe.snapshot()

    def send(client: int, n: int) -> None:
        server.post(client, bodies[(client + n * CLIENTS) % len(bodies)])

    batches = closed_loop(send, CLIENTS, seconds)["batches"]
    machine = CpuProbe.delta(machine_before, probe.snapshot())
    after = server.ask({"op": "clocks"}, 10)
    ticks_after = thread_ticks(server.pid)

    def python_cpu(tid: str) -> float:
        was = before["python_threads"].get(tid)
        return after["python_threads"][tid]["cpu_seconds"] - (was["cpu_seconds"] if was else 0.0)

    threads = after["python_threads"]
    python = {tid: python_cpu(tid) for tid in threads if threads[tid]["name"] != CLOCKS_THREAD}
    loop = sum(cpu for tid, cpu in python.items() if int(tid) == after["pid"])
    tokenizer = sum(cpu for tid, cpu in python.items() if threads[tid]["name"].startswith("tokenizer"))
    other_native = (
        sum(ticks_after.get(tid, 0) - ticks_before.get(tid, 0) for tid in after["natives_before_load"]) / CLOCK_TICKS
    )
    gil_side = sum(python.values())
    process = after["process_cpu_seconds"] - before["process_cpu_seconds"]

    def per_batch(seconds_: float) -> float:
        return 1000 * seconds_ / batches

    return {
        "batches": batches,
        "wall_seconds": machine["wall_seconds"],
        "gil_side_ms": per_batch(gil_side),
        "event_loop_ms": per_batch(loop),
        "tokenizer_thread_ms": per_batch(tokenizer),
        "other_python_ms": per_batch(gil_side - loop - tokenizer),
        "rust_pool_ms": per_batch(process - gil_side - other_native),
        "other_native_ms": per_batch(other_native),
        "process_ms": per_batch(process),
        "other_cpu_cores": machine["other_cpu_cores"],
    }


# -- the workaround's worker -----------------------------------------------------------------------------
def one_worker(work_dir: Path, index: int = 0) -> ChildProcess:
    """One process tokenizing in-process with parallelism off (:func:`worker_main`), started."""
    env = {"TOKENIZERS_PARALLELISM": "false"}
    return ChildProcess("benchmarks.scenarios.cpu_split:worker_main", work_dir / f"worker-{index}.log", env).start()


def worker_main() -> int:
    """The worker's side: ``setup`` loads a tokenizer and batches, ``measure`` tokenizes them for a while."""
    from transformers import AutoTokenizer

    held: dict[str, Any] = {}

    def handle(command: dict[str, Any]) -> dict[str, Any]:
        if command["op"] == "setup":
            held["tokenizer"] = tokenizer = AutoTokenizer.from_pretrained(command["tokenizer"])
            held["batches"] = batches = json.loads(Path(command["batches_file"]).read_text("utf-8"))
            for batch in batches:  # untimed: the first calls warm caches up
                tokenizer(batch, return_tensors="np", **OPTIONS_BATCH)
            return {}
        tokenizer, batches = held["tokenizer"], held["batches"]

        def encode(_: int, n: int) -> None:
            tokenizer(batches[n % len(batches)], return_tensors="np", **OPTIONS_BATCH)

        started = time.process_time()
        answered = closed_loop(encode, 1, command["seconds"])
        return {**answered, "cpu_ms": 1000 * (time.process_time() - started) / answered["batches"]}

    return answer_lines(handle)


# -- the run ---------------------------------------------------------------------------------------------
def measure_corpus(row: Corpus, worker: ChildProcess, counts: Counts, work_dir: Path) -> dict[str, Any]:
    """The server and the worker on one corpus, in interleaved rounds; the medians and the rounds."""
    texts = corpus.bucket_texts(row.language, row.bucket, counts.set_size)
    batches = corpus.batches_of(texts, BATCH)
    bodies = [orjson.dumps({"texts": batch, **OPTIONS_BATCH}) for batch in batches]
    batches_file = work_dir / f"batches-{row.name}.json"
    batches_file.write_text(json.dumps(batches, ensure_ascii=False), "utf-8")
    server = SplitServer(row.tokenizer, work_dir)
    try:
        log(f"split, {row.name}: starting the server; the worker loads {row.tokenizer}")
        server.start()
        worker.ask(
            {"op": "setup", "tokenizer": str(tokenizer_dir(row.tokenizer)), "batches_file": str(batches_file)}, 300
        )
        for body in bodies:  # every batch once through the server before measuring
            server.post(0, body)

        def one(variant: str) -> dict[str, Any]:
            if variant == "1 worker":
                return worker.ask({"op": "measure", "seconds": counts.seconds}, counts.seconds + 120)
            return measure_server(server, bodies, counts.seconds)

        runs = in_rounds(("server", "1 worker"), one, counts.rounds, f"split, {row.name}")
    finally:
        server.stop()
    figures = {name: medians(values) for name, values in runs.items()}
    figures["server"]["ceiling_batches_per_s"] = 1000 / figures["server"]["gil_side_ms"]
    return {**asdict(row), "server": figures["server"], "worker": figures["1 worker"]}


def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(FULL, SMOKE)
    worker = one_worker(settings.work_dir)
    try:
        corpora = [split_of(settings, BY_NAME[name], worker, counts) for name in counts.corpora]
    finally:
        worker.stop()
    meta = {"rust_threads": available_cpus(), "options": OPTIONS_BATCH, "batch": BATCH, "clients": CLIENTS}
    return {"meta": {**meta, "counts": asdict(counts)}, "corpora": corpora}


def split_of(settings: Settings, row: Corpus, worker: ChildProcess, counts: Counts) -> dict[str, Any]:
    """The split of one corpus, measured once per process: the split scenario and scaling share it."""
    split: dict[str, Any] = settings.once(
        f"split of {row.name}", lambda: measure_corpus(row, worker, counts, settings.work_dir)
    )
    return split


def rows(section: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for row in section.get("corpora", []):
        server, worker = row["server"], row["worker"]
        out.append(
            {
                "scenario": "split",
                "texts": f"256 x {row['label']}",
                "variant": "one serve process, 3 clients",
                "rate": f"ceiling {human(server['ceiling_batches_per_s'])} b/s",
                "ratio": f"GIL {100 * server['gil_side_ms'] / server['process_ms']:.0f}% of its CPU",
                "cpu": f"GIL side {server['gil_side_ms']:.3g} (loop {server['event_loop_ms']:.3g}, tokenizer thread "
                f"{server['tokenizer_thread_ms']:.3g}) + Rust pool {server['rust_pool_ms']:.3g}/batch; "
                f"1 worker {worker['cpu_ms']:.3g}",
                "note": busy_note(server["other_cpu_cores"]),
            }
        )
    return out


BY_NAME = {c.name: c for c in CORPORA}
SCENARIO = Scenario(
    "split",
    "one server's CPU per batch by thread: the GIL side vs the Rust pool, beside one parallelism-off worker",
    measure,
    rows,
    process=SPLIT_AND_SCALING,
    timeout=(600.0, 120.0),
)
