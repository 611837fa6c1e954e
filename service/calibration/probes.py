"""The calibration's probes: each a short process of its own, started by exec (``python -m
service.calibration.probes KIND ...``), that measures one thing and prints one JSON line. A probe sets its thread
count and pins itself to its CPUs before the tokenizer stack is imported, so the Rust pool it measures is the one
a server of that many threads would have.

- ``identify``: the tokenizer's fingerprint and the package versions (what a kept calibration is keyed on);
- ``rust``: the Rust pool at ``--threads`` threads on as many CPUs: each round encodes batches through the engine's
  own seam (``TokenizerThread.encode_here``) for ``--round-seconds``; the calling thread's CPU is the call's
  Python side, the rest of the wall time the pool's;
- ``worker``: the workaround's worker on one CPU, parallelism off: ``tokenizer(batch, ...)`` in-process;
- ``load``: a real server (started beside it by the calibration) loaded with batches by client threads over its
  Unix socket; the server's CPU per batch, read from ``/proc``, and its peak resident memory.

Every probe reports, per round, the batches, wall and CPU seconds, and how busy its CPUs were with other work.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .texts import TextsError, built_in_texts, read_texts

#: The options every probe tokenizes with: what a DataLoader collator asks for.
OPTIONS: dict[str, Any] = {"padding": "longest", "truncation": True}
#: Texts per batch.
BATCH = 256
#: Client threads loading the server probe: enough to keep its tokenizer thread and its event loop busy at once.
LOAD_CLIENTS = 3


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m service.calibration.probes")
    parser.add_argument("kind", choices=("identify", "rust", "worker", "load"))
    parser.add_argument("--model")
    parser.add_argument("--revision")
    parser.add_argument("--texts", help="a file of texts (identify reads the user's; the others, what it wrote)")
    parser.add_argument("--write-texts", help="identify: where to write the texts the other probes read")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cpus", default="", help="comma-separated CPU ids to pin this process to")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.25)
    parser.add_argument("--socket", help="load: the server's Unix socket")
    parser.add_argument("--server-pid", type=int, help="load: the server's pid")
    args = parser.parse_args(argv)
    cpus = [int(cpu) for cpu in args.cpus.split(",") if cpu]
    if cpus:
        os.sched_setaffinity(0, cpus)  # before any thread starts: the pool's threads inherit it
    if args.kind == "load":
        report = _load(args)
    else:
        # before the tokenizer stack is imported: tokenizers reads these once, when its pool is first used
        os.environ["TOKENIZERS_PARALLELISM"] = "false" if args.kind == "worker" else "true"
        os.environ["RAYON_NUM_THREADS"] = os.environ["RAYON_RS_NUM_CPUS"] = str(args.threads)
        report = {"identify": _identify, "rust": _rust, "worker": _worker}[args.kind](args)
    print(json.dumps(report), flush=True)
    return 0


class ProbeError(Exception):
    """What the probe's caller must be told, as it is (a tokenizer that does not load...)."""


def _loaded(args: argparse.Namespace) -> Any:
    from ..engine.loading import TokenizerLoadError, keep_torch_out, load_tokenizer

    keep_torch_out()  # as the server does: the same process, without torch's import
    try:
        return load_tokenizer(args.model, args.revision)
    except TokenizerLoadError as exc:
        raise ProbeError(str(exc)) from None


def _identity(loaded: Any) -> dict[str, Any]:
    import tokenizers
    import transformers

    from .. import __version__

    return {
        "fingerprint": loaded.fingerprint,
        "versions": {
            "python": ".".join(map(str, sys.version_info[:3])),
            "tokenizer-service": __version__,
            "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__,
        },
    }


def _identify(args: argparse.Namespace) -> dict[str, Any]:
    """The identity; with ``--write-texts``, also the texts every later probe reads (the user's, or the built-in
    mix made from this tokenizer's vocabulary), as JSON Lines."""
    loaded = _loaded(args)
    if args.write_texts:
        texts = read_texts(args.texts) if args.texts else built_in_texts(loaded.tokenizer.get_vocab())
        with open(args.write_texts, "w", encoding="utf-8") as out:
            out.writelines(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in texts)
    return _identity(loaded)


