"""The command-line skeleton every sharded job shares (``pretokenize``, ``train``): the config read from the flags
its dataclass declares (:mod:`.flags`), and one way to run a job and turn its outcome into an exit status."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

from ..exits import EXIT_INTERRUPTED
from .config import JobConfig
from .documents import SKIPPED_EXAMPLES
from .errors import BadRecord, JobError, UnitsMissing
from .flags import config_values, flag_of
from .workers import SAGEMAKER_CURRENT_HOST_ENV, SAGEMAKER_HOSTS_ENV, SAGEMAKER_RESOURCE_CONFIGS, TOTAL_ENV

T = TypeVar("T")

#: Exit statuses of every job: 0 done, 1 failed, 2 wrong arguments, 3 worker 0 stopped waiting, 130 interrupted.
EXIT_FAILED, EXIT_INCOMPLETE = 1, 3

WORKER_SOURCES = (
    f"--shard-index/--num-shards, else JOB_COMPLETION_INDEX (with --num-shards or ${TOTAL_ENV}), else "
    "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, else RANK/WORLD_SIZE, else NODE_INDEX/NUM_NODES, else "
    f"SageMaker's {' or '.join(SAGEMAKER_RESOURCE_CONFIGS)} (Processing, Training: current_host among hosts) "
    f"or {SAGEMAKER_CURRENT_HOST_ENV}/{SAGEMAKER_HOSTS_ENV}"
)
#: The help's words for the flags that spread the work (pretokenize's and train's "how the work is spread").
WORKERS_DESCRIPTION = f"Each worker takes units[index::count]; its index comes from {WORKER_SOURCES}."

#: What a bad record's error adds, on every job that reads a corpus: the flag that skips such records.
BAD_RECORD_HINT = (
    f"to skip such records instead, rerun with {flag_of(JobConfig, 'on_bad_record')} skip (they are counted and the "
    f"first {SKIPPED_EXAMPLES} named in the summary); done units stay done, the rerun does the rest"
)


def parse(parser: argparse.ArgumentParser, argv: Any, config_type: type[T]) -> T:
    """The job's config from the command line; a config the job refuses (ValueError) is a usage error (2)."""
    args = parser.parse_args(argv)
    try:
        return config_type(**config_values(config_type, args))
    except ValueError as exc:
        parser.error(str(exc))


def interrupt_on_sigterm() -> None:
    """SIGTERM (a pod or a job stopped) unwinds like Ctrl-C: the output being written leaves no temporary file."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_job(prog: str, job: Callable[[], Any], *, failures: tuple[type[BaseException], ...] = ()) -> tuple[int, Any]:
    """Run ``job()`` as a command does: ``(exit status, its result or None)``. A :class:`JobError`, one of
    ``failures``, an OSError or ValueError is a line on stderr and 1 (a :class:`BadRecord` names the flag that skips
    it); :class:`UnitsMissing` 3; Ctrl-C or SIGTERM 130."""
    interrupt_on_sigterm()
    failed: tuple[type[BaseException], ...] = (JobError, OSError, ValueError, *failures)
    try:
        return 0, job()
    except UnitsMissing as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE, None
    except BadRecord as exc:
        print(f"{prog}: error: {exc}; {BAD_RECORD_HINT}", file=sys.stderr)
        return EXIT_FAILED, None
    except failed as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_FAILED, None
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; done units stay done, a rerun finishes the rest", file=sys.stderr)
        return EXIT_INTERRUPTED, None


__all__ = ["BAD_RECORD_HINT", "WORKERS_DESCRIPTION", "WORKER_SOURCES", "parse", "interrupt_on_sigterm", "run_job"]
