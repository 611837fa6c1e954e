"""Progress of a worker over its units (a tqdm bar on a terminal, else a log line every few seconds, with rates
and ETA), the peak memory a job reports, and the :data:`Log` the offline jobs report through."""

from __future__ import annotations

import importlib.util
import resource
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TextIO

#: Where a job's messages go: one line each.
Log = Callable[[str], None]


def log_to_stderr(message: str) -> None:
    """The default :data:`Log`: a line on stderr, flushed."""
    print(message, file=sys.stderr, flush=True)


def human(value: float, unit: str = "") -> str:
    """``1234567`` -> ``1.23M``."""
    for threshold, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= threshold:
            return f"{value / threshold:.2f}{suffix}{unit}"
    return f"{value:.0f}{unit}"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


#: How progress is shown: ``auto`` (a bar on a terminal with tqdm, else log lines), ``bar``, ``log`` or ``none``.
PROGRESS_MODES = ("auto", "bar", "log", "none")


class Progress:
    """Counts documents, tokens and input bytes (the units' weight) against this worker's total, shown as ``mode``
    says (log lines every ``interval`` seconds); ``counted`` names the second count (``"tokens"``, ``"pre-tokens"``)."""

    def __init__(self, total_weight: int, *, mode: str, interval: float, prefix: str, counted: str) -> None:
        self.stream = sys.stderr
        self.total = max(total_weight, 1)
        self.interval = interval
        self.prefix = prefix
        self.counted = counted
        self.started = self._last_log = self._last_bar = time.monotonic()
        self.documents = self.tokens = self.weight = 0
        self._bar: Any = None
        if mode == "auto":
            mode = "bar" if _isatty(self.stream) and importlib.util.find_spec("tqdm") is not None else "log"
        if mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, unit="B", unit_scale=True, unit_divisor=1024, file=self.stream, desc=prefix
            )
        self.mode = mode

    def advance(self, documents: int, tokens: int, weight: int) -> None:
        """Add what was just written; ``weight``: the input consumed so far, an absolute position."""
        self.documents += documents
        self.tokens += tokens
        step = max(0, min(weight, self.total) - self.weight)
        self.weight += step
        now = time.monotonic()
        if self._bar is not None:
            self._bar.update(step)
            if now - self._last_bar >= 0.5:
                self._last_bar = now
                self._bar.set_postfix_str(self._rates(now), refresh=False)
        elif self.mode == "log" and now - self._last_log >= self.interval:
            self._last_log = now
            self.log_line(now)

    def _rates(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        return f"{human(self.documents / elapsed)} docs/s, {human(self.tokens / elapsed)} {self.counted}/s"

    def log_line(self, now: float) -> None:
        elapsed = max(now - self.started, 1e-9)
        fraction = self.weight / self.total
        eta_text = duration(elapsed / fraction - elapsed) if fraction > 0 else "?"
        print(
            f"{self.prefix}: {fraction:6.1%} of {human(self.total, 'B')}, {self.documents:,} documents, "
            f"{human(self.tokens)} {self.counted}; {self._rates(now)}; elapsed {duration(elapsed)}, ETA {eta_text}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(self._rates(time.monotonic()), refresh=False)
            self._bar.close()
            self._bar = None


def peak_rss_bytes() -> int:
    """This process's peak resident set: ``VmHWM`` (Linux), else ``ru_maxrss``, which Linux carries across exec
    (a worker started by a big process would report the parent's size)."""
    with suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
