"""Offline jobs sharded across workers: the one executor every job runs on, its storage (local or object
stores), which units a worker takes, progress, the command-line skeleton -- and the corpus they walk: inputs,
work units, documents.

Shared by ``tokenizer-service pretokenize`` (client side) and ``tokenizer-service train`` (server side), so that
both read the same files the same way, split them into the same units, and record, refuse and wait the same way.
It imports only the standard library (fsspec for URLs, pyarrow for Parquet, when asked), never the client nor the
server. Corpus reading lives here rather than in a package of its own: the executor plans in units and records
what each was made from, and reading goes through ``storage`` -- two packages would import each other.

A job, in the order it uses the pieces::

    storage = config.storage(log)                        # a JobConfig: --storage-options, --retry-deadline
    files, units, worker = config.plan(storage)          # inputs (paths, globs, URLs) -> units; this worker
    report = run_worker(step, folder=storage.folder(config.out_location), units=units, worker=worker,
                        config=config, log=log)          # the executor (see its module), over a Step

Units do not depend on the number of workers: the same inputs and ``unit_bytes`` give the same units, each with a
stable :attr:`WorkUnit.name`, so N workers produce the same outputs as one.
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
