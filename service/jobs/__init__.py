"""Offline jobs sharded across workers: the one executor every job runs on, its storage (local or object
stores), which units a worker takes, progress, the command-line skeleton -- and the corpus they walk: inputs,
work units, documents.

Shared by ``tokenizer-service pretokenize`` (client side) and ``train`` (server side), so that both read, split,
record, refuse and wait the same way; it imports the standard library only (fsspec for URLs, pyarrow for
Parquet, when asked). The corpus is read here, not in a package of its own: the executor plans in units and
records what each was made from, and reading goes through ``storage`` -- two packages would import each other.
A job: ``files, units, worker = config.plan(config.storage(log))``, then :func:`run_worker` over its
:class:`Step` (see :mod:`.executor`). Units do not depend on the number of workers, so N workers produce the
same outputs as one.
"""

from .config import JobConfig
from .documents import BAD_RECORD_POLICIES, Document, DocumentReader
from .errors import BadRecord, CorpusError, JobError, OutputConflict, StorageError, UnitsMissing
from .executor import (
    DONE_SUFFIX,
    AsyncStep,
    DoneRecord,
    OutputFile,
    ShardedJob,
    Step,
    WorkerReport,
    arun_worker,
    run_worker,
)
from .inputs import FORMATS, InputFile, find_inputs
from .storage import Folder, LocalFolder, ObjectFolder, Storage, fetch_tokenizer, is_url
from .work_units import DEFAULT_UNIT_BYTES, WorkUnit, parse_size, plan_units
from .workers import RESOURCE_CONFIG_ENV, TOTAL_ENV, Worker, resolve_worker

__all__ = [
    "JobError",
    "CorpusError",
    "BadRecord",
    "OutputConflict",
    "UnitsMissing",
    "StorageError",
    "JobConfig",
    "ShardedJob",
    "Step",
    "AsyncStep",
    "run_worker",
    "arun_worker",
    "WorkerReport",
    "DoneRecord",
    "OutputFile",
    "DONE_SUFFIX",
    "FORMATS",
    "InputFile",
    "find_inputs",
    "DEFAULT_UNIT_BYTES",
    "WorkUnit",
    "plan_units",
    "parse_size",
    "TOTAL_ENV",
    "RESOURCE_CONFIG_ENV",
    "Worker",
    "resolve_worker",
    "BAD_RECORD_POLICIES",
    "Document",
    "DocumentReader",
    "Storage",
    "Folder",
    "LocalFolder",
    "ObjectFolder",
    "fetch_tokenizer",
    "is_url",
]