def _batches(texts: list[str]) -> list[list[str]]:
    count = max(1, len(texts) // BATCH)
    return [[texts[(i * BATCH + j) % len(texts)] for j in range(BATCH)] for i in range(count)]


def _rust(args: argparse.Namespace) -> dict[str, Any]:
    from ..engine.encoding import TokenizerFacts, plan_encode
    from ..engine.tokenizer_thread import TokenizerThread
    from ..wire import EncodeOptions

    loaded = _loaded(args)
    call = plan_encode(TokenizerFacts.of(loaded.tokenizer), EncodeOptions(**OPTIONS)).rust_call
    thread = TokenizerThread(loaded.tokenizer)
    batches = _batches(read_texts(args.texts))
    return {"rounds": _rounds(lambda batch: thread.encode_here(batch, call), batches, args)}


def _worker(args: argparse.Namespace) -> dict[str, Any]:
    loaded = _loaded(args)
    tokenizer = loaded.tokenizer
    batches = _batches(read_texts(args.texts))
    rounds = _rounds(lambda batch: tokenizer(batch, **OPTIONS, return_tensors="np"), batches, args)
    return {"rounds": rounds}


def _rounds(
    step: Callable[[list[str]], Any], batches: list[list[str]], args: argparse.Namespace
) -> list[dict[str, float]]:
    """``args.rounds`` rounds of ``step`` over ``batches`` in turn, each at least ``args.round_seconds`` long."""
    step(batches[0])  # warm-up: the pool's threads start, the caches fill
    cpus = sorted(os.sched_getaffinity(0))
    rounds = []
    index = 0
    for _ in range(args.rounds):
        busy_before, started = _busy_seconds(cpus), time.perf_counter()
        cpu_before, main_before = time.process_time(), time.thread_time()
        count = 0
        while count == 0 or time.perf_counter() - started < args.round_seconds:
            step(batches[index % len(batches)])
            index += 1
            count += 1
        wall = time.perf_counter() - started
        own = time.process_time() - cpu_before
        rounds.append(
            {
                "batches": count,
                "wall": wall,
                "cpu": own,
                "main_cpu": time.thread_time() - main_before,
                "others": max(0.0, _busy_seconds(cpus) - busy_before - own) / (wall * len(cpus)),
            }
        )
    return rounds


def _load(args: argparse.Namespace) -> dict[str, Any]:
    """Batches from :data:`LOAD_CLIENTS` threads to the server on ``args.socket``, asked as the SDK asks for tensors
    (``POST /encode``, safetensors); per round (from one answer to another, at least ``args.round_seconds`` apart),
    the batches answered, the server's CPU seconds (``/proc/PID/stat``) and its Python threads' (its /metrics)."""
    from ..addresses import unix_socket_url
    from ..wire import ENCODE_PATH, INFO_PATH, METRICS_PATH, READY_PATH, SAFETENSORS_MEDIA_TYPE

    base = unix_socket_url(args.socket)
    _when_ready(base + READY_PATH, args.server_pid)
    info = json.loads(_get(base + INFO_PATH))
    headers = {"Content-Type": "application/json", "Accept": SAFETENSORS_MEDIA_TYPE}
    bodies = [json.dumps({"texts": batch, **OPTIONS}).encode() for batch in _batches(read_texts(args.texts))]
    answers = _Answers()
    stop = threading.Event()

    def call(offset: int) -> None:
        from ..transport.base import Request, Timeout
        from ..transport.exceptions import TransportError
        from ..transport.stdlib import HTTPTransport

        transport = HTTPTransport()
        index = offset
        try:
            while not stop.is_set():
                request = Request("POST", base + ENCODE_PATH, headers, bodies[index % len(bodies)], Timeout(5.0, 300.0))
                answer = transport.handle_request(request)
                if answer.status != 200:
                    answers.fail(f"the server answered {answer.status}: {bytes(answer.body)[:300]!r}")
                    return
                index += LOAD_CLIENTS
                answers.one_more()
        except TransportError as exc:
            answers.fail(f"{type(exc).__name__}: {exc}")
        finally:
            transport.close()

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(LOAD_CLIENTS)]
    for thread in threads:
        thread.start()
    answers.next(0.0)  # warm-up: every client in flight
    count, moment = answers.next(0.0)
    cpu, python_cpu = _process_cpu(args.server_pid), _python_cpu(base + METRICS_PATH)
    rounds = []
    for _ in range(args.rounds):
        later, moment_later = answers.next(args.round_seconds)
        cpu_later, python_later = _process_cpu(args.server_pid), _python_cpu(base + METRICS_PATH)
        rounds.append(
            {
                "batches": later - count,
                "wall": moment_later - moment,
                "cpu": cpu_later - cpu,
                "python_cpu": python_later - python_cpu,
            }
        )
        count, moment, cpu, python_cpu = later, moment_later, cpu_later, python_later
    stop.set()
    for thread in threads:
        thread.join(timeout=300)
    return {"fingerprint": info["fingerprint"], "rounds": rounds, "rss_bytes": _peak_rss(args.server_pid)}


