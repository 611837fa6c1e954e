"""Offline job processes (``tokenizer-service pretokenize`` / ``train``) as the tests watch them."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from testkit.servers import REPO


def start(
    args: Sequence[str], env: Mapping[str, str], *, python_args: Sequence[str] = ("-m", "service")
) -> subprocess.Popen[str]:
    """``python -m service ARGS`` (or ``python PYTHON_ARGS ARGS``) from the repository root with ``env``,
    its stdout and stderr piped as text."""
    return subprocess.Popen(
        [sys.executable, *python_args, *args],
        cwd=REPO,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Tail:
    """A process's stderr, read on a thread as it comes, so a test can wait for a line while it runs."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        stream = process.stderr
        assert stream is not None, "start the process with stderr=subprocess.PIPE"
        self._thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self._thread.start()

    def text(self) -> str:
        return "".join(self.lines)

    def rest(self, timeout: float = 30) -> str:
        """Everything, once the stream has ended (the process exited)."""
        self._thread.join(timeout)
        return self.text()
