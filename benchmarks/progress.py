"""Progress lines: what a benchmark run is doing, time-stamped, on stderr (stdout is for the results)."""

from __future__ import annotations

import sys
import time


def log(message: str) -> None:
    """Print one time-stamped progress line to stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
