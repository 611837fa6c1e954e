"""service.jobs alone (no server): inputs, units that do not depend on the number of workers, documents read
exactly once, bad records named by file and line, worker index resolution, atomic outputs and done records."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import os
import re
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.jobs import (
    RESOURCE_CONFIG_ENV,
    BadRecord,
    CorpusError,
    DocumentReader,
    DoneRecord,
    JobError,
    OutputConflict,
    OutputFile,
    ShardedJob,
    Storage,
    StorageError,
    UnitsMissing,
    Worker,
    find_inputs,
    plan_units,
    resolve_worker,
)
from service.jobs.stores import _ResumingReader
from service.jobs.workers import SAGEMAKER_RESOURCE_CONFIGS


def read_all(units, **options) -> list:
    documents = []
    for unit in units:
        documents.extend(DocumentReader(unit, **options))
    return documents


# -- inputs ----------------------------------------------------------------------------------------------
def test_inputs_from_files_directories_and_globs(tmp_path):
    (tmp_path / "a" / "deep").mkdir(parents=True)
    for name in ("a/x.jsonl", "a/deep/y.txt", "a/z.jsonl.gz", "b.parquet", "a/notes.md", "a/.hidden.jsonl"):
        (tmp_path / name).write_bytes(b"")
    files = find_inputs([str(tmp_path / "a"), str(tmp_path / "*.parquet"), str(tmp_path / "a" / "x.jsonl")])
    assert [(f.name, f.format) for f in files] == [
        ("a/deep/y.txt", "txt"),
        ("a/x.jsonl", "jsonl"),
        ("a/z.jsonl.gz", "jsonl.gz"),
        ("b.parquet", "parquet"),
    ]  # sorted, deduplicated, named relative to the common directory; .md and hidden files not picked up
    assert all(os.path.isabs(f.path) for f in files)
    (tmp_path / "a" / "out").mkdir()
    (tmp_path / "a" / "out" / "x.jsonl.00000.parquet").write_bytes(b"")  # a job's output among its inputs
    kept = find_inputs([str(tmp_path / "a")], exclude=[str(tmp_path / "a" / "out")])
    assert [f.path for f in kept] == [f.path for f in files[:3]]
    recursive = find_inputs([str(tmp_path / "**" / "*.txt")])
    assert [f.name for f in recursive] == ["y.txt"]
    with pytest.raises(CorpusError, match="no input matches"):
        find_inputs([str(tmp_path / "*.csv")])
    with pytest.raises(CorpusError, match="unsupported input format"):
        find_inputs([str(tmp_path / "a" / "notes.md")])


def test_urls_of_a_store_whose_package_is_missing_name_the_extra_and_an_empty_remote_glob_its_pattern():
    import importlib.util

    for url, package, extra in (("gs://corpus/*.jsonl", "gcsfs", "gcs"), ("az://corpus/a.jsonl", "adlfs", "azure")):
        if importlib.util.find_spec(package) is not None:
            continue  # installed here: nothing to name
        named = re.escape(f"{url}: ") + r".*" + re.escape(f"tokenizer-service[{extra}]")
        with pytest.raises(StorageError, match=named):
            find_inputs([url])
    folder = f"memory://empty-{uuid.uuid4().hex}"
    Storage().folder(folder).write_bytes("notes.txt", b"hello\n")
    with pytest.raises(CorpusError, match=re.escape(f"no input matches '{folder}/*.jsonl'")):
        find_inputs([f"{folder}/*.jsonl"])
    assert [f.name for f in find_inputs([f"{folder}/*.txt"])] == ["notes.txt"]


# -- units -----------------------------------------------------------------------------------------------
LINE = st.one_of(
    st.text(alphabet="ab中 \t\r", max_size=30),
    st.just(""),
    st.text(alphabet="x", min_size=50, max_size=400),  # lines longer than small units
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(LINE, max_size=40),
    trailing_newline=st.booleans(),
    crlf=st.booleans(),
    unit_bytes=st.integers(1, 300),
)
def test_byte_ranges_read_every_line_exactly_once(tmp_path, lines, trailing_newline, crlf, unit_bytes):
    ending = "\r\n" if crlf else "\n"
    text = ending.join(line.replace("\r", "") for line in lines) + (ending if trailing_newline and lines else "")
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8", newline="")
    files = find_inputs([str(path)])
    whole = read_all(plan_units(files, unit_bytes=10**9))
    split = read_all(plan_units(files, unit_bytes=unit_bytes))
    assert [(d.text, d.position) for d in split] == [(d.text, d.position) for d in whole]
    assert [d.text for d in whole] == text.split(ending)[: len(whole)] and len(whole) == len(text.splitlines())
    for document in whole:  # position: where the document's line starts
        assert text.encode()[document.position :].decode().startswith(document.text)


def test_units_do_not_depend_on_workers_and_name_their_shards(tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(1000)))
    (tmp_path / "small.jsonl.gz").write_bytes(gzip.compress(b'{"text": "x"}\n' * 5000))
    files = find_inputs([str(tmp_path)])
    units = plan_units(files, unit_bytes=5000)
    assert [u.name for u in units][:2] == ["big.jsonl.00000", "big.jsonl.00001"]
    assert units[-1].name == "small.jsonl.gz.00000"  # gzip: one unit whatever its size
    assert sum(u.weight for u in units) == sum(f.size for f in files)
    assert plan_units(files, unit_bytes=5000) == units  # a pure function of the files
    shares = [Worker(i, 3, "test").take(units) for i in range(3)]
    assert sorted((u for share in shares for u in share), key=units.index) == units
    assert [u.name for u in read_all(units[:0])] == []


def test_parquet_units_are_row_groups(tmp_path):
    path = tmp_path / "rows.parquet"
    table = pa.table({"text": [f"row {i}" for i in range(100)], "label": list(range(100))})
    pq.write_table(table, path, row_group_size=10)
    files = find_inputs([str(path)])
    per_group = plan_units(files, unit_bytes=1)
    assert [(u.start, u.end) for u in per_group] == [(g, g + 1) for g in range(10)]
    metadata = pq.ParquetFile(path).metadata
    sizes = [metadata.row_group(g).total_byte_size for g in range(10)]
    limit = max(sizes) * 3
    grouped = plan_units(files, unit_bytes=limit)
    assert 3 <= len(grouped) <= 5
    assert [u.start for u in grouped[1:]] == [u.end for u in grouped[:-1]] and grouped[-1].end == 10
    for unit, following in itertools.pairwise(grouped):  # as many groups as fit, no more
        assert unit.weight == sum(sizes[unit.start : unit.end]) <= limit < unit.weight + sizes[following.start]
    documents = read_all(grouped, keep_fields=["label"])
    assert [(d.text, d.position, d.fields) for d in documents] == [(f"row {i}", i, (i,)) for i in range(100)]
    with pytest.raises(CorpusError, match="no column 'body'"):
        read_all(grouped, text_field="body")
    with pytest.raises(CorpusError, match="not a string column"):
        read_all(grouped, text_field="label")


# -- records ---------------------------------------------------------------------------------------------
def test_bad_records_are_named_by_file_and_line_even_mid_file(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps({"text": f"fine {i}"}) for i in range(200)]
    lines[150] = '{"text": "unterminated'
    lines[170] = json.dumps({"body": "no text field"})
    lines[180] = json.dumps({"text": 42})
    lines[190] = "[1, 2]"
    lines[195] = json.dumps("a bare string")  # refused with the fix: datasets and datatrove refuse it too
    path.write_text("\n".join(lines) + "\n\n   \n")  # blank lines at the end are not records
    units = plan_units(find_inputs([str(path)]), unit_bytes=1000)
    assert len(units) > 3
    with pytest.raises(BadRecord) as info:
        read_all(units)
    assert info.value.where == f"{path}:151" and "malformed JSON" in str(info.value)

    readers = [DocumentReader(unit, on_bad_record="skip") for unit in units]
    kept = [d for reader in readers for d in reader]
    assert len(kept) == 195
    examples = [e for reader in readers for e in reader.skipped_examples]
    assert sum(r.skipped for r in readers) == 5
    assert examples == [
        f"{path}:151: malformed JSON (Unterminated string starting at: line 1 column 10 (char 9))",
        f"{path}:171: no field 'text' (fields: body)",
        f"{path}:181: field 'text' is a number, not a string",
        f"{path}:191: a JSON list, not an object",
        f'{path}:196: a bare JSON string, not an object: write each line as {{"text": "..."}}; a file of bare '
        f"strings converts with  jq -c '{{\"text\": .}}' IN.jsonl > OUT.jsonl",
    ]


def test_text_details_bom_crlf_utf8_gzip_and_long_lines(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"\xef\xbb\xbffirst\r\n\r\nthird\nbad \xff byte\nlast")
    reader = DocumentReader(plan_units(find_inputs([str(plain)]))[0], on_bad_record="skip")
    assert [d.text for d in reader] == ["first", "", "third", "last"]  # empty lines are empty documents
    assert reader.skipped_examples == [f"{plain}:4: not valid UTF-8 (byte 4 of the line)"]

    packed = tmp_path / "packed.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"text": "a"}\n{"text": "b", "id": 7}\n'))
    documents = read_all(plan_units(find_inputs([str(packed)])), keep_fields=["id"])
    assert [(d.text, d.fields) for d in documents] == [("a", (None,)), ("b", (7,))]

    long = tmp_path / "long.txt"
    long.write_text("short\n" + "y" * 5000 + "\nafter\n")
    reader = DocumentReader(plan_units(find_inputs([str(long)]))[0], on_bad_record="skip", max_record_bytes=100)
    assert [d.text for d in reader] == ["short", "after"]
    assert reader.skipped == 1 and "longer than 100 bytes" in reader.skipped_examples[0]
    with pytest.raises(CorpusError, match="no fields to keep"):
        DocumentReader(plan_units(find_inputs([str(long)]))[0], keep_fields=["id"])


# -- workers ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ((None, None), {}, (0, 1)),
        ((2, 5), {"RANK": "0", "WORLD_SIZE": "2"}, (2, 5)),  # flags win
        ((None, 4), {"JOB_COMPLETION_INDEX": "3"}, (3, 4)),
        ((None, None), {"JOB_COMPLETION_INDEX": "1", "JOB_COMPLETIONS": "3", "RANK": "0", "WORLD_SIZE": "9"}, (1, 3)),
        ((None, None), {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}, (2, 4)),
        (
            (None, None),
            {
                "SLURM_ARRAY_TASK_ID": "7",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MIN": "1",
                "SLURM_ARRAY_TASK_STEP": "2",
            },
            (3, 4),
        ),  # --array=1-7:2
        ((None, None), {"RANK": "1", "WORLD_SIZE": "2", "NODE_INDEX": "0", "NUM_NODES": "1"}, (1, 2)),
        ((None, None), {"NODE_INDEX": "2", "NUM_NODES": "3"}, (2, 3)),
    ],
)
def test_worker_index_resolution(flags, env, expected):
    worker = resolve_worker(*flags, environ=env)
    assert (worker.index, worker.count) == expected
    assert worker.source in worker.describe()


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ((1, None), {}, "--shard-index needs --num-shards"),
        ((None, 3), {}, "--num-shards needs --shard-index"),
        ((None, None), {"JOB_COMPLETION_INDEX": "0"}, "JOB_COMPLETIONS"),
        ((None, None), {"RANK": "1"}, "WORLD_SIZE is not set"),
        ((None, None), {"NODE_INDEX": "x", "NUM_NODES": "2"}, "not an integer"),
        ((3, 3), {}, r"outside \[0, 3\)"),
        (
            (None, None),
            {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_STEP": "3"},
            "not on the array's grid",
        ),
    ],
)
def test_worker_index_mistakes_are_named(flags, env, message):
    with pytest.raises(CorpusError, match=message):
        resolve_worker(*flags, environ=env)


def test_sagemaker_resource_config_gives_the_index_when_nothing_else_does(tmp_path):
    """SageMaker names its instances algo-1 .. algo-N: the index is the place of current_host among them in
    SageMaker's order (algo-10 after algo-9, not after algo-1); any other source wins over the file."""
    hosts = [f"algo-{n}" for n in range(1, 12)]
    config = tmp_path / "resourceconfig.json"
    for current, index in (("algo-1", 0), ("algo-2", 1), ("algo-10", 9), ("algo-11", 10)):
        config.write_text(json.dumps({"current_host": current, "hosts": list(reversed(hosts))}))
        worker = resolve_worker(environ={RESOURCE_CONFIG_ENV: str(config)})
        assert (worker.index, worker.count) == (index, 11) and current in worker.source
    assert resolve_worker(environ={RESOURCE_CONFIG_ENV: str(config), "RANK": "0", "WORLD_SIZE": "2"}).count == 2
    config.write_text(json.dumps({"current_host": "algo-99", "hosts": hosts}))
    with pytest.raises(CorpusError, match="not among hosts"):
        resolve_worker(environ={RESOURCE_CONFIG_ENV: str(config)})
    with pytest.raises(CorpusError, match=r"absent\.json: no such file"):  # named on purpose: never ignored
        resolve_worker(environ={RESOURCE_CONFIG_ENV: str(tmp_path / "absent.json")})


