"""The processes under test -- the tokenizer-service servers and the in-process baseline worker -- started, read
from /proc and stopped by PID, and the client that talks to them: the SDK's own transports, never a second HTTP client.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks.harness import ChildProcess, CpuProbe, memory_kib
from service.transport.base import Request
from service.transport.stdlib import HTTPTransport
from service.transport.streams import AsyncHTTPTransport
from testkit.servers import ServerProcess

JSON_MEDIA_TYPE = "application/json"
SAFETENSORS_MEDIA_TYPE = "application/vnd.safetensors"
LOAD_GENERATOR = "the SDK's asyncio-streams transport (service.transport.streams): one keep-alive connection per client"


def tokenizer_dir(name: str) -> Path:
    """The HuggingFace tokenizer directory of ``default`` (the embedded one) or of a ``testkit.assets`` tokenizer."""
    if name == "default":
        from service.engine.loading import DEFAULT_TOKENIZER_DIR

        return DEFAULT_TOKENIZER_DIR
    from testkit import assets

    dirs = assets.tokenizer_dirs()
    if name not in dirs:
        raise SystemExit(f"unknown tokenizer {name!r}: one of default, {', '.join(dirs)}")
    return dirs[name]


def encode_request(url: str, body: bytes, accept: str) -> Request:
    """A POST /encode of ``body`` (JSON), asking for ``accept``."""
    return Request("POST", f"{url}/encode", {"Content-Type": JSON_MEDIA_TYPE, "Accept": accept}, body)


class InProcessWorker(ChildProcess):
    """The in-process baselines (:class:`benchmarks.scenarios.measuring.Baselines`) in a process of their own: Rust
    parallelism on, as many Rust threads as the server, never forked."""

    def __init__(self, tokenizer: str, texts_file: Path, log_dir: Path, threads: int) -> None:
        env = {"TOKENIZERS_PARALLELISM": "true", "RAYON_NUM_THREADS": str(threads), "RAYON_RS_NUM_CPUS": str(threads)}
        super().__init__("benchmarks.scenarios.measuring:baselines_main", log_dir / f"inprocess-{tokenizer}.log", env)
        self.setup = {"op": "setup", "tokenizer": str(tokenizer_dir(tokenizer)), "texts_file": str(texts_file)}

    def start(self) -> InProcessWorker:
        """Start the worker and load the tokenizer and the texts."""
        super().start()
        self.ask(self.setup)
        return self

    def measure(
        self, method: str, set_name: str, batch: int, options: dict[str, Any], seconds: float, max_batches: int
    ) -> dict[str, Any]:
        """Time one method on one text set in the worker; CPU read from /proc around it, like the server's."""
        probe = CpuProbe(self.pid)
        before = probe.snapshot()
        command = {"op": "measure", "method": method, "set_name": set_name, "batch": batch, "options": options}
        answer = self.ask({**command, "seconds": seconds, "max_batches": max_batches}, timeout=seconds + 300)
        answer["cpu"] = CpuProbe.delta(before, probe.snapshot())
        answer["cpu"]["watched_cpu_seconds"] = answer.pop("cpu_seconds")  # the worker's own process_time
        answer["cpu"]["client_cpu_seconds"] = 0.0
        return answer


