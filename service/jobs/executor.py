"""One executor for every sharded job over a corpus, owning the per-worker loop as datatrove's does: a job is a
:class:`Step` (``settings``, a unit's ``outputs``, ``process``, ``finalize``); :func:`run_worker` takes this
worker's units not done (every record in the folder checked first), clears, processes and commits each by its
``.done`` record, written last; worker 0 then waits for every unit and finalizes. A unit is done when its record
exists and every output it lists has the size it records; a record made with other settings, from another input,
or of a unit outside this run's plan is an :class:`~.errors.OutputConflict`, never mixed nor overwritten.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Generic, TypeVar

from .config import JobConfig
from .errors import JobError, OutputConflict, UnitsMissing
from .folders import Folder
from .progress import Log, Progress, duration, human, peak_rss_bytes
from .work_units import WorkUnit
from .workers import Worker

DONE_SUFFIX = ".done"
#: How often worker 0 says it is still waiting when nothing changes (it also says so when a unit gets done).
WAIT_LINE_SECONDS = 60.0
#: How often worker 0 lists the folder while it waits (a tenth of ``--wait`` when that is shorter).
WAIT_POLL_SECONDS = 2.0
#: Settings that say what to do at a bad record, not what a unit's outputs are: a unit done under one is done under
#: another (one done under ``error`` had no bad record; one done under ``skip`` counts and names those it skipped), so
#: a run stopped at a bad record reruns with ``--on-bad-record skip`` and redoes only the units not done.
POLICY_SETTINGS = ("on_bad_record",)

S = TypeVar("S")  # a step's per-unit statistics: a dataclass
R = TypeVar("R")  # what a step's finalize makes (worker 0)


@dataclass(frozen=True)
class OutputFile:
    """One output of a unit, as its record lists it."""

    name: str  # relative to the work folder
    bytes: int


@dataclass(frozen=True)
class DoneRecord(Generic[S]):
    """A unit's ``.done`` record: its ``unit``, ``settings``, output ``files`` with their sizes, and ``stats``."""

    name: str
    unit: dict[str, object]
    files: tuple[OutputFile, ...]
    settings: dict[str, Any]
    stats: S

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), indent=1, ensure_ascii=False) + "\n").encode()

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