@pytest.mark.parametrize("platform_path", SAGEMAKER_RESOURCE_CONFIGS)
def test_sagemaker_resource_config_is_read_where_processing_and_training_jobs_put_it(tmp_path, platform_path):
    """A Processing job's container has it under /opt/ml/config/, a Training job's under /opt/ml/input/config/:
    each host of either finds its own place (with the config at one place only, every host once took itself
    for the single worker, counted every unit and wrote the final outputs)."""
    assert resolve_worker(environ={}, root=tmp_path).describe() == "worker 0 of 1 (no index given: a single worker)"
    config = tmp_path / platform_path.lstrip("/")
    config.parent.mkdir(parents=True)
    for index, host in enumerate(("algo-1", "algo-2")):
        config.write_text(json.dumps({"current_host": host, "hosts": ["algo-2", "algo-1"]}))
        worker = resolve_worker(environ={}, root=tmp_path)
        assert worker.describe() == f"worker {index} of 2 (SageMaker {host} of algo-1, algo-2)"


@pytest.mark.parametrize(
    ("configs", "env", "message"),
    [
        ({0: "{not json"}, {}, "not a SageMaker resource config"),
        ({1: json.dumps({"current_host": "algo-1"})}, {}, "not a SageMaker resource config"),
        ({1: json.dumps({"current_host": "algo-1", "hosts": "algo-1,algo-2"})}, {}, "not a SageMaker resource"),
        ({0: None}, {}, "not a SageMaker resource config"),  # a directory where the file should be
        (
            {
                0: json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]}),
                1: json.dumps({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}),
            },
            {},
            "disagree",
        ),
        ({}, {"SM_HOSTS": '["algo-1", "algo-2"]'}, "SM_CURRENT_HOST and SM_HOSTS go together"),
        ({}, {"SM_CURRENT_HOST": "algo-1", "SM_HOSTS": "algo-1,algo-2"}, "not a JSON list of hosts"),
        (
            {1: json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]})},
            {"SM_CURRENT_HOST": "algo-1", "SM_HOSTS": '["algo-1", "algo-2", "algo-3"]'},
            "disagree",
        ),
    ],
)
def test_a_sagemaker_job_whose_description_cannot_be_read_never_runs_as_a_single_worker(
    tmp_path, configs, env, message
):
    """Several hosts each taking itself for the only worker would all write the final outputs: a description
    of the job that is there but unreadable, incomplete or contradicted is an error, not worker 0 of 1."""
    for which, content in configs.items():
        path = tmp_path / SAGEMAKER_RESOURCE_CONFIGS[which].lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir() if content is None else path.write_text(content)
    with pytest.raises(CorpusError, match=message):
        resolve_worker(environ=env, root=tmp_path)


