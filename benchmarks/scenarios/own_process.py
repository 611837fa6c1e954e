"""Scenarios that run in a process of their own: ``python -m benchmarks.<module> --out <json> [--smoke]``.

Such a scenario starts its own servers and forks DataLoader workers, none of which should happen inside the
run's process. It is run from the repository root, in a new session, bounded by a timeout, and its outcome
-- that scenario's section of the results -- is one of:

- its figures: ``command``, ``returncode``, ``seconds``, ``log``, ``file`` and ``data`` (its JSON);
- ``skipped`` with the reason, when it cannot run here: torch is not installed (or the scenario was not
  selected);
- ``failed`` with the reason, when it crashed or timed out: the whole run then fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.progress import log
from testkit.servers import REPO


def run_module(
    module: str, label: str, out_dir: Path, smoke: bool, timeout: float, *, needs_torch: bool = True
) -> dict[str, Any]:
    """Run ``benchmarks.<module>``; its figures, or why it was skipped or failed. ``label`` names it in logs;
    ``needs_torch``: skipped without torch (the DataLoader scenarios)."""
    if needs_torch and importlib.util.find_spec("torch") is None:
        return {"skipped": "torch is not installed (the DataLoader comparison needs torch.utils.data)"}
    target = out_dir / f"{module}.json"
    command = [sys.executable, "-m", f"benchmarks.{module}", "--out", str(target)]
    if smoke:
        command.append("--smoke")
    log_path = out_dir / "logs" / f"{module}.log"
    outcome: dict[str, Any] = {"command": command, "log": str(log_path)}
    log(f"{label}: {shlex.join(command)}")
    started = time.time()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(command, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            outcome["returncode"] = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return _failed(outcome, label, f"{module} did not finish in {timeout:g}s")
    outcome["seconds"] = time.time() - started
    if outcome["returncode"] != 0:
        return _failed(outcome, label, f"{module} exited with {outcome['returncode']}; see {log_path}")
    outcome["file"] = str(target)
    outcome["data"] = json.loads(target.read_text())
    return outcome


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID (it stops its own servers in its own cleanup); SIGKILL to its process group if it lingers."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this run created for it (start_new_session)
        proc.wait(5)


def _failed(outcome: dict[str, Any], label: str, reason: str) -> dict[str, Any]:
    """Record the failure, and show the end of its log on stderr."""
    tail = Path(outcome["log"]).read_text(errors="replace").strip().splitlines()[-15:]
    log(f"{label} failed: {reason}\n" + "\n".join(tail))
    return {**outcome, "failed": reason}
