"""What every sharded job is asked to do: :class:`JobConfig`, whose fields are every job's flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .documents import BAD_RECORD_POLICIES
from .flags import flag
from .folders import check_output_folder
from .inputs import FORMATS, InputFile, find_inputs
from .progress import PROGRESS_MODES, Log
from .stores import STORAGE_OPTIONS_ENV, Storage, storage_options_from_json
from .work_units import DEFAULT_UNIT_BYTES, WorkUnit, format_size, parse_size, plan_units
from .workers import TOTAL_ENV, Worker, resolve_worker


def _storage_options(text: str) -> dict[str, Any]:
    try:
        return storage_options_from_json(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """The fields every sharded job over a corpus shares, each a flag (:mod:`.flags`) whose help says what it means."""

    inputs: tuple[str, ...] = field(
        metadata=flag(
            f"files, directories or globs, local or URLs (s3://bucket/corpus/*.jsonl.gz): {', '.join(FORMATS)}",
            name="",
            nargs="+",
            metavar="INPUT",
            convert=tuple,
        )
    )
    out: str | Path = field(
        metadata=flag("the output folder; a local path or a URL (s3://...)", required=True, metavar="DIR")
    )
    text_field: str = field(default="text", metadata=flag("JSON field or Parquet column of the text", metavar="FIELD"))
    on_bad_record: str = field(
        default="error",
        metadata=flag(
            "error: stop at the first bad record, naming file and line (done units stay done); skip: skip such "
            "records, counted, the first few named in the summary",
            choices=BAD_RECORD_POLICIES,
        ),
    )
    unit_bytes: int = field(
        default=DEFAULT_UNIT_BYTES,
        metadata=flag(
            "size of a work unit, e.g. 64M; the same for every worker and every rerun",
            metavar="SIZE",
            parse=parse_size,
            shown=format_size,
        ),
    )
    shard_index: int | None = field(
        default=None, metadata=flag("this worker's index (with --num-shards)", parse=int, metavar="I")
    )
    num_shards: int | None = field(
        default=None,
        metadata=flag(
            f"number of workers (also the total for JOB_COMPLETION_INDEX, else ${TOTAL_ENV})", parse=int, metavar="N"
        ),
    )
    wait_seconds: float = field(
        default=600.0,
        metadata=flag(
            "worker 0: stop waiting for the other workers after this many seconds without a unit getting done",
            name="--wait",
            parse=float,
            metavar="SECONDS",
        ),
    )
    retry_deadline: float = field(
        default=Storage.retry_deadline,  # one default: the storage's
        metadata=flag(
            "seconds an unreachable or busy store is retried -- said at once, naming the URL, then counted down "
            "-- before the worker fails",
            parse=float,
            metavar="SECONDS",
        ),
    )
    storage_options: dict[str, Any] = field(
        default_factory=dict,
        compare=False,
        repr=False,
        metadata=flag(
            'fsspec options for URLs, e.g. \'{"endpoint_url": "http://minio:9000"}\'; never printed nor recorded; '
            "credentials come from each store's own chain: environment, profile, instance or pod identity",
            metavar="JSON",
            parse=_storage_options,
            env=STORAGE_OPTIONS_ENV,
            default_text=f"${STORAGE_OPTIONS_ENV}, as `serve --model URL` reads it",
        ),
    )
    progress: str = field(
        default="auto", metadata=flag("auto: a bar on a terminal, log lines otherwise", choices=PROGRESS_MODES)
    )
    log_every: float = field(
        default=10.0, metadata=flag("seconds between progress log lines", parse=float, metavar="SECONDS")
    )
    environ: dict[str, str] | None = field(default=None, compare=False)  # None: os.environ (tests pass one)

    def __post_init__(self) -> None:
        if self.on_bad_record not in BAD_RECORD_POLICIES:
            raise ValueError(f"on_bad_record must be one of {BAD_RECORD_POLICIES}, not {self.on_bad_record!r}")
        if self.progress not in PROGRESS_MODES:
            raise ValueError(f"progress must be one of {PROGRESS_MODES}, not {self.progress!r}")
        if self.unit_bytes < 1:
            raise ValueError(f"unit_bytes must be at least 1, not {self.unit_bytes}")
        for name in ("wait_seconds", "retry_deadline"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, not {getattr(self, name)}")

    @property
    def out_location(self) -> str:
        return str(self.out)

    def storage(self, log: Log | None = None) -> Storage:
        return Storage(dict(self.storage_options), self.retry_deadline, log)

    def check_installed(self) -> None:
        """A CorpusError naming the extra of a package the job needs and lacks: before any work (or sidecar)."""

    def outputs(self) -> dict[str, str]:
        """Where the job writes, by flag: checked before any work, and never read back as inputs."""
        return {"--out": self.out_location}

    def plan(self, storage: Storage) -> tuple[list[InputFile], list[WorkUnit], Worker]:
        """The inputs, their units (the same on every worker) and this worker; any refusal comes before any work."""
        outputs = self.outputs()
        for flag_name, location in outputs.items():
            check_output_folder(flag_name, location)
        files = find_inputs(self.inputs, exclude=list(outputs.values()), storage=storage)
        units = plan_units(files, self.unit_bytes, storage)
        return files, units, resolve_worker(self.shard_index, self.num_shards, self.environ)