@dataclass(kw_only=True, eq=False)
class ShardedJob(Generic[S]):
    """A step's units in one work folder (``outputs``, ``settings``, ``conflict_hint``: as :class:`BaseStep`'s)."""

    step: str
    folder: Folder
    units: Sequence[WorkUnit]
    worker: Worker | None
    settings: dict[str, Any]
    stats_type: type[S]
    outputs: Callable[[WorkUnit], list[str]]
    log: Log
    conflict_hint: str = "use another --out, or delete the old outputs"
    policies: Sequence[str] = POLICY_SETTINGS
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    committed: list[DoneRecord[S]] = field(default_factory=list, init=False)  # the records this process wrote

    def __post_init__(self) -> None:
        self.units = list(self.units)

    @staticmethod
    def record_name(unit: WorkUnit) -> str:
        return unit.name + DONE_SUFFIX

    def mine(self) -> list[WorkUnit]:
        """``units[index::count]`` (all of them without a worker)."""
        return self.worker.take(self.units) if self.worker is not None else list(self.units)

    def done_record(self, unit: WorkUnit, listing: dict[str, int]) -> DoneRecord[S] | None:
        """The unit's record if the unit is done and whole (:meth:`check`), else None."""
        if self.record_name(unit) not in listing:
            return None
        try:
            record = DoneRecord.from_json(self.folder.read_bytes(self.record_name(unit)), self.stats_type)
        except FileNotFoundError:
            return None
        return record if record is not None and self.check(record, unit, listing) else None

    def check(self, record: DoneRecord[S], unit: WorkUnit, listing: dict[str, int]) -> bool:
        """Whether every output ``record`` lists is in the folder with its size (else the unit is redone); an
        :class:`OutputConflict` when it was made with other settings or from another input."""
        where = self.folder.url()
        if _without(record.settings, self.policies) != _without(self.settings, self.policies):
            raise OutputConflict(
                f"{where}: {unit.name} was made {_made_how(record.settings, self.settings)}; outputs made "
                f"differently are never mixed: {self.conflict_hint}"
            )
        if record.unit != unit.describe():
            raise OutputConflict(
                f"{where}: {unit.name} was made from {record.unit}, but the input is now {unit.describe()}: "
                f"the input changed; {self.conflict_hint}"
            )
        expected = {f.name: f.bytes for f in record.files}
        return all(name in expected and listing.get(name) == expected[name] for name in self.outputs(unit))

    def refuse_foreign(self, listing: dict[str, int]) -> None:
        """Refuse, before any work, records of units outside this plan: they would make a mixed output."""
        planned = {self.record_name(unit) for unit in self.units}
        foreign = sorted(name for name in listing if name.endswith(DONE_SUFFIX) and name not in planned)
        if foreign:
            raise OutputConflict(
                f"{self.folder.url()} holds {foreign[0]}, which this run's plan does not have (other inputs, or "
                f"another --unit-bytes): {self.conflict_hint}"
            )

    def pending(self) -> list[WorkUnit]:
        """This worker's units not done. Every record in the folder is checked first, whoever made it, so that a
        run made differently stops now rather than after hours of work."""
        listing = self.folder.listing()
        self.refuse_foreign(listing)
        done = {unit.name for unit in self.units if self.done_record(unit, listing) is not None}
        return [unit for unit in self.mine() if unit.name not in done]

    def clear(self, unit: WorkUnit) -> None:
        """Remove the unit's record (first: it must never vouch for what is rewritten), then its outputs' remains."""
        self.folder.remove(self.record_name(unit))
        self.folder.remove_partial(self.outputs(unit))

    def commit(self, unit: WorkUnit, stats: S) -> DoneRecord[S]:
        """Mark ``unit`` done, once every output is in place: write its record."""
        files = []
        for name in self.outputs(unit):
            size = self.folder.size(name)
            if size is None:
                raise JobError(f"{self.folder.url(name)}: an output of {unit.name} is missing at its commit")
            files.append(OutputFile(name, size))
        record = DoneRecord(unit.name, unit.describe(), tuple(files), self.settings, stats)
        self.folder.write_bytes(self.record_name(unit), record.to_json())
        self.committed.append(record)
        return record

    def wait_for_all(
        self, *, stall_timeout: float, poll: float = WAIT_POLL_SECONDS, missing_hint: str = ""
    ) -> list[DoneRecord[S]]:
        """Every unit's record, in unit order, once all are done and whole. Waits while some unit gets done at
        least every ``stall_timeout`` seconds, saying so (and once a minute), then raises :class:`UnitsMissing`."""
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
        records = [self.done_record(unit, listing) for unit in self.units]
        missing = [unit for unit, record in zip(self.units, records, strict=True) if record is None]
        if missing:
            raise UnitsMissing(
                f"{self.step}: {len(missing)} of {total} units are not done after waiting {duration(stall_timeout)} "
                f"without progress: {self._names(missing)}. {missing_hint}".rstrip(),
                [unit.name for unit in missing],
            )
        return [record for record in records if record is not None]

    def _names(self, missing: Sequence[WorkUnit]) -> str:
        order = {unit.name: index for index, unit in enumerate(self.units)}
        count = self.worker.count if self.worker is not None else None
        shown = [
            unit.name + (f" (worker {order[unit.name] % count})" if count and count > 1 else "") for unit in missing[:5]
        ]
        return ", ".join(shown) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")


class BaseStep(Generic[S, R]):
    """A job but how its units are processed. ``settings``: all besides a unit's input that decides its outputs
    (recorded; another run's are refused); ``stats_type``: a unit's statistics; ``conflict_hint``, ``missing_hint``:
    what to do about a conflict, or when worker 0 gives up; ``name``, ``progress_prefix``, ``counted``: log words."""

    name: str
    stats_type: type[S]
    settings: dict[str, Any]
    conflict_hint: str = "use another --out, or delete the old outputs"
    missing_hint: str = ""
    progress_prefix: str = ""
    counted: str = "tokens"

    def outputs(self, unit: WorkUnit) -> list[str]:
        raise NotImplementedError

    def finalize(self, job: ShardedJob[S], records: list[DoneRecord[S]], waited: float) -> R:
        """Worker 0, once every unit is done: finish the job from the records (in unit order); ``waited``: seconds."""
        raise NotImplementedError


class Step(BaseStep[S, R]):
    """A job whose work is synchronous, run by :func:`run_worker`."""

    def process(self, units: list[WorkUnit], job: ShardedJob[S], progress: Progress) -> None:
        """Write each of ``units`` (not done, cleared) into ``job.folder`` and ``job.commit(unit, stats)`` it."""
        raise NotImplementedError


class AsyncStep(BaseStep[S, R]):
    """A job whose work is a coroutine (requests in flight), run by :func:`arun_worker`."""

    async def process(self, units: list[WorkUnit], job: ShardedJob[S], progress: Progress) -> None:
        raise NotImplementedError


@dataclass
class WorkerReport(Generic[S, R]):
    """What the executor did on this worker: its units, the records it wrote, and what finalize made."""

    worker: Worker
    units: int  # in the whole plan
    mine: int  # this worker's (0 when it only finishes)
    already_done: int = 0
    processed_bytes: int = 0  # the input weight of the units processed
    committed: list[DoneRecord[S]] = field(default_factory=list)
    seconds: float = 0.0  # finding, clearing and processing this worker's units
    peak_rss_bytes: int = 0  # this process's, when its units were processed
    waited: float = 0.0  # worker 0: for every unit
    result: R | None = None  # worker 0: the step's finalize


