"""This interpreter's venv, as a folder ``make VENV=...`` takes: for the tests that run the Makefile's commands
(``make serve``, the docs' ``make install``) without making a venv again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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
