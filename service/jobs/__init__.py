"""Offline jobs sharded across workers: the one executor every job runs on, its storage (local or object
stores), which units a worker takes, progress, the command-line skeleton -- and the corpus they walk: inputs,
work units, documents.

Shared by every sharded job -- ``tokenizer-service pretokenize`` (client side) and ``tokenizer-service
train`` (server side) -- so that both read the same files the same way, split them into the same units, and
record, refuse and wait the same way. It imports only the standard library (fsspec for URLs, pyarrow for
Parquet, when asked), never the client nor the server.

Corpus reading (``inputs``, ``units``, ``records``) lives here rather than in a package of its own: the
executor plans in units and records what each was made from, and reading goes through ``storage`` -- two
packages would import each other.

The pieces, in the order a job uses them::

    from service.jobs import JobConfig, ShardedJob, DocumentReader

    storage = config.storage(log)                             # --storage-options, --retry-deadline
    files, units, worker = config.plan(storage)               # inputs (paths, globs, URLs) -> units; the worker
    job = ShardedJob(step=..., folder=storage.folder(config.out), units=units, worker=worker, ...)
    for unit in job.pending():                                # units[index::count] not done yet
        job.clear(unit)
        for document in DocumentReader(unit, storage=storage):   # .text, .position, .fields (streamed)
            ...                                               # write the unit's outputs into the folder
        job.commit(unit, stats)                               # its .done record, written last
    records = job.wait_for_all(stall_timeout=600)             # worker 0

Units do not depend on the number of workers: the same inputs and ``unit_bytes`` give the same units, each
with a stable :attr:`WorkUnit.name`, so N workers produce the same set of outputs as one. ``storage`` writes
every output whole (rename on a disk, a whole upload to a store); ``executor`` keeps a ``.done`` record per
unit, so a rerun skips finished units; ``cli`` holds the flags and the exit statuses the jobs share;
``progress`` shows a worker's progress (a bar or log lines) and reports its peak memory.
"""

from .errors import BadRecord, CorpusError, JobError, OutputConflict, StorageError, UnitsMissing
from .executor import DONE_SUFFIX, DoneRecord, JobConfig, OutputFile, ShardedJob
from .inputs import FORMATS, InputFile, find_inputs
from .records import BAD_RECORD_POLICIES, Document, DocumentReader
from .storage import Folder, LocalFolder, ObjectFolder, Storage, fetch_tokenizer, is_url
from .units import DEFAULT_UNIT_BYTES, WorkUnit, parse_size, plan_units
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
