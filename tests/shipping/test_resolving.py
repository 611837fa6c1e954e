"""`make install`'s resolves land at once, and its editable builds print no warning (issue 42).

Defects: pip printed "This is taking longer than usual" three times over the test extra, trying 60 aiobotocore,
28 s3fs and 23 boto3 releases (boto3 was open while aiobotocore pins botocore to a few releases; 42 s here), and
two selenium releases that need a certifi not released; and each of make install's four editable installs printed
setuptools' boxed "Editable installation" warning (a flat layout without ``package-dir``: setuptools installs a
meta path finder and warns about it; ``package-dir = {"" = "."}`` makes the editable install a .pth of the root).

A fresh venv made as the Makefile makes .venv (pip upgraded; torch==2.13.0 from the machine's wheel before the
test extra), each resolve a dry run (``pip install --dry-run --report``): nothing is installed but torch and, last,
the package itself in editable mode. Each pip is bounded in time: a resolver that backtracks fails here, it does
not hang. pip reaches the index, so a new upstream release that breaks a range shows here first.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.servers import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TORCH = "torch==2.13.0"  # the machine's CPU wheel (see the Makefile)
#: What pip says when its resolver backtracks: it tries older releases of a package, one after another.
BACKTRACKING = (
    "is looking at multiple versions of",
    "is still looking at multiple versions of",
    "taking longer than usual",
)


def pip(venv: Path, *args: str, timeout: float = 300) -> str:
    """pip's whole output (no --quiet: its resolver's messages are what is checked)."""
    command = [str(venv / "bin" / "python"), "-m", "pip", *args, "--disable-pip-version-check"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"pip {' '.join(args)}: {output[-3000:]}"
    return output


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resolving") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    pip(root, "install", "--quiet", "--upgrade", "pip")
    pip(root, "install", "--quiet", "--no-compile", TORCH)
    return root


def backtracking(output: str) -> list[str]:
    return [line for line in output.splitlines() if any(said in line for said in BACKTRACKING)]


@pytest.mark.parametrize("extra", ["server", "test"])
def test_the_extras_resolve_without_backtracking(venv: Path, tmp_path: Path, extra: str):
    report = tmp_path / "report.json"
    output = pip(venv, "install", "--dry-run", "--report", str(report), f".[{extra}]")
    assert not backtracking(output), "\n".join(backtracking(output))
    resolved = {entry["metadata"]["name"].lower() for entry in json.loads(report.read_text())["install"]}
    assert {"uvicorn", "transformers"} <= resolved, sorted(resolved)
    if extra == "test":
        assert {"s3fs", "aiobotocore", "boto3", "selenium"} <= resolved, sorted(resolved)


def test_the_editable_install_prints_no_warning(venv: Path):
    output = pip(venv, "install", "--no-deps", "--no-compile", "-e", ".")
    assert "Successfully installed tokenizer-service" in output, output
    warnings = [line for line in output.splitlines() if "Warning" in line or "!!" in line]
    assert not warnings, output
