"""A corpus, read by offline jobs that are sharded across workers: inputs, work units, which units a worker
takes, documents, and completion records.

Shared by every job that walks a corpus on many nodes -- ``tokenizer-service pretokenize`` (client side) and
the tokenizer trainer (server side) -- so that both read the same files the same way and split them into the
same units. It imports only the standard library (and pyarrow, when a Parquet file is read), never the
client nor the server.

The pieces, in the order a job uses them::

    from service.corpus import find_inputs, plan_units, resolve_worker, DocumentReader

    files = find_inputs(["data/*.jsonl.gz", "more/"])        # files and globs -> sorted InputFile list
    units = plan_units(files)                                 # whole small files, byte ranges, row groups
    worker = resolve_worker()                                 # flags, or the scheduler's environment
    for unit in worker.take(units):                           # units[index::count]
        reader = DocumentReader(unit, text_field="text", on_bad_record="skip")
        for document in reader:                               # .text, .position, .fields
            ...
        reader.skipped                                        # bad records skipped, with examples

Units do not depend on the number of workers: the same inputs and ``unit_bytes`` give the same units, each
with a stable :attr:`WorkUnit.name`, so N workers produce the same set of outputs as one. ``completion``
writes outputs atomically and keeps a ``.done`` record per unit, so a rerun skips finished units.
``progress`` shows a worker's progress (a bar or log lines) and reports its peak memory; ``flags`` defines the
command-line flags the jobs share.
"""

from .completion import (
    DONE_SUFFIX,
    atomic_file,
    atomic_write_bytes,
    done_path,
    interrupt_on_sigterm,
    read_done,
    remove_partial,
    wait_for_done,
    write_done,
)
from .errors import BadRecord, CorpusError
from .inputs import FORMATS, InputFile, find_inputs
from .records import BAD_RECORD_POLICIES, Document, DocumentReader
from .units import DEFAULT_UNIT_BYTES, WorkUnit, parse_size, plan_units
from .workers import TOTAL_ENV, Worker, resolve_worker

__all__ = [
    "CorpusError",
    "BadRecord",
    "FORMATS",
    "InputFile",
    "find_inputs",
    "DEFAULT_UNIT_BYTES",
    "WorkUnit",
    "plan_units",
    "parse_size",
    "TOTAL_ENV",
    "Worker",
    "resolve_worker",
    "BAD_RECORD_POLICIES",
    "Document",
    "DocumentReader",
    "DONE_SUFFIX",
    "atomic_file",
    "atomic_write_bytes",
    "done_path",
    "interrupt_on_sigterm",
    "read_done",
    "write_done",
    "remove_partial",
    "wait_for_done",
]
