"""Progress lines: what a benchmark run is doing, time-stamped, on stderr (stdout is for the results); and how
a comparison that runs in its own process hands its results over."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def log(message: str) -> None:
    """Print one time-stamped progress line to stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def publish(result: dict[str, Any], out: Path, print_table: Callable[[dict[str, Any]], None]) -> None:
    """Add the machine's facts to ``result``, write it to ``out`` as JSON and print its table."""
    import torch

    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__}
    out.write_text(json.dumps(result, indent=2))
    print_table(result)
    print(f"\nwrote {out} ({result['seconds']:.0f} s)")
