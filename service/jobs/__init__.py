"""Offline jobs sharded across workers (``pretokenize``, ``train``): the one executor they run on (:mod:`.executor`),
storage, worker index, progress, the command-line skeleton, and the corpus they walk (inputs, work units,
documents). The corpus lives here because the executor plans in units and reading goes through :mod:`.stores`.
Standard library only (fsspec for URLs, pyarrow for Parquet, when asked); see docs/guides/pretokenize.md.
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
from .folders import Folder, LocalFolder, ObjectFolder
from .inputs import FORMATS, InputFile, find_inputs
from .stores import Storage
from .tokenizer_fetch import fetch_tokenizer
from .urls import is_url
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
