"""One executor for every sharded job over a corpus: the plan, this worker's units, their completion records,
refusal of another run's outputs, and worker 0's wait for every unit.

A job is a step run per worker over its units (as in datatrove, whose executor knows only ``rank`` and
``world_size``): ``pretokenize`` writes a token shard per unit, ``train`` counts a unit's pre-tokens. The step
does the work on a unit; everything a sharded job needs around it lives here, once::

    job = ShardedJob(step="pretokenize", folder=out, units=units, worker=worker, settings=settings,
                     stats_type=ShardStats, outputs=shard_names, log=log)
    for unit in job.pending():            # this worker's units that are not done (others' checked too)
        job.clear(unit)                   # what an interrupted attempt left
        ...write the unit's outputs into `out`...
        job.commit(unit, stats)           # the .done record, written last: the only commit
    records = job.wait_for_all(stall_timeout=600)   # worker 0: every unit's record, checked

A unit is done when its ``<unit>.done`` record exists and every output it lists is in the folder with the size
it records: readers trust only what a record lists. A record made with other settings or from another input
is an :class:`~.errors.OutputConflict` -- never mixed, never silently overwritten -- and so is a record of a
unit that this run's plan does not have. Outputs do not depend on the number of workers, so N workers leave
the same folder as one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Generic, TypeVar

from .errors import JobError, OutputConflict, UnitsMissing
from .inputs import InputFile, find_inputs
from .progress import PROGRESS_MODES, Log, duration
from .records import BAD_RECORD_POLICIES
from .storage import Folder, Storage
from .units import DEFAULT_UNIT_BYTES, WorkUnit, plan_units
from .workers import Worker, resolve_worker

DONE_SUFFIX = ".done"
#: How often worker 0 says it is still waiting when nothing changes (it also says so when a unit gets done).
WAIT_LINE_SECONDS = 60.0

S = TypeVar("S")  # a step's per-unit statistics: a dataclass


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """The fields every sharded job over a corpus shares; the flags of :mod:`.jobcli` map one to one.

    ``inputs``: files, directories, globs or URLs. ``out``: a local path or a URL. ``storage_options``: the
    filesystem options for URLs (an endpoint...), never printed nor recorded. ``wait_seconds``: how long
    worker 0 waits without any unit getting done. ``retry_deadline``: how long a failing request (to a store,
    or to the service) is retried."""

    inputs: tuple[str, ...]
    out: str | Path
    text_field: str = "text"
    on_bad_record: str = "error"
    unit_bytes: int = DEFAULT_UNIT_BYTES
    shard_index: int | None = None
    num_shards: int | None = None
    wait_seconds: float = 600.0
    retry_deadline: float = 300.0
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    progress: str = "auto"
    log_every: float = 10.0
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

    def worker(self) -> Worker:
        """This process's place among the workers (see :func:`~.workers.resolve_worker`)."""
        return resolve_worker(self.shard_index, self.num_shards, self.environ)

    def check_installed(self) -> None:
        """Raise a CorpusError naming the package and the extra that brings it when the job, as
        configured, needs one that is not installed: before any work (before a sidecar service starts)."""

    def plan(self, storage: Storage, exclude: Sequence[str] = ()) -> tuple[list[InputFile], list[WorkUnit], Worker]:
        """The inputs, their units (the same on every worker) and this worker; refused before any work."""
        files = find_inputs(self.inputs, exclude=exclude, storage=storage)
        units = plan_units(files, self.unit_bytes, storage)
        return files, units, self.worker()


@dataclass(frozen=True)
class OutputFile:
    """One output of a unit, as its record lists it."""

    name: str  # relative to the work folder
    bytes: int