def test_sagemaker_training_toolkit_variables_give_the_index(tmp_path):
    env = {"SM_CURRENT_HOST": "algo-3", "SM_HOSTS": json.dumps([f"algo-{n}" for n in range(10, 0, -1)])}
    assert resolve_worker(environ=env, root=tmp_path).describe() == (
        "worker 2 of 10 (SageMaker algo-3 of algo-1, algo-2, algo-3, algo-4, algo-5, algo-6, algo-7, algo-8, "
        "algo-9, algo-10)"
    )
    config = tmp_path / SAGEMAKER_RESOURCE_CONFIGS[1].lstrip("/")
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps({"current_host": "algo-3", "hosts": json.loads(env["SM_HOSTS"])}))
    assert resolve_worker(environ=env, root=tmp_path).index == 2  # both there, and they agree


# -- storage and the executor ----------------------------------------------------------------------------
@pytest.fixture(params=["local", "memory"])
def folder(request, tmp_path):
    """A local folder, and an object-store prefix (fsspec's in-memory store) behind the same interface."""
    if request.param == "local":
        yield Storage().folder(tmp_path / "work")
        return
    location = f"memory://test-{uuid.uuid4().hex}/work"
    yield Storage().folder(location)
    import fsspec

    fsspec.filesystem("memory").rm(location.removeprefix("memory://").split("/")[0], recursive=True)


