"""The processes under test: the tokenizer-service servers and the in-process baseline worker.

Each is started here, waited for, read from /proc (the server's RSS and peak RSS, whether torch is mapped
into it) and stopped by PID when the run ends, even on error or Ctrl-C. The baseline worker
(``python -m benchmarks.inprocess``) runs in its own process, never beside the load generator's event loop.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from benchmarks import loadgen
from benchmarks.loadgen import JSON_MEDIA_TYPE, CpuProbe, HttpConnection
from testkit.servers import REPO, ServerProcess


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


class InProcessWorker:
    """The baseline worker (``benchmarks.inprocess``) in its own process, driven over stdin/stdout."""

    def __init__(self, tokenizer: str, texts_file: Path, log_dir: Path, threads: int) -> None:
        self.tokenizer = tokenizer
        self.texts_file = texts_file
        self.log_path = log_dir / f"inprocess-{tokenizer}.log"
        self.threads = threads
        self.proc: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> InProcessWorker:
        """Start the worker (Rust parallelism on, as many threads as the server) and load the tokenizer and texts."""
        env = {
            **os.environ,
            "TOKENIZERS_PARALLELISM": "true",
            "RAYON_NUM_THREADS": str(self.threads),
            "RAYON_RS_NUM_CPUS": str(self.threads),
        }
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.inprocess"],
                cwd=REPO,
                env=env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
            )
        self._ask(
            {"op": "setup", "tokenizer": str(tokenizer_dir(self.tokenizer)), "texts_file": str(self.texts_file)},
            timeout=300,
        )
        return self

    def _ask(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"in-process worker gave no answer to {command.get('op')} in {timeout}s")
        line = self.proc.stdout.readline()
        if not line:
            tail = self.log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"in-process worker exited ({self.proc.poll()}): {tail}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok"):
            raise RuntimeError(f"in-process worker: {answer['error']}")
        return answer

    def measure(
        self, method: str, set_name: str, batch: int, options: dict[str, Any], seconds: float, max_batches: int
    ) -> dict[str, Any]:
        """Time one method on one text set in the worker; CPU read from /proc around it, like the server's."""
        probe = CpuProbe(self.pid)
        before = probe.snapshot()
        answer = self._ask(
            {
                "op": "measure",
                "method": method,
                "set_name": set_name,
                "batch": batch,
                "options": options,
                "seconds": seconds,
                "max_batches": max_batches,
            },
            timeout=seconds + 300,
        )
        answer["cpu"] = CpuProbe.delta(before, probe.snapshot())
        answer["cpu"]["watched_cpu_seconds"] = answer.pop("cpu_seconds")  # the worker's own process_time
        answer["cpu"]["client_cpu_seconds"] = 0.0
        return answer

    def stop(self) -> None:
        """Ask the worker to quit; kill it by PID if it does not."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired, ValueError):
            self.proc.kill()  # by PID
            self.proc.wait(10)


class BenchServer:
    """One ``tokenizer-service serve`` process and one keep-alive connection to it."""

    def __init__(
        self,
        tokenizer: str,
        batching: bool,
        log_dir: Path,
        *,
        env: dict[str, str] | None = None,
        variant: str = "",
        extra_args: list[str] | None = None,
        python: str | None = None,
        repo: Path | None = None,
    ) -> None:
        args = [] if tokenizer == "default" else ["--model", str(tokenizer_dir(tokenizer))]
        if not batching:
            args.append("--no-batching")
        args += extra_args or []
        self.tokenizer = tokenizer
        self.setup = f"batching {'on' if batching else 'off'}" + (f", {variant}" if variant else "")
        self.name = f"{tokenizer}, {self.setup}"
        self.args = args
        slug = self.name.replace(", ", "-").replace(" ", "-")
        self.process = ServerProcess(*args, env=env, log_path=log_dir / f"server-{slug}.log", python=python, repo=repo)
        self.python = self.process.python
        self.conn: HttpConnection | None = None
        self.memory: list[dict[str, Any]] = []
        self.torch_loaded: bool | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return self.process.port

    def start(self) -> BenchServer:
        """Start the server, wait for /readyz, connect, and take the first memory reading."""
        self.process.start(timeout=180)
        self.conn = HttpConnection("127.0.0.1", self.port)
        self.sample_memory("start")
        self.torch_loaded = loadgen.maps_library(self.pid, "libtorch")
        return self

    def encode(self, body: bytes, accept: str = JSON_MEDIA_TYPE) -> bytes:
        """POST one /encode body over the keep-alive connection; the answer's payload, or an error if not 200."""
        assert self.conn is not None
        status, payload = self.conn.post("/encode", body, accept)
        if status != 200:
            raise RuntimeError(f"/encode on {self.name} answered {status}: {payload[:300]!r}")
        return payload

    def describe(self) -> dict[str, Any]:
        """The server's entry in the results: its setup, whether torch was loaded, and its memory readings."""
        return {
            "name": self.name,
            "args": self.args,
            "python": self.python,
            "setup": self.setup,
            "torch_loaded": self.torch_loaded,
            "memory": self.memory,
        }

    def sample_memory(self, when: str) -> None:
        """Record the server's RSS and peak RSS (VmRSS, VmHWM) now, labelled ``when``."""
        kib = loadgen.memory_kib(self.pid)
        self.memory.append({"when": when, "rss_mb": kib["VmRSS"] / 1024, "peak_mb": kib["VmHWM"] / 1024})

    def stop(self) -> None:
        """Close the connection and stop the server by PID."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
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
