"""Where a loaded server's event loop spends its time, for small concurrent requests (scenario 2's load).

    .venv/bin/python -m benchmarks.profile_server                 # ~1 min: both app variants, 64 clients
    .venv/bin/python -m benchmarks.profile_server --seconds 10 --concurrency 16

Run from the repository root. It starts the default tokenizer's server twice in a child process, through
``tokenizer-service serve`` itself (same settings, same launcher and HTTP protocol): once as shipped, where
``POST /encode`` (as every work route) is answered by the routes' one path ahead of FastAPI's router
(``DirectWorkRoutes``), and once with that shortcut removed, so ``/encode`` goes through FastAPI's routing and
dependency machinery as any FastAPI route would. Each is loaded by ``benchmarks.loadgen`` (raw keep-alive
HTTP/1.1, one ~300-character text per request, binary answers) after a warm-up, and for the measured window:

- the event-loop thread is profiled with cProfile (it profiles only the thread that enables it: the main
  thread, where uvicorn runs the loop; the tokenizer thread and the Rust pool are not in it). Its time is
  grouped by package -- FastAPI/Starlette, uvicorn and httptools, our ``service`` code, pydantic, orjson /
  safetensors / numpy, the event loop itself -- with the time of C functions given to the Python function
  that called them; the loop's own time (waiting for sockets included) is shown apart, and the shares are
  of the rest: the time the loop spent running Python;
- every thread's CPU time is read from /proc: the event-loop thread (the main thread) against the whole
  process, and the event-loop thread's CPU seconds per wall second (1.0 = one core saturated).

cProfile adds a cost per Python call, so code made of many small calls (FastAPI's) weighs more under it
than without: the shares are an upper bound for such code, and the request rates under profiling are lower
than the benchmark's. The thread CPU figures are taken without the profiler, in a separate window.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks import corpus, loadgen
from benchmarks.loadgen import CpuProbe
from benchmarks.machine import BUSY_CORES, wait_for_quiet
from testkit.servers import REPO, free_port

GROUPS = (  # (group, fragments of a file path), first match wins
    ("FastAPI/Starlette routing and middleware", ("/fastapi/", "/starlette/")),
    ("uvicorn + httptools (HTTP/1.1, ASGI)", ("/uvicorn/", "httptools")),
    ("pydantic (request validation)", ("/pydantic",)),
    ("service (our code)", (str(REPO / "service"),)),
    ("orjson / safetensors / numpy (bodies)", ("/orjson", "/safetensors/", "/numpy/")),
    ("asyncio (tasks, futures, streams)", ("/asyncio/", "/concurrent/")),
)
LOOP = "the event loop itself (uvloop; waiting for sockets included)"
OTHER = "other"


def group_of(filename: str, function: str) -> str:
    if "uvloop" in filename or function.startswith(("<method 'run_forever'", "<built-in method run_forever")):
        return LOOP
    for group, fragments in GROUPS:
        if any(fragment in filename for fragment in fragments):
            return group
    return OTHER


def shares(stats_file: Path) -> dict[str, float]:
    """Seconds of the profiled thread by group; a C function's time goes to its Python callers' groups."""
    stats = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    seconds: dict[str, float] = defaultdict(float)
    for (filename, _, function), (_, _, tottime, _, callers) in stats.items():
        if filename != "~":
            seconds[group_of(filename, function)] += tottime
            continue
        if "run_forever" in function or "uvloop" in function:
            seconds[LOOP] += tottime
            continue
        called = sum(c[2] for c in callers.values()) or 1.0
        for (caller_file, _, caller_function), caller_stats in callers.items():
            owner = group_of(caller_file, caller_function) if caller_file != "~" else OTHER
            seconds[owner] += tottime * caller_stats[2] / called
    return dict(seconds)


# -- the child: the server, as `tokenizer-service serve` builds it, with a profiler on its loop -------------


def serve_profiled(port: int, stats_file: Path, through_fastapi: bool) -> None:
    """``tokenizer-service serve`` itself (the CLI builds settings, tokenizer, app and launcher), with the app
    factory wrapped: SIGUSR1 starts profiling the event-loop thread, SIGUSR2 stops and dumps the stats."""
    from service.http import app as app_module
    from service.http.cli import main as serve
    from service.http.routes import DirectWorkRoutes

    profiler = cProfile.Profile()
    create_app = app_module.create_app

    def profiled_app(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)
        if through_fastapi:
            app.user_middleware = [m for m in app.user_middleware if m.cls is not DirectWorkRoutes]
        signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
        signal.signal(signal.SIGUSR2, lambda *_: (profiler.disable(), profiler.dump_stats(str(stats_file))))
        return app

    app_module.create_app = profiled_app  # type: ignore[assignment]
    sys.exit(serve(["--port", str(port), "--log-level", "warning"]))


# -- the parent: load, windows, report ----------------------------------------------------------------------


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """utime+stime of every thread of ``pid``, by thread id."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / loadgen.CLOCK_TICKS
    return out