def _get(url: str) -> bytes:
    """GET ``url``'s body; RuntimeError unless it answers 200."""
    from ..transport.base import Request, Timeout
    from ..transport.stdlib import HTTPTransport

    transport = HTTPTransport()
    try:
        answer = transport.handle_request(Request("GET", url, {}, timeout=Timeout(1.0, 30.0)))
    finally:
        transport.close()
    if answer.status != 200:
        raise RuntimeError(f"GET {url}: {answer.status}")
    return bytes(answer.body)


def _python_cpu(metrics_url: str) -> float:
    """The server's Python threads' CPU seconds, as its /metrics says."""
    from ..http.metrics import PYTHON_CPU_METRIC

    for line in _get(metrics_url).decode().splitlines():
        if line.startswith(PYTHON_CPU_METRIC + " "):
            return float(line.split()[1])
    raise RuntimeError(f"the server's /metrics has no {PYTHON_CPU_METRIC}: is it an older tokenizer-service?")


class _Answers:
    """The answers counted as they come, and a wait for the next one."""

    def __init__(self) -> None:
        self.count = 0
        self.failure: str | None = None
        self._arrived = threading.Condition()

    def one_more(self) -> None:
        with self._arrived:
            self.count += 1
            self._arrived.notify_all()

    def fail(self, why: str) -> None:
        with self._arrived:
            self.failure = why
            self._arrived.notify_all()

    def next(self, at_least: float) -> tuple[int, float]:
        """(answers, the time) at the first answer that comes ``at_least`` seconds from now or later."""
        time.sleep(at_least)
        with self._arrived:
            seen = self.count
            if not self._arrived.wait_for(lambda: self.count > seen or self.failure, timeout=300):
                raise RuntimeError("no answer from the server in 300 s")
            if self.failure:
                raise RuntimeError(self.failure)
            return self.count, time.perf_counter()


def _when_ready(ready_url: str, pid: int, timeout: float = 300.0) -> None:
    """Once the server answers ``ready_url``; RuntimeError if it exits first or takes over ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            _get(ready_url)
            return
        except Exception:  # not listening yet, or loading (503)
            if not os.path.exists(f"/proc/{pid}") or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _busy_seconds(cpus: Sequence[int]) -> float:
    """CPU seconds ``cpus`` spent on anything (``/proc/stat``: user, nice, system, irq, softirq, steal)."""
    wanted = {f"cpu{cpu}" for cpu in cpus}
    total = 0
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                fields = line.split()
                if fields and fields[0] in wanted:
                    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
                    total += user + nice + system + irq + softirq + steal
    except (OSError, ValueError):
        return 0.0
    return total / os.sysconf("SC_CLK_TCK")


def _process_cpu(pid: int) -> float:
    """A process's CPU seconds, every thread (``/proc/PID/stat``: utime + stime)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss(pid: int | str = "self") -> int:
    """A process's peak resident memory in bytes (``VmHWM``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (TextsError, ProbeError) as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        sys.exit(2)
