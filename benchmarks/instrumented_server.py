"""``tokenizer-service serve`` of one checkout, as shipped, that says on request how its CPU splits by thread.

    python benchmarks/instrumented_server.py STATE_FILE [serve flags...]     # run by benchmarks.cpu_split

Run by path, from the checkout under test (its working directory and PYTHONPATH), so that ``service`` is that
checkout's package; it imports nothing of ``benchmarks`` (the checkout compared against may not have this
file). It calls the server's own command line (``service.http.cli.main``: same settings, same launcher), after
two additions that change nothing the server does:

- the native threads alive before the tokenizer is loaded are noted (numpy's BLAS pool, started at import):
  those are neither Python threads nor the Rust pool;
- the tokenizer thread's CPU inside the engine's Rust calls (``TokenizerThread._encode``, where the checkout
  has it) is summed with ``time.thread_time()``: the Python side of the call (pyo3 turning the texts into Rust
  strings and the encodings into Python objects, with the GIL held), since that thread waits with ~0 CPU
  while the pool works.

On SIGUSR1 it writes STATE_FILE (JSON, written whole, then renamed): a sequence number, the process's CPU
seconds (``time.process_time()``: every thread), each Python thread's CPU seconds (``threading.enumerate()``,
read through ``time.pthread_getcpuclockid``: nanosecond clocks, any thread) with its native id and name, the
native ids noted before loading, and the encode-call sum and count.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

_encode_seconds = 0.0
_encode_calls = 0


def _time_encode_calls() -> bool:
    """Sum the tokenizer thread's CPU inside ``TokenizerThread._encode``; False when the checkout has none."""
    try:
        from service.engine.tokenizer_thread import TokenizerThread
    except ImportError:
        return False
    original = getattr(TokenizerThread, "_encode", None)
    if original is None:
        return False

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _encode_seconds, _encode_calls
        started = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            _encode_seconds += time.thread_time() - started
            _encode_calls += 1

    TokenizerThread._encode = timed  # type: ignore[method-assign]
    return True


def _state(sequence: int, natives_before_load: list[int], timing_encode: bool) -> dict[str, Any]:
    threads = {}
    for thread in threading.enumerate():
        if thread.ident is None or thread.native_id is None:
            continue
        try:
            cpu = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except OSError:  # the thread ended meanwhile
            continue
        threads[str(thread.native_id)] = {"name": thread.name, "cpu_seconds": cpu}
    return {
        "sequence": sequence,
        "pid": os.getpid(),
        "process_cpu_seconds": time.process_time(),
        "python_threads": threads,
        "natives_before_load": natives_before_load,
        "encode_call_seconds": _encode_seconds if timing_encode else None,
        "encode_calls": _encode_calls if timing_encode else None,
    }


def main(argv: list[str]) -> int:
    state_file = Path(argv[0])
    import numpy  # noqa: F401 -- its BLAS threads start now, before the tokenizer loads

    timing_encode = _time_encode_calls()  # (imports the engine, and with it tokenizers and transformers)
    python_tids = {thread.native_id for thread in threading.enumerate()}
    natives = sorted(int(tid) for tid in os.listdir("/proc/self/task") if int(tid) not in python_tids)
    sequence = 0

    def dump(signum: int, frame: object) -> None:
        nonlocal sequence
        sequence += 1
        scratch = state_file.with_suffix(".tmp")
        scratch.write_text(json.dumps(_state(sequence, natives, timing_encode)))
        scratch.replace(state_file)

    signal.signal(signal.SIGUSR1, dump)
    from service.http.cli import main as serve

    return serve(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