def test_outputs_are_whole_or_absent(folder):
    with pytest.raises(RuntimeError), folder.writer("sub/shard.bin") as stream:
        stream.write(b"half")
        raise RuntimeError("died mid-write")
    assert folder.listing() == {}  # nothing, not even a temporary file
    with folder.writer("sub/shard.bin") as stream:
        stream.write(b"whole")
        assert folder.size("sub/shard.bin") is None  # only at the end
    folder.write_bytes("sub/small.json", b"{}")
    assert folder.listing() == {"sub/shard.bin": 5, "sub/small.json": 2}
    assert folder.read_bytes("sub/shard.bin") == b"whole"
    folder.remove("sub/small.json")
    folder.remove("sub/small.json")  # twice: nothing there is fine
    assert list(folder.listing()) == ["sub/shard.bin"]


class DroppingStore:
    """A remote file whose connection drops once, after ``drop_at`` bytes have been served: the file object
    it was read through stays broken (as a dropped connection's does) until it is opened again."""

    def __init__(self, data: bytes, drop_at: int) -> None:
        self.data, self.drop_at, self.opens, self.served = data, drop_at, 0, 0

    def open(self, path, mode, **options):
        self.opens += 1
        store, stream = self, io.BytesIO(self.data)

        class Connection:
            broken = False

            def seek(self, position):
                stream.seek(position)

            def read(self, size):
                if self.broken or (store.served < store.drop_at <= store.served + size and store.opens == 1):
                    self.broken = True
                    raise ConnectionResetError("connection reset by peer")
                chunk = stream.read(size)
                store.served += len(chunk)
                return chunk

            def close(self):
                pass

        return Connection()


