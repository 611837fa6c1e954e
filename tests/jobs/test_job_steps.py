"""The executor's per-worker loop (``service.jobs.run_worker``) with a third job written as one step: what the
executor owns -- skipping done units, clearing what an interrupted attempt left, the records, worker 0's wait
and finalize, refusing another run's outputs -- holds for any step, not only for ``pretokenize`` and ``train``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from service.jobs import (
    DocumentReader,
    DoneRecord,
    JobConfig,
    OutputConflict,
    ShardedJob,
    Step,
    Storage,
    UnitsMissing,
    Worker,
    WorkUnit,
    run_worker,
)
from service.jobs.progress import Progress


@dataclass(frozen=True)
class Lines:
    documents: int


class CountLines(Step[Lines, int]):
    """A third job in a few lines: each unit's document count in a file; worker 0 sums them."""

    name = "lines"
    stats_type = Lines

    def __init__(self, storage: Storage, settings: dict[str, object] | None = None) -> None:
        self.storage = storage
        self.settings = settings or {"what": "lines"}
        self.processed: list[str] = []

    def outputs(self, unit: WorkUnit) -> list[str]:
        return [unit.name + ".lines"]

    def process(self, units: list[WorkUnit], job: ShardedJob[Lines], progress: Progress) -> None:
        for unit in units:
            self.processed.append(unit.name)
            documents = sum(1 for _ in DocumentReader(unit, storage=self.storage))
            job.folder.write_bytes(unit.name + ".lines", json.dumps(documents).encode())
            job.commit(unit, Lines(documents))

    def finalize(self, job: ShardedJob[Lines], records: list[DoneRecord[Lines]], waited: float) -> int:
        return sum(record.stats.documents for record in records)


@pytest.fixture
def plan(tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("".join(f"line {i}\n" for i in range(300)))
    config = JobConfig(inputs=(str(source),), out=tmp_path / "out", unit_bytes=500, wait_seconds=0.3, progress="none")
    storage = config.storage()
    _, units, _ = config.plan(storage)
    assert len(units) > 4
    return config, storage, units


def run(plan, index, count=2, step=None, **options):
    config, storage, units = plan
    step = step or CountLines(storage)
    report = run_worker(
        step,
        folder=storage.folder(config.out_location),
        units=units,
        worker=Worker(index, count, "test"),
        config=config,
        log=lambda message: None,
        **options,
    )
    return step, report


def test_each_worker_processes_its_undone_units_and_worker_0_finishes_from_every_record(plan):
    _, _, units = plan
    with pytest.raises(UnitsMissing) as missing:  # worker 0 alone: its own units done, worker 1's missing
        run(plan, 0)
    assert missing.value.missing == [unit.name for unit in units[1::2]]
    step, report = run(plan, 1)
    assert step.processed == [unit.name for unit in units[1::2]] and report.result is None
    assert report.mine == len(units[1::2]) and len(report.committed) == report.mine
    step, report = run(plan, 0)  # a rerun: only the finishing is left
    assert step.processed == [] and report.already_done == report.mine and report.committed == []
    assert report.result == 300  # every line, once


def test_an_unfinished_unit_is_cleared_and_redone_and_only_it(plan):
    config, storage, units = plan
    run(plan, 0, count=1)
    folder = storage.folder(config.out_location)
    folder.remove(units[2].name + ".done")  # interrupted after its output, before its record
    folder.write_bytes(units[2].name + ".lines", b"half")
    step, report = run(plan, 0, count=1)
    assert step.processed == [units[2].name] and report.result == 300
    assert folder.read_bytes(units[2].name + ".lines") != b"half"


def test_another_runs_outputs_are_refused_before_any_work_and_by_a_run_that_only_finishes(plan):
    _, storage, _ = plan
    run(plan, 0, count=1)
    other = CountLines(storage, settings={"what": "words"})
    with pytest.raises(OutputConflict, match="other settings"):
        run(plan, 0, count=1, step=other)
    assert other.processed == []
    with pytest.raises(OutputConflict, match="other settings"):
        run(plan, 0, count=1, step=CountLines(storage, settings={"what": "words"}), work=False, finish=True)
    step, report = run(plan, 3, count=4, work=False, finish=True)  # e.g. train --phase merge
    assert step.processed == [] and report.result == 300


@pytest.mark.parametrize("command", ["pretokenize", "train"])
def test_a_jobs_flags_are_its_config_fields_with_their_defaults(command, monkeypatch):
    import importlib
    from dataclasses import MISSING, fields

    from service.jobs import cli as jobcli
    from service.jobs.flags import FLAG
    from service.jobs.stores import STORAGE_OPTIONS_ENV

    monkeypatch.delenv(STORAGE_OPTIONS_ENV, raising=False)
    module = importlib.import_module(f"service.{'training' if command == 'train' else command}.cli")
    config_type = module.TrainConfig if command == "train" else module.PretokenizeConfig
    required = {"train": {"model": "bpe", "vocab_size": 100}, "pretokenize": {}}[command]
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in required.items()]
    parser = module.build_parser(command)
    config = jobcli.parse(parser, ["in.txt", "--out", "o", *flags], config_type)
    assert config == config_type(inputs=("in.txt",), out="o", **required) and config.storage_options == {}
    actions = {action.dest: action for action in parser._actions}
    declared = [item for item in fields(config_type) if FLAG in item.metadata]
    assert len(declared) > 20 and {item.name for item in declared} <= set(actions)
    for item in declared:  # the help shows the field's own default, whatever it is
        if item.default not in (MISSING, None, False, True, ()) and item.name not in required:
            shown = item.metadata[FLAG].shown(item.default)
            assert f"(default {shown})" in " ".join(actions[item.name].help.split()), item.name