class BenchServer:
    """One ``tokenizer-service serve`` process, its memory readings, and one keep-alive connection to it."""

    def __init__(
        self,
        tokenizer: str,
        batching: bool,
        log_dir: Path,
        *,
        extra_args: tuple[str, ...] = (),
        variant: str = "",
        python: str | None = None,
    ) -> None:
        args = [] if tokenizer == "default" else ["--model", str(tokenizer_dir(tokenizer))]
        args += ([] if batching else ["--no-batching"]) + list(extra_args)
        self.setup = f"batching {'on' if batching else 'off'}" + (f", {variant}" if variant else "")
        self.name = f"{tokenizer}, {self.setup}"
        self.args = args
        slug = self.name.replace(", ", "-").replace(" ", "-")
        self.process = ServerProcess(*args, log_path=log_dir / f"server-{slug}.log", python=python)
        self.transport = HTTPTransport()
        self.memory: list[dict[str, Any]] = []
        self.torch_loaded: bool | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return self.process.url

    def start(self) -> BenchServer:
        """Start the server, wait for /readyz, and take the first memory reading."""
        self.process.start(timeout=180)
        self.sample_memory("start")
        self.torch_loaded = "libtorch" in Path(f"/proc/{self.pid}/maps").read_text()
        return self

    def encode(self, body: bytes, accept: str = JSON_MEDIA_TYPE) -> bytes:
        """POST one /encode body over the keep-alive connection; the answer's payload, or an error if not 200."""
        response = self.transport.handle_request(encode_request(self.url, body, accept))
        if response.status != 200:
            raise RuntimeError(f"/encode on {self.name} answered {response.status}: {bytes(response.body)[:300]!r}")
        return bytes(response.body)

    def describe(self) -> dict[str, Any]:
        """The server's entry in the results: its setup, whether torch was loaded, and its memory readings."""
        described = {"name": self.name, "args": self.args, "setup": self.setup, "torch_loaded": self.torch_loaded}
        return {**described, "memory": self.memory}

    def sample_memory(self, when: str) -> None:
        """Record the server's RSS and peak RSS (VmRSS, VmHWM) now, labelled ``when``."""
        kib = memory_kib(self.pid)
        self.memory.append({"when": when, "rss_mb": kib["VmRSS"] / 1024, "peak_mb": kib["VmHWM"] / 1024})

    def stop(self) -> None:
        """Close the connection and stop the server by PID."""
        self.transport.close()
        self.process.stop()


class Startable(Protocol):
    """A process under test: started (waiting for its own readiness) and stopped."""

    def start(self) -> object: ...

    def stop(self) -> None: ...


def start_all(items: list[Startable]) -> None:
    """Start servers and workers side by side (each waits for its own readiness)."""
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        for future in [pool.submit(item.start) for item in items]:
            future.result()


@dataclass
class Load:
    """What a run of concurrent clients got inside its window: latencies (s) and statuses of the answers, CPU."""

    concurrency: int
    seconds: float
    latencies: list[float]
    statuses: dict[int, int]
    cpu: dict[str, float]


def run_load(
    server: BenchServer, bodies: list[bytes], *, concurrency: int, warmup: float, seconds: float, max_requests: int
) -> Load:
    """``concurrency`` keep-alive clients (asyncio tasks on uvloop where installed), each sending the next body
    (binary answers) as soon as its last answer is read; only the answers inside the window count (after
    ``warmup``, for at most ``seconds`` or ``max_requests`` answers); CPU is read at the window's edges."""
    requests = [encode_request(server.url, body, SAFETENSORS_MEDIA_TYPE) for body in bodies]
    probe = CpuProbe(server.pid)

    async def load() -> Load:
        transport = AsyncHTTPTransport(max_idle_connections=concurrency)
        latencies: list[float] = []
        statuses: dict[int, int] = {}
        recording, stop, full, sent = False, False, asyncio.Event(), 0

        async def client() -> None:
            nonlocal sent
            while not stop:
                request, sent = requests[sent % len(requests)], sent + 1
                started = time.perf_counter()
                status = (await transport.handle_async_request(request)).status
                if recording:
                    statuses[status] = statuses.get(status, 0) + 1
                    latencies.append(time.perf_counter() - started)
                    if len(latencies) >= max_requests:
                        full.set()

        tasks = [asyncio.ensure_future(client()) for _ in range(concurrency)]
        try:
            await asyncio.sleep(warmup)
            before, recording = probe.snapshot(), True
            try:
                await asyncio.wait_for(full.wait(), seconds)
            except asyncio.TimeoutError:
                pass
            recording, after, stop = False, probe.snapshot(), True
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await transport.aclose()
        cpu = CpuProbe.delta(before, after)
        return Load(concurrency, cpu["wall_seconds"], latencies, statuses, cpu)

    try:
        import uvloop
    except ImportError:  # plain asyncio works too, with more client CPU per request
        return asyncio.run(load())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(load())