def profile_variant(through_fastapi: bool, seconds: float, concurrency: int, texts: list[str]) -> dict[str, Any]:
    wait_for_quiet(60)  # bounded: the figures say how busy the machine was
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="profile-server-") as scratch:
        stats_file = Path(scratch) / "loop.prof"
        command = [sys.executable, "-m", "benchmarks.profile_server", "--child", str(port), str(stats_file)]
        if through_fastapi:
            command.append("--through-fastapi")
        proc = subprocess.Popen(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            _wait_ready(proc, port)
            bodies = [
                json.dumps({"texts": [t], "padding": "longest", "truncation": True, "max_length": 128}).encode()
                for t in texts
            ]
            requests = [
                loadgen.request_bytes("127.0.0.1", port, "/encode", b, loadgen.SAFETENSORS_MEDIA_TYPE) for b in bodies
            ]

            def load() -> loadgen.LoadResult:
                return loadgen.run_load(
                    "127.0.0.1",
                    port,
                    requests,
                    concurrency=concurrency,
                    warmup=1.0,
                    duration=seconds,
                    max_requests=10**7,
                    probe=CpuProbe(proc.pid),
                )

            before = thread_cpu_seconds(proc.pid)
            plain = load()  # without the profiler: thread CPU and the request rate
            after = thread_cpu_seconds(proc.pid)
            os.kill(proc.pid, signal.SIGUSR1)
            profiled = load()
            os.kill(proc.pid, signal.SIGUSR2)
            deadline = time.monotonic() + 30
            while not stats_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # the dump is written by the server's main thread; let it finish
            groups = shares(stats_file)
        finally:
            proc.terminate()  # by PID; the launcher drains and exits
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    loop_cpu = after.get(proc.pid, 0.0) - before.get(proc.pid, 0.0)
    all_cpu = sum(after.values()) - sum(v for tid, v in before.items() if tid in after)
    running = {g: s for g, s in groups.items() if g != LOOP}
    busy = sum(running.values()) or 1.0
    return {
        "app": "through FastAPI's router" if through_fastapi else "as shipped (DirectWorkRoutes)",
        "other_cpu_cores": max(plain.cpu["other_cpu_cores"], profiled.cpu["other_cpu_cores"]),
        "rate_unprofiled": plain.statuses.get(200, 0) / plain.seconds,
        "rate_profiled": profiled.statuses.get(200, 0) / profiled.seconds,
        "loop_thread_cores": loop_cpu / plain.seconds,
        "loop_thread_share_of_process_cpu": loop_cpu / all_cpu if all_cpu else 0.0,
        "loop_seconds_profiled": sum(groups.values()),
        "loop_own_seconds": groups.get(LOOP, 0.0),
        "shares_of_running_python": {g: s / busy for g, s in sorted(running.items(), key=lambda kv: -kv[1])},
    }


def _wait_ready(proc: subprocess.Popen[bytes], port: int, timeout: float = 120) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the profiled server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError("the profiled server was not ready in time")


def report(results: list[dict[str, Any]]) -> str:
    lines = []
    for r in results:
        busy = (
            f" -- BUSY MACHINE: other processes used {r['other_cpu_cores']:.2f} cores"
            if (r["other_cpu_cores"] > BUSY_CORES)
            else ""
        )
        lines.append(f"\n{r['app']}:{busy}")
        lines.append(
            f"  {r['rate_unprofiled']:.0f} requests/s unprofiled ({r['rate_profiled']:.0f} under cProfile); "
            f"event-loop thread {r['loop_thread_cores']:.2f} cores busy, "
            f"{100 * r['loop_thread_share_of_process_cpu']:.0f}% of the process's CPU (the rest: tokenizer "
            "thread and Rust pool)"
        )
        lines.append(
            f"  event-loop thread under cProfile: {r['loop_seconds_profiled']:.1f} s, of which "
            f"{r['loop_own_seconds']:.1f} s in the loop itself; of the time running Python:"
        )
        for group, share in r["shares_of_running_python"].items():
            lines.append(f"    {100 * share:5.1f}%  {group}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_server",
        description=(__doc__ or "").split("\n\n")[0],
        epilog=(__doc__ or "").split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="each measured window (default 8)")
    parser.add_argument("--concurrency", type=int, default=64, help="keep-alive clients (default 64)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    parser.add_argument("--child", nargs=2, metavar=("PORT", "STATS"), help=argparse.SUPPRESS)
    parser.add_argument("--through-fastapi", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        serve_profiled(int(args.child[0]), Path(args.child[1]), args.through_fastapi)
        return 0
    texts = corpus.mixed_texts("medium", 1024, seed=2)
    results = [profile_variant(variant, args.seconds, args.concurrency, texts) for variant in (False, True)]
    print(f"{args.concurrency} clients, one ~300-character text per request, binary answers, {args.seconds:g} s")
    print(report(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
