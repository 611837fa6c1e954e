"""The command-line flags every sharded job over a corpus shares (``pretokenize``, ``train``): how the
documents are read, which worker this is and how the work is cut, and how progress is shown. One definition,
so the jobs read the same flags the same way."""

from __future__ import annotations

import argparse
from typing import Any

from .inputs import FORMATS
from .progress import PROGRESS_MODES
from .records import BAD_RECORD_POLICIES
from .units import DEFAULT_UNIT_BYTES, parse_size
from .workers import TOTAL_ENV

Group = Any  # an ArgumentParser or one of its argument groups


def add_inputs(parser: argparse.ArgumentParser) -> None:
    """The positional ``INPUT...``: files, directories or globs."""
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help=f"files, directories or globs: {', '.join(FORMATS)}",
    )


def add_text_field(group: Group) -> None:
    group.add_argument(
        "--text-field", default="text", metavar="FIELD", help="JSON field or Parquet column of the text (default: text)"
    )


def add_bad_records(group: Group) -> None:
    group.add_argument(
        "--on-bad-record",
        choices=BAD_RECORD_POLICIES,
        default="error",
        help="error (default): stop at the first bad record, naming file and line; skip: count it",
    )


def add_workers(group: Group, *, wait_help: str) -> None:
    """``--shard-index``, ``--num-shards``, ``--unit-bytes`` and ``--wait`` (what worker 0 waits for and
    does then: ``wait_help``)."""
    group.add_argument("--shard-index", type=int, metavar="I", help="this worker's index (with --num-shards)")
    group.add_argument(
        "--num-shards",
        type=int,
        metavar="N",
        help=f"number of workers (also the total for JOB_COMPLETION_INDEX, else ${TOTAL_ENV})",
    )
    group.add_argument(
        "--unit-bytes",
        metavar="SIZE",
        type=parse_size,
        default=DEFAULT_UNIT_BYTES,
        help="size of a work unit, e.g. 64M (default); the same for every worker and every rerun",
    )
    group.add_argument("--wait", metavar="SECONDS", dest="wait_seconds", type=float, default=600.0, help=wait_help)


def add_progress(
    group: Group, *, progress_help: str = "auto (default): a bar on a terminal, log lines otherwise"
) -> None:
    group.add_argument("--progress", choices=PROGRESS_MODES, default="auto", help=progress_help)
    group.add_argument(
        "--log-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress log lines (default 10)",
    )
