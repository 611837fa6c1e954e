"""A real ``tokenizer-service serve`` process on 127.0.0.1, started and stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from service.addresses import unix_socket_url
from service.transport import HTTPTransport, Request, Timeout
from service.transport.exceptions import TransportError

REPO = Path(__file__).resolve().parent.parent


def script_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository root first on PYTHONPATH, plus ``extra``: for scripts
    run from elsewhere (a temporary folder) that import ``testkit``."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting to be reaped does not): read from /proc, so that tests
    and the scripts they run judge a server's life without the code under test."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """``python -m service serve`` in a subprocess. ``start()`` waits for /readyz; ``stop()`` ends it by PID.

    ``python``: the interpreter to run it with (default: this one), e.g. a venv with the server extra only.
    ``repo``: the checkout whose ``service`` package it runs (default: this one), e.g. a copy of main to
    compare against.
    ``uds``: serve on this Unix socket path instead of a free port on 127.0.0.1."""

    def __init__(
        self,
        *args: str,
        port: int | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        python: str | None = None,
        repo: Path | None = None,
        uds: str | Path | None = None,
    ) -> None:
        self.args = list(args)
        self.python = python or sys.executable
        self.repo = repo or REPO
        self.uds = str(uds) if uds is not None else None
        self.port = port or (0 if uds is not None else free_port())
        self.env = {**os.environ, **(env or {})}
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.uds is not None:
            return unix_socket_url(self.uds)
        return f"http://127.0.0.1:{self.port}"

    def _listen_args(self) -> list[str]:
        if self.uds is not None:
            return ["--uds", self.uds]
        return ["--host", "127.0.0.1", "--port", str(self.port)]

    def _ready(self) -> bool:
        if self.uds is not None:
            request = Request("GET", self.url + "/readyz", {}, timeout=Timeout(1.0, 1.0))
            try:
                return HTTPTransport().handle_request(request).status == 200
            except TransportError:
                return False
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> ServerProcess:
        if self.proc is not None and self.proc.poll() is None:  # a second start would orphan the first process
            raise RuntimeError(f"the server on {self.url} is running already (PID {self.proc.pid})")
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [self.python, "-m", "service", "serve", *self._listen_args(), *self.args],
            cwd=self.repo,  # `python -m service` imports the package of its working directory first
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT if self.log_path else subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"server exited with {self.proc.returncode}: {err[-2000:]}")
            if self._ready():
                return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"server on {self.url} not ready after {timeout}s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """Signal the server by PID and wait for it; SIGKILL if it outlives ``timeout``."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(5)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
