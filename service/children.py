"""The environment a Python child of this package runs in when started by exec (a launched server, a replica, a
calibration probe): this one's, and, where this package runs from a checkout rather than an install, the checkout
on ``PYTHONPATH``, so that the child imports this very package. Standard library only."""

from __future__ import annotations

import os
import site
from collections.abc import Mapping
from pathlib import Path

__all__ = ["child_environment"]

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def child_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with this package's checkout first on ``PYTHONPATH`` when it
    is not an installed package."""
    env = dict(os.environ if base is None else base)
    root = str(_PACKAGE_ROOT)
    if root not in [*site.getsitepackages(), site.getusersitepackages()]:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env
