"""service.corpus alone (no server): inputs, units that do not depend on the number of workers, documents read
exactly once, bad records named by file and line, worker index resolution, atomic outputs and done records."""

from __future__ import annotations

import gzip
import itertools
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.corpus import (
    BadRecord,
    CorpusError,
    DocumentReader,
    Worker,
    atomic_file,
    done_path,
    find_inputs,
    plan_units,
    read_done,
    remove_partial,
    resolve_worker,
    wait_for_done,
    write_done,
)


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
    path.write_text("\n".join(lines) + "\n\n   \n")  # blank lines at the end are not records
    units = plan_units(find_inputs([str(path)]), unit_bytes=1000)
    assert len(units) > 3
    with pytest.raises(BadRecord) as info:
        read_all(units)
    assert info.value.where == f"{path}:151" and "malformed JSON" in str(info.value)

    readers = [DocumentReader(unit, on_bad_record="skip") for unit in units]
    kept = [d for reader in readers for d in reader]
    assert len(kept) == 196
    examples = [e for reader in readers for e in reader.skipped_examples]
    assert sum(r.skipped for r in readers) == 4
    assert examples == [
        f"{path}:151: malformed JSON (Unterminated string starting at: line 1 column 10 (char 9))",
        f"{path}:171: no field 'text' (fields: body)",
        f"{path}:181: field 'text' is a number, not a string",
        f"{path}:191: a JSON list, not an object",
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


# -- completion ------------------------------------------------------------------------------------------
def test_atomic_outputs_and_done_records(tmp_path):
    target = tmp_path / "sub" / "shard.bin"
    with pytest.raises(RuntimeError), atomic_file(target) as stream:
        stream.write(b"half")
        raise RuntimeError("died mid-write")
    assert not target.exists() and list(target.parent.iterdir()) == []  # nothing, not even the temporary
    with atomic_file(target) as stream:
        stream.write(b"whole")
        assert not target.exists()  # only at the end
    assert target.read_bytes() == b"whole"

    base = tmp_path / "sub" / "shard"
    assert read_done(base) is None
    write_done(base, {"documents": 3})
    assert read_done(base) == {"documents": 3} and done_path(base).name == "shard.done"
    done_path(base).write_text("{not json")
    assert read_done(base) is None  # unreadable: not done, redone

    (target.parent / f".{target.name}.partial-12345").write_bytes(b"left by a killed worker")
    remove_partial([target])
    assert list(target.parent.iterdir()) == [done_path(base)]


def test_waiting_for_done_units_gives_up_only_when_nothing_moves(tmp_path):
    bases = [tmp_path / f"u{i}" for i in range(3)]
    now = [0.0]
    calls = []

    def sleep(seconds):  # another worker finishes one unit per poll, then stalls
        now[0] += seconds
        if len(calls) < 2:
            write_done(bases[len(calls)], {})
        calls.append(now[0])

    missing = wait_for_done(bases, stall_timeout=5, poll_interval=1, clock=lambda: now[0], sleep=sleep)
    assert missing == [bases[2]]
    assert now[0] == 7  # two units came 1 s apart, then 5 s of nothing
    assert wait_for_done(bases[:2], stall_timeout=5, clock=lambda: now[0], sleep=sleep) == []
