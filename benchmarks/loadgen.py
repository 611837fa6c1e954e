"""The client side of the benchmark: a minimal HTTP/1.1 keep-alive client, sync and asyncio, and CPU probes.

Why not httpx: measured at ~4.6 ms CPU per small request at 32-way concurrency, it would be the bottleneck
it is meant to measure. Here a request is hand-built bytes written to a raw socket (or asyncio stream),
and a response is a status line, headers scanned for Content-Length, and exactly that many body bytes.
The asyncio side runs on uvloop when it is installed. Every run is bounded in time and in requests.
"""

from __future__ import annotations

import asyncio
import math
import os
import socket
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
JSON_MEDIA_TYPE = "application/json"
SAFETENSORS_MEDIA_TYPE = "application/vnd.safetensors"

try:
    import uvloop
except ImportError:  # pragma: no cover - plain asyncio still works, with more client CPU per request
    uvloop = None

LOAD_GENERATOR = "raw asyncio HTTP/1.1 keep-alive client (benchmarks/loadgen.py" + (", uvloop)" if uvloop else ")")


def request_bytes(host: str, port: int, path: str, body: bytes, accept: str = JSON_MEDIA_TYPE) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: {accept}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode("ascii") + body


class ResponseError(RuntimeError):
    pass


def _content_length(head: bytes) -> int:
    lowered = head.lower()
    at = lowered.find(b"\r\ncontent-length:")
    if at < 0:
        raise ResponseError(f"response without Content-Length: {head[:200]!r}")
    end = lowered.find(b"\r\n", at + 2)
    return int(lowered[at + 17 : end])