def run_worker(
    step: Step[S, R],
    *,
    folder: Folder,
    units: Sequence[WorkUnit],
    worker: Worker,
    config: JobConfig,
    log: Log,
    work: bool = True,
    finish: bool | None = None,
) -> WorkerReport[S, R]:
    """Run this worker's part of ``step``; worker 0 (or any, with ``finish``) then waits at most ``wait_seconds``
    without progress (else :class:`UnitsMissing`) and finalizes. ``work=False``: only finish."""
    run = _WorkerRun(step, folder, units, worker, config, log, work)
    if run.todo:
        with closing(run.progress()) as progress:
            step.process(run.todo, run.job, progress)
    return run.finish(finish)


async def arun_worker(
    step: AsyncStep[S, R], *, folder: Folder, units: Sequence[WorkUnit], worker: Worker, config: JobConfig, log: Log
) -> WorkerReport[S, R]:
    """:func:`run_worker` for a step whose work is a coroutine."""
    run = _WorkerRun(step, folder, units, worker, config, log, True)
    if run.todo:
        with closing(run.progress()) as progress:
            await step.process(run.todo, run.job, progress)
    return run.finish(None)


class _WorkerRun(Generic[S, R]):
    """The per-worker loop of :func:`run_worker` and :func:`arun_worker`, around the step's ``process``."""

    def __init__(
        self,
        step: BaseStep[S, R],
        folder: Folder,
        units: Sequence[WorkUnit],
        worker: Worker,
        config: JobConfig,
        log: Log,
        work: bool,
    ) -> None:
        self.started = time.monotonic()
        self.step = step
        self.config = config
        self.job = ShardedJob(
            step=step.name,
            folder=folder,
            units=units,
            worker=worker if work else None,
            settings=step.settings,
            stats_type=step.stats_type,
            outputs=step.outputs,
            log=log,
            conflict_hint=step.conflict_hint,
        )
        self.report: WorkerReport[S, R] = WorkerReport(worker, len(self.job.units), 0)
        self.todo: list[WorkUnit] = []
        if not work:
            self.job.refuse_foreign(folder.listing())  # before the wait: a mixed folder stops the run now
            return
        mine = self.job.mine()
        self.todo = self.job.pending()  # outputs made differently, by any worker, stop the run now
        self.report.mine = len(mine)
        self.report.already_done = len(mine) - len(self.todo)
        self.report.processed_bytes = sum(unit.weight for unit in self.todo)
        total = sum(unit.weight for unit in self.job.units)
        log(
            f"{step.name}: {worker.describe()}: {len(mine)} of {len(self.job.units)} units "
            f"({human(sum(u.weight for u in mine), 'B')} of {human(total, 'B')}), "
            f"{self.report.already_done} done already"
        )
        for unit in self.todo:
            self.job.clear(unit)

    def progress(self) -> Progress:
        return Progress(
            self.report.processed_bytes,
            mode=self.config.progress,
            interval=self.config.log_every,
            prefix=self.step.progress_prefix or self.step.name,
            counted=self.step.counted,
        )

    def finish(self, finish: bool | None) -> WorkerReport[S, R]:
        report = self.report
        report.committed = list(self.job.committed)
        report.seconds = time.monotonic() - self.started
        report.peak_rss_bytes = peak_rss_bytes()
        if not (finish if finish is not None else report.worker.index == 0):
            return report
        waiting = self.config.wait_seconds
        started = time.monotonic()
        records = self.job.wait_for_all(
            stall_timeout=waiting,
            poll=min(WAIT_POLL_SECONDS, max(waiting / 10, 0.1)),
            missing_hint=self.step.missing_hint,
        )
        report.waited = time.monotonic() - started
        report.result = self.step.finalize(self.job, records, report.waited)
        return report


def _without(settings: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {key: value for key, value in settings.items() if key not in names}


def _made_how(theirs: dict[str, Any], ours: dict[str, Any]) -> str:
    """How a record's settings differ from this run's, in words (a fingerprint of an earlier scheme says so)."""
    scheme = "fingerprint_scheme"
    other_scheme = theirs.get(scheme) != ours.get(scheme) and theirs.get("tokenizer") != ours.get("tokenizer")
    if scheme in ours and other_scheme:
        made_by = f"scheme {theirs[scheme]}" if scheme in theirs else "the scheme before chat templates were covered"
        return (
            f"by an earlier tokenizer-service, whose tokenizer fingerprint ({theirs.get('tokenizer')}) is of another "
            f"scheme ({made_by}; this one's is scheme {ours[scheme]}, {ours.get('tokenizer')}, which also covers chat "
            "templates and other inputs): whether it was made with this tokenizer cannot be told"
        )
    return f"with other settings ({_difference(theirs, ours)})"


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
