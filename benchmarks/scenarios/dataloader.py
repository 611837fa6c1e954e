"""Scenario 3: a DataLoader fed through the SDK collator vs tokenizing in the collate_fn.

It runs ``python -m benchmarks.dataloader_compare --out <out-dir>/dataloader_compare.json [--smoke]`` from
the repository root, in its own process: it starts its own servers, sets ``TOKENIZERS_PARALLELISM=false``
and forks DataLoader workers, none of which should happen inside this run's process. Bounded by the
profile's timeout. The outcome, this scenario's section of the results, is one of:

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

from benchmarks.profiles import Profile
from benchmarks.progress import log
from testkit.servers import REPO


def run(out_dir: Path, profile: Profile) -> dict[str, Any]:
    """Run dataloader_compare with the profile's size; its figures, or why it was skipped or failed."""
    if importlib.util.find_spec("torch") is None:
        return {"skipped": "torch is not installed (the DataLoader comparison needs torch.utils.data)"}
    target = out_dir / "dataloader_compare.json"
    command = [sys.executable, "-m", "benchmarks.dataloader_compare", "--out", str(target)]
    if profile.smoke:
        command.append("--smoke")
    log_path = out_dir / "logs" / "dataloader_compare.log"
    outcome: dict[str, Any] = {"command": command, "log": str(log_path)}
    log(f"scenario 3: {shlex.join(command)}")
    started = time.time()
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(command, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            outcome["returncode"] = proc.wait(profile.dataloader_timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return _failed(outcome, f"dataloader_compare did not finish in {profile.dataloader_timeout:g}s")
    outcome["seconds"] = time.time() - started
    if outcome["returncode"] != 0:
        return _failed(outcome, f"dataloader_compare exited with {outcome['returncode']}; see {log_path}")
    outcome["file"] = str(target)
    outcome["data"] = json.loads(target.read_text())
    return outcome


def cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-cell figures (workers x batch size) of a scenario-3 section; none when it did not run."""
    return results["data"]["dataloader"] if "data" in results else []


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID (it stops its own servers in its own cleanup); SIGKILL to its process group if it lingers."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this run created for it (start_new_session)
        proc.wait(5)


def _failed(outcome: dict[str, Any], reason: str) -> dict[str, Any]:
    """Record the failure, and show the end of its log on stderr."""
    tail = Path(outcome["log"]).read_text(errors="replace").strip().splitlines()[-15:]
    log(f"scenario 3 failed: {reason}\n" + "\n".join(tail))
    return {**outcome, "failed": reason}