class HttpConnection:
    """One blocking keep-alive connection, for the one-client scenarios. A connection the server closed while
    it sat idle (uvicorn drops idle ones after 5 s: a slow set-up on a busy machine) is reopened once."""

    def __init__(self, host: str, port: int, timeout: float = 120.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.head = f"Host: {host}:{port}\r\nContent-Type: application/json\r\n"
        self._connect()

    def _connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb", buffering=1 << 16)

    def post(self, path: str, body: bytes, accept: str = JSON_MEDIA_TYPE) -> tuple[int, bytes]:
        head = f"POST {path} HTTP/1.1\r\n{self.head}Accept: {accept}\r\nContent-Length: {len(body)}\r\n\r\n"
        try:
            self.sock.sendmsg([head.encode("ascii"), body])
            status_line = self.reader.readline()
        except ConnectionError:
            status_line = b""
        if not status_line:  # closed while idle, before this request was read: one fresh connection
            self.close()
            self._connect()
            self.sock.sendmsg([head.encode("ascii"), body])
            status_line = self.reader.readline()
        if not status_line:
            raise ResponseError("the server closed the connection")
        status = int(status_line.split(None, 2)[1])
        lines = [status_line]
        while True:
            line = self.reader.readline()
            if line in (b"\r\n", b""):
                break
            lines.append(line)
        payload = self.reader.read(_content_length(b"".join(lines) + b"\r\n"))
        return status, payload

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


# -- CPU and memory probes ------------------------------------------------------------------------------
def process_ticks(pid: int | str) -> int:
    """utime + stime of a process (all its threads), in clock ticks, from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def busy_ticks(cores: Collection[int] | None = None) -> int:
    """Busy CPU ticks from /proc/stat -- everything but idle and iowait -- of the whole machine (all cores), or of
    ``cores`` only."""
    lines = Path("/proc/stat").read_text().splitlines()
    if cores is None:
        return _busy(lines[0])
    wanted = {f"cpu{core}" for core in cores}
    return sum(_busy(line) for line in lines[1:] if line.split(None, 1)[0] in wanted)


def _busy(line: str) -> int:
    values = [int(v) for v in line.split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            name, value = line.split(":", 1)
            out[name] = int(value.split()[0])
    return out


def maps_library(pid: int, fragment: str) -> bool:
    """Whether a shared library whose path contains ``fragment`` is mapped into the process."""
    return any(fragment in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


@dataclass
class CpuSnapshot:
    wall: float
    client_cpu: float
    self_ticks: int
    pid_ticks: dict[int, int]
    machine_ticks: int
    reaped_children_ticks: float = 0.0


class CpuProbe:
    """CPU used during a window by this process (the client), by the watched processes (server or
    in-process worker), and by everything else on the machine (noise from other work). ``reaped_children``:
    the children this process started and waited for meanwhile (DataLoader workers) count as ours, not as
    other work. ``cores``: other work is counted on these cores only (every process of ours pinned to them)."""

    def __init__(self, *pids: int, reaped_children: bool = False, cores: Collection[int] | None = None) -> None:
        self.pids = pids
        self.reaped_children = reaped_children
        self.cores = cores

    def snapshot(self) -> CpuSnapshot:
        children = os.times() if self.reaped_children else None
        return CpuSnapshot(
            time.perf_counter(),
            time.process_time(),
            process_ticks("self"),
            {pid: process_ticks(pid) for pid in self.pids},
            busy_ticks(self.cores),
            (children.children_user + children.children_system) * CLOCK_TICKS if children else 0.0,
        )

    @staticmethod
    def delta(a: CpuSnapshot, b: CpuSnapshot) -> dict[str, float]:
        wall = b.wall - a.wall
        watched = {pid: (b.pid_ticks[pid] - a.pid_ticks[pid]) / CLOCK_TICKS for pid in a.pid_ticks}
        ours = sum(b.pid_ticks[p] - a.pid_ticks[p] for p in a.pid_ticks) + (b.self_ticks - a.self_ticks)
        ours += b.reaped_children_ticks - a.reaped_children_ticks
        other = max(0, (b.machine_ticks - a.machine_ticks) - ours) / CLOCK_TICKS
        return {
            "wall_seconds": wall,
            "client_cpu_seconds": b.client_cpu - a.client_cpu,
            "watched_cpu_seconds": sum(watched.values()),
            "other_cpu_cores": other / wall if wall > 0 else 0.0,
        }


# -- the asyncio load generator ---------------------------------------------------------------------------
@dataclass
class LoadResult:
    concurrency: int
    requests: int
    seconds: float
    latencies: list[float]
    statuses: dict[int, int]
    cpu: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


class _State:
    def __init__(self, max_requests: int) -> None:
        self.next = 0
        self.recording = False
        self.stop = False
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.max_requests = max_requests
        self.full = asyncio.Event()


async def _client(host: str, port: int, requests: list[bytes], state: _State) -> None:
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    try:
        while not state.stop:
            request = requests[state.next % len(requests)]
            state.next += 1
            started = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(_content_length(head))
            if state.recording:
                status = int(head[9:12])
                state.statuses[status] = state.statuses.get(status, 0) + 1
                state.latencies.append(time.perf_counter() - started)
                if len(state.latencies) >= state.max_requests:
                    state.full.set()
    finally:
        writer.close()


async def _run_load(
    host: str,
    port: int,
    requests: list[bytes],
    concurrency: int,
    warmup: float,
    duration: float,
    max_requests: int,
    probe: CpuProbe,
) -> LoadResult:
    state = _State(max_requests)
    tasks = [asyncio.ensure_future(_client(host, port, requests, state)) for _ in range(concurrency)]
    try:
        await asyncio.sleep(warmup)
        before = probe.snapshot()
        state.recording = True
        try:
            await asyncio.wait_for(state.full.wait(), duration)
        except asyncio.TimeoutError:
            pass
        state.recording = False
        after = probe.snapshot()
        state.stop = True
        done, _ = await asyncio.wait(tasks, timeout=60)
        for task in done:
            if task.exception() is not None:
                raise task.exception()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    cpu = CpuProbe.delta(before, after)
    return LoadResult(concurrency, len(state.latencies), cpu["wall_seconds"], state.latencies, state.statuses, cpu)


def run_load(
    host: str,
    port: int,
    requests: list[bytes],
    *,
    concurrency: int,
    warmup: float,
    duration: float,
    max_requests: int,
    probe: CpuProbe,
) -> LoadResult:
    """``concurrency`` keep-alive connections, each sending the next request as soon as its last answer
    is read. Only requests completed inside the window (after ``warmup``, for at most ``duration``
    seconds or ``max_requests`` answers) count; CPU is read at the window's edges."""
    coro = _run_load(host, port, requests, concurrency, warmup, duration, max_requests, probe)
    if uvloop is not None:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


def percentiles(values: list[float], points: tuple[float, ...] = (50, 90, 99)) -> dict[str, float]:
    """Nearest-rank percentiles, in milliseconds."""
    if not values:
        return {f"p{p:g}": float("nan") for p in points}
    ordered = sorted(values)
    out = {}
    for p in points:
        rank = min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))
        out[f"p{p:g}"] = ordered[rank] * 1000
    return out