def test_a_remote_read_that_drops_resumes_at_the_byte_it_stopped_at():
    data = b"".join(b"line %d\n" % n for n in range(20_000))
    store = DroppingStore(data, drop_at=len(data) // 3)
    reader = io.BufferedReader(
        _ResumingReader(Storage(retry_deadline=30), store, "bucket/key", len(data), "s3://bucket/key"), 4096
    )
    assert reader.read() == data and store.opens == 2  # one reconnection, nothing read twice or skipped


def test_storage_goes_to_counting_processes_whole_but_a_log_that_cannot():
    import pickle

    from service.jobs.progress import log_to_stderr

    options = {"endpoint_url": "http://127.0.0.1:9000"}
    sent = pickle.loads(pickle.dumps(Storage(options, retry_deadline=7, log=log_to_stderr)))
    assert (sent.options, sent.retry_deadline, sent.log) == (options, 7, log_to_stderr)
    assert pickle.loads(pickle.dumps(Storage(log=lambda message: None))).log is None  # a lambda stays here


def test_refusals_stop_at_once_and_failures_are_retried_until_the_deadline():
    storage = Storage(retry_deadline=0.5)
    calls = []

    def refused():
        calls.append(1)
        raise PermissionError("Access Denied")

    with pytest.raises(StorageError, match=r"s3://b/k: the store refused: PermissionError: Access Denied; check the"):
        storage.call("s3://b/k", refused)
    assert len(calls) == 1  # never retried

    def no_bucket():
        raise FileNotFoundError("NoSuchBucket")

    with pytest.raises(StorageError, match=r"s3://absent/k: cannot write there .* does the bucket exist\?"):
        storage.call("s3://absent/k", no_bucket, writing=True)
    with pytest.raises(FileNotFoundError):  # reading: a missing object is the caller's to handle
        storage.call("s3://absent/k", no_bucket)

    lines = []
    flaky = Storage(retry_deadline=0.5, log=lines.append)

    def unreachable():
        calls.append(1)
        raise ConnectionRefusedError("connection refused")

    calls.clear()
    with pytest.raises(StorageError, match=r"s3://b/k: failed after retrying for 0 s \(--retry-deadline\)"):
        flaky.call("s3://b/k", unreachable)
    assert len(calls) > 1
    assert lines[0].startswith("storage: s3://b/k: ConnectionRefusedError: connection refused; retrying")


@dataclass(frozen=True)
class Stats:
    documents: int


def make_job(folder, units, worker=None, settings=None, **options):
    return ShardedJob(
        step="test",
        folder=folder,
        units=units,
        worker=worker,
        settings=settings or {"tokenizer": "sha256:a"},
        stats_type=Stats,
        outputs=lambda unit: [unit.name + ".bin"],
        log=options.pop("log", lambda message: None),
        **options,
    )


def write_unit(job, unit, content=b"tokens"):
    job.clear(unit)
    job.folder.write_bytes(unit.name + ".bin", content)
    return job.commit(unit, Stats(len(content)))


def test_records_vouch_only_for_what_they_list_and_refuse_another_runs_outputs(folder, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a\n" * 100)
    units = plan_units(find_inputs([str(source)]), unit_bytes=50)
    assert len(units) == 4
    job = make_job(folder, units, Worker(0, 2, "test"))
    assert job.pending() == units[0::2]
    record = write_unit(job, units[0])
    assert record.files == (OutputFile("in.txt.00000.bin", 6),) and record.stats == Stats(6)
    assert DoneRecord.from_json(folder.read_bytes("in.txt.00000.done"), Stats) == record
    assert make_job(folder, units, Worker(0, 2, "test")).pending() == [units[2]]
    job.clear(units[2])
    with pytest.raises(JobError, match=r"an output of in\.txt\.00002 is missing at its commit"):
        job.commit(units[2], Stats(0))  # a record is never written before the outputs it lists
    assert "in.txt.00002.done" not in folder.listing()
    folder.write_bytes("in.txt.00000.bin", b"torn")  # another size than its record says: redone
    assert make_job(folder, units, Worker(0, 2, "test")).pending() == units[0::2]
    folder.write_bytes("in.txt.00000.done", b"{not json")  # a damaged record: not done
    assert make_job(folder, units, Worker(0, 2, "test")).pending() == units[0::2]
    write_unit(job, units[0])

    other = make_job(folder, units, Worker(1, 2, "test"), settings={"tokenizer": "sha256:b"})
    with pytest.raises(OutputConflict, match="tokenizer: 'sha256:a' then, 'sha256:b' now"):
        other.pending()  # worker 1 refuses worker 0's record made with another tokenizer
    replanned = plan_units(find_inputs([str(source)]), unit_bytes=100)
    with pytest.raises(OutputConflict, match=r"in\.txt\.00000 was made from"):
        make_job(folder, replanned).pending()
    with pytest.raises(OutputConflict, match="plan does not have"):
        make_job(folder, units[1:]).pending()


def test_worker_0_waits_while_units_get_done_and_names_what_never_came(folder, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a\n" * 100)
    units = plan_units(find_inputs([str(source)]), unit_bytes=50)
    lines = []
    now = [0.0]
    job = make_job(folder, units, Worker(0, 4, "test"), clock=lambda: now[0], log=lines.append)
    polls = []

    def sleep(seconds):  # another worker finishes one unit per poll, then stalls
        now[0] += seconds
        if len(polls) < 2:
            write_unit(job, units[len(polls)])
        polls.append(now[0])

    job.sleep = sleep
    with pytest.raises(UnitsMissing, match=r"2 of 4 units are not done .*in.txt.00002 \(worker 2\), in.txt.00003 "):
        job.wait_for_all(stall_timeout=5, poll=1)
    assert now[0] == 7  # two units came 1 s apart, then 5 s of nothing
    assert len(lines) == 3  # a line when the count changed, not one per poll
    write_unit(job, units[2])
    write_unit(job, units[3])
    folder.write_bytes("in.txt.00003.bin", b"torn")  # its record says 6 bytes: not trusted
    with pytest.raises(UnitsMissing, match=r"1 of 4 units are not done .*in\.txt\.00003"):
        job.wait_for_all(stall_timeout=5, poll=1)
    write_unit(job, units[3])
    assert [r.name for r in job.wait_for_all(stall_timeout=5, poll=1)] == [u.name for u in units]
