"""The command-line skeleton every sharded job shares (``pretokenize``, ``train``): the flags of
:class:`~.executor.JobConfig` (how the documents are read, where they are, which worker this is, how the work
is cut, how stores are reached, how progress is shown), and one way to run a job and turn its outcome into an
exit status. One definition, so the jobs read the same flags the same way and fail the same way."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from .errors import JobError, UnitsMissing
from .inputs import FORMATS
from .progress import PROGRESS_MODES
from .records import BAD_RECORD_POLICIES
from .storage import STORAGE_OPTIONS_ENV, storage_options_from_json
from .units import DEFAULT_UNIT_BYTES, parse_size
from .workers import (
    RESOURCE_CONFIG_ENV,
    SAGEMAKER_CURRENT_HOST_ENV,
    SAGEMAKER_HOSTS_ENV,
    SAGEMAKER_RESOURCE_CONFIGS,
    TOTAL_ENV,
)

Group = Any  # an ArgumentParser or one of its argument groups
T = TypeVar("T")

#: Exit statuses of every job: 0 done, 1 failed, 2 wrong arguments (argparse), 3 worker 0 stopped waiting for
#: units that are not done, 130 interrupted.
EXIT_FAILED, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 1, 3, 130

WORKER_SOURCES = (
    f"--shard-index/--num-shards, else JOB_COMPLETION_INDEX (with --num-shards or ${TOTAL_ENV}), else "
    "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, else RANK/WORLD_SIZE, else NODE_INDEX/NUM_NODES, else "
    f"SageMaker's {' or '.join(SAGEMAKER_RESOURCE_CONFIGS)} (Processing, Training: current_host among hosts) "
    f"or {SAGEMAKER_CURRENT_HOST_ENV}/{SAGEMAKER_HOSTS_ENV}"
)


def add_inputs(parser: argparse.ArgumentParser) -> None:
    """The positional ``INPUT...``: files, directories, globs or URLs."""
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help=f"files, directories or globs, local or URLs (s3://bucket/corpus/*.jsonl.gz): {', '.join(FORMATS)}",
    )


def add_out(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help=f"{help}; a local path or a URL (s3://...)")


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


def add_storage(group: Group, *, retry_help: str) -> None:
    """``--storage-options`` and ``--retry-deadline``."""
    group.add_argument(
        "--storage-options",
        metavar="JSON",
        type=_options,
        default=os.environ.get(STORAGE_OPTIONS_ENV, "{}"),
        help='fsspec options for URLs, e.g. \'{"endpoint_url": "http://minio:9000"}\' (default '
        f"${STORAGE_OPTIONS_ENV}, as `serve --model URL` reads it; never printed nor recorded); credentials come "
        "from each store's own chain: environment, profile, instance or pod identity",
    )
    group.add_argument("--retry-deadline", metavar="SECONDS", type=float, default=300.0, help=retry_help)


def _options(text: str) -> dict[str, Any]:
    try:
        return storage_options_from_json(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def job_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~.executor.JobConfig` fields from the shared flags."""
    return {
        "inputs": tuple(args.inputs),
        "out": args.out,
        "text_field": args.text_field,
        "on_bad_record": args.on_bad_record,
        "unit_bytes": args.unit_bytes,
        "shard_index": args.shard_index,
        "num_shards": args.num_shards,
        "wait_seconds": args.wait_seconds,
        "retry_deadline": args.retry_deadline,
        "storage_options": args.storage_options,
        "progress": args.progress,
        "log_every": args.log_every,
    }


def parse(parser: argparse.ArgumentParser, argv: Any, config_from_args: Callable[[argparse.Namespace], T]) -> T:
    """The job's config from the command line; a config the job refuses (ValueError) is a usage error (2)."""
    args = parser.parse_args(argv)
    try:
        return config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))


def interrupt_on_sigterm() -> None:
    """Make SIGTERM (a pod or a job being stopped) unwind like Ctrl-C, so that the output being written
    leaves no temporary file behind. Done units stay done."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_job(prog: str, job: Callable[[], Any], *, failures: tuple[type[BaseException], ...] = ()) -> tuple[int, Any]:
    """Run ``job()`` as a command does: ``(exit status, its result or None)``. A :class:`JobError` (or one of
    ``failures``, or an OSError/ValueError) is one line on stderr and status 1; :class:`UnitsMissing` is
    status 3 (worker 0 stopped waiting; a rerun finishes); Ctrl-C or SIGTERM is 130, done units kept."""
    interrupt_on_sigterm()
    try:
        return 0, job()
    except UnitsMissing as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE, None
    except (JobError, OSError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED, None
    except failures as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED, None
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; done units stay done, a rerun finishes the rest", file=sys.stderr)
        return EXIT_INTERRUPTED, None


__all__ = [
    "RESOURCE_CONFIG_ENV",
    "WORKER_SOURCES",
    "add_inputs",
    "add_out",
    "add_text_field",
    "add_bad_records",
    "add_workers",
    "add_storage",
    "add_progress",
    "job_fields",
    "parse",
    "interrupt_on_sigterm",
    "run_job",
]