@dataclass(frozen=True)
class DoneRecord(Generic[S]):
    """The ``.done`` record of a unit: what it was made from (``unit``), how (``settings``), what it holds
    (``files`` with their sizes) and the step's statistics (``stats``, a dataclass of the step's)."""

    name: str
    unit: dict[str, object]
    files: tuple[OutputFile, ...]
    settings: dict[str, Any]
    stats: S

    def to_json(self) -> bytes:
        document = {
            "name": self.name,
            "unit": self.unit,
            "files": [asdict(f) for f in self.files],
            "settings": self.settings,
            "stats": asdict(self.stats),  # type: ignore[call-overload]
        }
        return (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, stats_type: type[S]) -> DoneRecord[S] | None:
        """The record in ``data``, or None when it is not one (a damaged record counts as not done)."""
        try:
            document = json.loads(data)
            known = {f.name for f in fields(stats_type)}  # type: ignore[arg-type]
            stats = document["stats"]
            if set(stats) != known:
                return None
            return cls(
                name=str(document["name"]),
                unit=dict(document["unit"]),
                files=tuple(OutputFile(str(f["name"]), int(f["bytes"])) for f in document["files"]),
                settings=dict(document["settings"]),
                stats=stats_type(**stats),
            )
        except (ValueError, KeyError, TypeError):
            return None


