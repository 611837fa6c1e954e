"""Deterministic control of the tokenizer thread for admission tests: no sleeps, no races with the clock.

:class:`GatedTokenizer` wraps a real loaded tokenizer; any Rust encode whose first input starts with
:data:`HOLD` blocks on the tokenizer thread until the test opens the gate, so "the engine is busy" is a
state the test sets, not a guess about how long a heavy request takes on a loaded machine. Everything else
is the real tokenizer. :class:`InThreadServer` runs the real app under uvicorn on 127.0.0.1 in a thread of
the test process, so the test can hold the gate while it talks HTTP to the server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import uvicorn

from service.engine import LoadedTokenizer
from service.http import Runtime, Settings, create_app
from testkit.engine import queued_requests
from testkit.servers import free_port

HOLD = "\u2063hold the engine"  # starts with an invisible separator: no real text does


class _GatedBackend:
    def __init__(self, backend: Any, gate: Gate) -> None:
        self._backend = backend
        self._gate = gate

    def encode_batch(self, inputs: list[Any], **kwargs: Any) -> Any:
        self._gate.pass_through(inputs)
        return self._backend.encode_batch(inputs, **kwargs)

    def encode_batch_fast(self, inputs: list[Any], **kwargs: Any) -> Any:
        self._gate.pass_through(inputs)
        return self._backend.encode_batch_fast(inputs, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


class _GatedTokenizer:
    def __init__(self, tokenizer: Any, gate: Gate) -> None:
        self._tokenizer = tokenizer
        self._gate = gate
        self.backend_tokenizer = _GatedBackend(tokenizer.backend_tokenizer, gate)

    def batch_decode(self, sequences: Any, **kwargs: Any) -> Any:
        self._gate.decoded.extend(sequences)
        return self._tokenizer.batch_decode(sequences, **kwargs)

    def __len__(self) -> int:
        return len(self._tokenizer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


class Gate:
    """Holds the tokenizer thread while closed, for encodes that carry :data:`HOLD`; records what was encoded."""

    def __init__(self) -> None:
        self.entered = threading.Event()  # an encode carrying HOLD is on the tokenizer thread now
        self._open = threading.Event()
        self.calls: list[list[Any]] = []  # the inputs of every Rust encode call, in order
        self.decoded: list[Any] = []  # every id list decoded, in order

    def gated(self, loaded: LoadedTokenizer) -> LoadedTokenizer:
        return replace(loaded, tokenizer=_GatedTokenizer(loaded.tokenizer, self))

    @property
    def encoded(self) -> list[Any]:
        """Every input that reached Rust, in order."""
        return [item for call in self.calls for item in call]

    def pass_through(self, inputs: list[Any]) -> None:
        self.calls.append(list(inputs))
        first = inputs[0] if inputs else ""
        if isinstance(first, str) and first.startswith(HOLD):
            self.entered.set()
            if not self._open.wait(60):
                raise RuntimeError("the test never opened the gate")

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        self._open.clear()
        self.entered.clear()


def wait_until(
    condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition", *, interval: float = 0.005
) -> None:
    """Poll ``condition`` every ``interval`` seconds until true; fail after ``timeout`` seconds (a bound, never a
    timing assumption). A condition that costs a request to a server polls less often."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        time.sleep(interval)


class InThreadServer:
    """The real app under a real uvicorn server on 127.0.0.1:<free port>, in a thread of this process."""

    def __init__(self, settings: Settings, loaded: LoadedTokenizer) -> None:
        self.runtime = Runtime(settings, loaded)
        self.port = free_port()
        config = uvicorn.Config(
            create_app(settings, runtime=self.runtime), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def queued(self) -> int:
        return queued_requests(self.runtime.engine)


@contextmanager
def in_thread_server(loaded: LoadedTokenizer, gate: Gate, **settings: Any) -> Iterator[InThreadServer]:
    """Serve ``loaded`` behind ``gate``; the gate is opened and the server stopped on the way out."""
    server = InThreadServer(Settings(threads=1, **settings), gate.gated(loaded))
    server.thread.start()
    try:
        wait_until(lambda: server.server.started, 30, "uvicorn start-up")
        yield server
    finally:
        gate.open()
        server.server.should_exit = True
        server.thread.join(30)
