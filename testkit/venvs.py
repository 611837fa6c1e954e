"""Venvs for the tests: this interpreter's venv as a folder ``make VENV=...`` takes, for the tests that run the
Makefile's commands (``make serve``, the docs' ``make install``) without making a venv again; and a clean venv
made as the docs make one, for the tests of each install we offer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from testkit.servers import REPO


def linked_venv(folder: Path, *, cwd: Path, targets: tuple[str, ...] = ("install",)) -> Path:
    """``folder`` made a venv for ``make VENV=folder``: each entry of this interpreter's venv linked (its
    ``bin/``, ``lib/``...), make's records of the set-up (``.installed-*``) its own, marked done for ``targets``
    by ``make --touch`` run in ``cwd`` (a clone, or a folder laid out as one): make sets up nothing."""
    folder.mkdir(parents=True)
    for entry in Path(sys.prefix).iterdir():
        if not entry.name.startswith("."):  # the records of the venv's own set-up stay out
            (folder / entry.name).symlink_to(entry)
    touched = subprocess.run(
        ["make", "--touch", "--no-print-directory", *targets, f"VENV={folder}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert touched.returncode == 0, touched.stderr
    return folder


#: What a clean venv's commands run with: an empty PYTHONPATH adds nothing to sys.path, so the package they import is
#: the one installed, not a checkout this process was given (a git worktree's tests set PYTHONPATH); and bytecode
#: written as a module is first imported, where this environment says not to (PYTHONDONTWRITEBYTECODE): the
#: installs write none (--no-compile), so without it every process would compile what it imports again.
CLEAN_ENV = {"PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": ""}


class CleanVenv:
    """A clean venv at ``root`` with a current pip, as the Makefile makes ``.venv``: ``python -m venv``, then
    ``pip install --upgrade pip`` ("Use a current pip", getting-started.md: Python 3.11's own pip 23.2 backtracks
    through boto3's releases for minutes over the s3 extra). Its pip runs in the clone's root (``pip install .``
    builds this checkout) and installs with --no-compile, as the Makefile does: the same files, their bytecode
    written when first imported."""

    def __init__(self, root: Path) -> None:
        self.root = root
        _create(root)

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def pip(self, *args: str, quiet: bool = True, timeout: float = 600) -> str:
        """pip's output (stdout, then stderr); it must succeed. ``quiet=False`` where its messages are checked."""
        command = [self.python, "-m", "pip", *args, "--disable-pip-version-check"]
        command += ["--quiet"] * quiet + ["--no-compile"] * (args[0] == "install")
        done = self.run(*command, cwd=REPO, timeout=timeout)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"pip {' '.join(args)}: {output[-3000:]}"
        return output

    def installed(self) -> dict[str, str]:
        """name (lower case) -> version of every installed distribution."""
        listed = self.run(self.python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check", cwd=REPO)
        assert listed.returncode == 0, listed.stderr
        return {entry["name"].lower(): entry["version"] for entry in json.loads(listed.stdout)}

    def run(self, *args: str, cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """``args`` in ``cwd``: the installed package, never one on this process's PYTHONPATH (``env`` may add one)."""
        environment = {**os.environ, **CLEAN_ENV, **env}
        return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=environment)


def _create(root: Path) -> None:
    """``python -m venv root``, then its ``pip install --upgrade pip``."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    upgrade = [str(root / "bin" / "python"), "-m", "pip", "install", "--upgrade", "pip", "--quiet"]
    upgrade += ["--disable-pip-version-check", "--no-compile"]
    environment = {**os.environ, **CLEAN_ENV}
    done = subprocess.run(upgrade, cwd=REPO, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip install --upgrade pip: {done.stderr[-3000:]}"
