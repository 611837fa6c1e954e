"""Scripts the tests run as a user runs a training script: a fresh Python process that reports what it saw as one
JSON object, printed last."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from testkit.servers import REPO, script_env


def run_json_script(script: Path | str, *args: str, cwd: Path = REPO, timeout: float = 150, **env: str) -> Any:
    """Runs ``script`` (a file, or Python source run with ``-c``) with ``args`` in ``cwd``, the repository first
    on its path and ``env`` added to this process's environment. It must exit 0 within ``timeout`` seconds (a
    worker frozen on a forked Rust pool never does): else the tail of its stderr fails the test. Returns the JSON
    its last line of output holds."""
    program = [str(script)] if isinstance(script, Path) else ["-c", script]
    done = subprocess.run(
        [sys.executable, *program, *args],
        cwd=cwd,
        env=script_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
