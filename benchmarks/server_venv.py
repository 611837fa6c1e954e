"""A virtual environment with the ``[server]`` extra only -- no torch -- for the memory of a server as the container
image runs it: made once under ``.cache/bench-server-venv/`` and remade when ``pyproject.toml`` changes.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import venv
from pathlib import Path

from benchmarks.harness import log
from testkit.servers import REPO

VENV = REPO / ".cache" / "bench-server-venv"
STAMP = VENV / ".installed-from"  # the hash of the pyproject.toml it was installed from
INSTALL_TIMEOUT = 900.0  # seconds for pip; a cold cache downloads ~150 MB of wheels


class ServerVenvError(RuntimeError):
    """The torch-free venv could not be made (pip failed or ran out of time)."""


def server_python() -> Path:
    """The interpreter of the torch-free venv, made (or remade) first if needed."""
    python = VENV / "bin" / "python"
    digest = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()
    if python.exists() and STAMP.exists() and STAMP.read_text() == digest:
        return python
    if VENV.exists():
        shutil.rmtree(VENV)
    log(f"making the torch-free server venv in {VENV} (pip install -e '.[server]'; bounded: {INSTALL_TIMEOUT:g} s)")
    venv.EnvBuilder(with_pip=True).create(VENV)
    command = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", f"{REPO}[server]"]
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise ServerVenvError(f"pip install took over {INSTALL_TIMEOUT:g} s") from exc
    if done.returncode != 0:
        raise ServerVenvError(f"pip install failed: {done.stderr.strip()[-800:]}")
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.stdout.strip() != "True":
        raise ServerVenvError("torch is importable in the server venv; it must not be")
    STAMP.write_text(digest)
    return python
