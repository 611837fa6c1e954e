"""Exit statuses the ``tokenizer-service`` commands share (standard library only)."""

from __future__ import annotations

import signal

#: A command stopped by Ctrl-C (SIGINT), as a shell reports a process that SIGINT ended.
EXIT_INTERRUPTED = 128 + signal.SIGINT