class ShardedJob(Generic[S]):
    """A step's units in one work folder (see the module docstring). ``outputs(unit)``: the names of the
    unit's output files in the folder; ``settings``: everything besides the unit's input that decides its
    outputs (recorded; another run's are refused); ``conflict_hint``: what to do about a conflict."""

    def __init__(
        self,
        *,
        step: str,
        folder: Folder,
        units: Sequence[WorkUnit],
        worker: Worker | None,
        settings: dict[str, Any],
        stats_type: type[S],
        outputs: Callable[[WorkUnit], list[str]],
        log: Log,
        conflict_hint: str = "use another --out, or delete the old outputs",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.step = step
        self.folder = folder
        self.units = list(units)
        self.worker = worker
        self.settings = settings
        self.stats_type = stats_type
        self.outputs = outputs
        self.log = log
        self.conflict_hint = conflict_hint
        self.clock = clock
        self.sleep = sleep
        self.done: dict[str, DoneRecord[S]] = {}

    @staticmethod
    def record_name(unit: WorkUnit) -> str:
        return unit.name + DONE_SUFFIX

    def mine(self) -> list[WorkUnit]:
        """This worker's units: ``units[index::count]`` (all of them without a worker)."""
        return self.worker.take(self.units) if self.worker is not None else list(self.units)

    # -- records ------------------------------------------------------------------------------------------
    def read_record(self, unit: WorkUnit) -> DoneRecord[S] | None:
        try:
            data = self.folder.read_bytes(self.record_name(unit))
        except FileNotFoundError:
            return None
        return DoneRecord.from_json(data, self.stats_type)

    def check(self, record: DoneRecord[S], unit: WorkUnit, listing: dict[str, int]) -> bool:
        """Whether a done unit can be kept: True when every output it lists is in the folder with the size
        it records, False when it must be redone. Raises :class:`OutputConflict` when it was made with other
        settings or from another input: those are never mixed, nor silently overwritten."""
        where = self.folder.url()
        if record.settings != self.settings:
            raise OutputConflict(
                f"{where}: {unit.name} was made with other settings ({_difference(record.settings, self.settings)}); "
                f"outputs made differently are never mixed: {self.conflict_hint}"
            )
        if record.unit != unit.describe():
            raise OutputConflict(
                f"{where}: {unit.name} was made from {record.unit}, but the input is now {unit.describe()}: "
                f"the input changed; {self.conflict_hint}"
            )
        expected = {f.name: f.bytes for f in record.files}
        return all(name in expected and listing.get(name) == expected[name] for name in self.outputs(unit))

    def refuse_foreign(self, listing: dict[str, int]) -> None:
        """Records of units outside this plan (other inputs, another --unit-bytes) would make a mixed
        output: refuse before any work."""
        planned = {self.record_name(unit) for unit in self.units}
        foreign = sorted(name for name in listing if name.endswith(DONE_SUFFIX) and name not in planned)
        if foreign:
            raise OutputConflict(
                f"{self.folder.url()} holds {foreign[0]}, which this run's plan does not have (other inputs, or "
                f"another --unit-bytes): {self.conflict_hint}"
            )

    # -- this worker's units --------------------------------------------------------------------------------
    def pending(self) -> list[WorkUnit]:
        """This worker's units that are not done. Every record in the folder is checked first, whoever made
        it, so that a run made differently stops now rather than after hours of work."""
        listing = self.folder.listing()
        self.refuse_foreign(listing)
        for unit in self.units:
            if self.record_name(unit) in listing and (record := self.read_record(unit)) is not None:
                if self.check(record, unit, listing):
                    self.done[unit.name] = record
        return [unit for unit in self.mine() if unit.name not in self.done]

    def clear(self, unit: WorkUnit) -> None:
        """Remove the unit's record (first: it must never vouch for what is rewritten) and whatever an
        interrupted attempt left of its outputs."""
        self.folder.remove(self.record_name(unit))
        self.folder.remove_partial(self.outputs(unit))

    def commit(self, unit: WorkUnit, stats: S) -> DoneRecord[S]:
        """Mark ``unit`` done: its record (the outputs with their sizes as the folder holds them, the
        settings, ``stats``), written last. Call it once every output of the unit is in place."""
        files = []
        for name in self.outputs(unit):
            size = self.folder.size(name)
            if size is None:
                raise JobError(f"{self.folder.url(name)}: an output of {unit.name} is missing at its commit")
            files.append(OutputFile(name, size))
        record = DoneRecord(unit.name, unit.describe(), tuple(files), self.settings, stats)
        self.folder.write_bytes(self.record_name(unit), record.to_json())
        self.done[unit.name] = record
        return record

    # -- worker 0 -----------------------------------------------------------------------------------------
    def wait_for_all(self, *, stall_timeout: float, poll: float = 2.0, missing_hint: str = "") -> list[DoneRecord[S]]:
        """Every unit's record, in unit order, once all are done and whole. Waits as long as some unit gets
        done at least every ``stall_timeout`` seconds, saying so when a unit gets done (and once a minute);
        then raises :class:`UnitsMissing` naming the units still missing and their workers."""
        started = last_progress = self.clock()
        last_line = float("-inf")
        last_done = -1
        total = len(self.units)
        while True:
            listing = self.folder.listing()
            missing = [unit for unit in self.units if self.record_name(unit) not in listing]
            done = total - len(missing)
            now = self.clock()
            if done > last_done:
                last_progress = now
            if not missing or now - last_progress >= stall_timeout:
                break
            if done != last_done or now - last_line >= WAIT_LINE_SECONDS:
                last_line = now
                self.log(
                    f"{self.step}: waiting for the other workers: {done} of {total} units done, "
                    f"{duration(now - started)} so far (missing {self._names(missing)})"
                )
            last_done = done
            self.sleep(max(0.05, min(poll, stall_timeout - (now - last_progress))))
        records: list[DoneRecord[S]] = []
        missing = []
        for unit in self.units:
            record = self.read_record(unit) if self.record_name(unit) in listing else None
            if record is None or not self.check(record, unit, listing):
                missing.append(unit)
            else:
                records.append(record)
        if missing:
            raise UnitsMissing(
                f"{self.step}: {len(missing)} of {total} units are not done after waiting {duration(stall_timeout)} "
                f"without progress: {self._names(missing)}. {missing_hint}".rstrip(),
                [unit.name for unit in missing],
            )
        return records

    def _names(self, missing: Sequence[WorkUnit]) -> str:
        order = {unit.name: index for index, unit in enumerate(self.units)}
        count = self.worker.count if self.worker is not None else None
        shown = [
            unit.name + (f" (worker {order[unit.name] % count})" if count and count > 1 else "") for unit in missing[:5]
        ]
        return ", ".join(shown) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")


def _difference(theirs: dict[str, Any], ours: dict[str, Any]) -> str:
    def short(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."

    changed = [
        f"{key}: {short(theirs.get(key))} then, {short(ours.get(key))} now"
        for key in sorted(
            set(ours) | set(theirs), key=lambda k: (k not in ours, list(ours).index(k) if k in ours else 0)
        )
        if theirs.get(key) != ours.get(key)
    ]
    return "; ".join(changed) or "unknown difference"
