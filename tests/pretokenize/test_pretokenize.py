"""``tokenizer-service pretokenize`` against real servers: exact ids on three tokenizer families in both
formats, N workers writing the bytes of one, reruns after a kill or an outage, bad records, refusals,
progress, and bounded memory. Shards are read back here with numpy and pyarrow directly, not through the
package's own readers."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from service.jobs import CorpusError
from service.pretokenize import PretokenizeConfig, pretokenize, read_manifest
from testkit import corpora
from testkit.families import FAMILIES
from testkit.gates import wait_until
from testkit.jobs import Tail
from testkit.servers import REPO, ServerProcess, free_port
from testkit.shards import input_documents, shard_documents

UNIT = "48K"


def test_an_outage_is_said_at_once_counted_down_and_past_the_deadline_names_the_url():
    """The service's failures as every request in flight reports them to the client's retry log: the first is said
    at once (which URL, how), then a line every 10 s however many requests fail, a line when it answers again; a
    busy service is said only once it has stayed busy 10 s; past the deadline, one error naming the URL and the
    cause."""
    from service.client import ConnectError, RetryLog, ServerBusy

    now, lines = [100.0], []
    said = RetryLog(lines.append, prefix="pretokenize", flag="--retry-deadline", clock=lambda: now[0])
    for _ in range(5):  # five requests in flight fail within the same second
        said.failed("http://tok:8000", ConnectError("cannot connect"), started=98.0, deadline=30)
    assert lines == [
        "pretokenize: the service at http://tok:8000 fails (ConnectError: cannot connect); retrying for 28 s more "
        "(--retry-deadline)"
    ]
    now[0] = 109.0
    said.failed("http://tok:8000", ConnectError("cannot connect"), started=107.0, deadline=30)
    assert len(lines) == 1  # 9 s since the last line
    now[0] = 111.0
    said.failed("http://tok:8000", ConnectError("cannot connect"), started=109.0, deadline=30)
    assert lines[-1].startswith("pretokenize: the service at http://tok:8000 still fails") and "17 s more" in lines[-1]
    said.answered()
    assert lines[-1] == "pretokenize: the service answers again after 13 s" and len(lines) == 3
    said.answered()
    assert len(lines) == 3

    busy = ServerBusy("429 overloaded", retry_after=3)
    said.failed("http://tok:8000", busy, started=110.0, deadline=30)
    assert len(lines) == 3  # busy for a second: not an outage worth a line
    now[0] = 121.0
    said.failed("http://tok:8000", busy, started=120.0, deadline=30)
    assert "fails (ServerBusy: 429 overloaded)" in lines[-1] or "still fails (ServerBusy" in lines[-1]
    now[0] = 141.0
    assert said.gave_up(["http://tok:8000"], 30, "ServerBusy: 429 overloaded").startswith(
        "the service at http://tok:8000 failed after retrying for 31 s (--retry-deadline 30); last error: ServerBusy"
    )
    assert pickle.loads(pickle.dumps(said)).since == said.since  # it travels with a client; a log that cannot
    assert pickle.loads(pickle.dumps(RetryLog(lambda line: None, prefix="p", flag="f"))).log is None  # stays here


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    """Four inputs of every format, ~400 KB in all: about twenty units of 48 KiB."""
    root = tmp_path_factory.mktemp("corpus")
    corpora.write_jsonl(root / "a_news.jsonl", 200_000, seed=1)
    corpora.write_text(root / "b_notes.txt", 300, seed=2)
    corpora.write_jsonl(root / "c_reviews.jsonl.gz", 60_000, seed=3)
    corpora.write_parquet(root / "d_table.parquet", 500, seed=4, row_group_size=100)
    return root


def tree(out: Path) -> dict[str, bytes]:
    """Every file under ``out`` (temporary ones included), by relative path."""
    return {path.relative_to(out).as_posix(): path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", "pretokenize", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "service", "pretokenize", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run(config: PretokenizeConfig):
    return asyncio.run(pretokenize(config, log=lambda message: None))


# -- exactness -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_parquet_ids_positions_and_fields_equal_in_process(servers, reference_tokenizers, corpus_dir, tmp_path, family):
    names = ["a_news.jsonl", "c_reviews.jsonl.gz", "d_table.parquet"]
    config = PretokenizeConfig(
        inputs=tuple(str(corpus_dir / name) for name in names),
        out=tmp_path / "out",
        url=servers[family].url,
        keep_fields=("id", "label"),
        unit_bytes=48 * 1024,
        progress="none",
    )
    summary = run(config)
    assert summary.manifest is not None and summary.written > 3
    expected = input_documents(corpus_dir, names)
    ids = reference_tokenizers[family]([text for text, _ in expected])["input_ids"]
    written = shard_documents(tmp_path / "out")
    assert len(written) == len(expected)
    for (theirs, (text, fields)), (ours, columns) in zip(zip(ids, expected, strict=True), written, strict=True):
        assert ours == theirs, text
        assert (columns["id"], columns["label"]) == (fields["id"], fields["label"])
    manifest = read_manifest(tmp_path / "out")
    assert manifest.data["tokenizer"]["fingerprint"] == reference_fingerprint(servers[family].url)
    assert manifest.dtype == ("uint16" if len(reference_tokenizers[family]) <= 65536 else "uint32")
    table = pq.read_table(manifest.shards[0].files[0])
    assert str(table.schema.field("input_ids").type) == f"list<element: {manifest.dtype}>"
    first = table.to_pylist()[0]  # position: where the document's line starts in its file
    with open(corpus_dir / "a_news.jsonl", "rb") as f:
        f.seek(first["position"])
        assert json.loads(f.readline())["id"] == first["id"]


def reference_fingerprint(url: str) -> str:
    from service.client import TokenizerClient

    return TokenizerClient(url).info()["fingerprint"]


@pytest.mark.parametrize("family", FAMILIES)
def test_flat_ids_with_options_and_eos_equal_in_process(servers, reference_tokenizers, corpus_dir, tmp_path, family):
    reference = reference_tokenizers[family]
    eos = reference.eos_token_id if reference.eos_token_id is not None else reference.sep_token_id
    config = PretokenizeConfig(
        inputs=(str(corpus_dir),),
        out=tmp_path / "out",
        url=servers[family].url,
        output_format="flat",
        add_special_tokens=False,
        truncation=True,
        max_length=48,
        append_eos=True,
        eos_token_id=None if reference.eos_token_id is not None else eos,
        unit_bytes=48 * 1024,
        progress="none",
    )
    run(config)
    expected = input_documents(corpus_dir, sorted(p.name for p in corpus_dir.iterdir()))
    options = {"add_special_tokens": False, "truncation": True, "max_length": 48}
    theirs = [[*ids, eos] for ids in reference([text for text, _ in expected], **options)["input_ids"]]
    assert [ids for ids, _ in shard_documents(tmp_path / "out")] == theirs
    manifest = read_manifest(tmp_path / "out")
    assert manifest.data["settings"]["eos_token_id"] == eos and manifest.tokens == sum(map(len, theirs))
    assert {Path(path).suffix for shard in manifest.shards for path in shard.files} == {".ds", ".index", ".metadata"}


# -- workers and reruns ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def reference_run(servers, corpus_dir, tmp_path_factory) -> tuple[list[str], dict[str, bytes]]:
    """One worker over the whole corpus (flat format): the bytes every other way of running must give."""
    out = tmp_path_factory.mktemp("reference") / "out"
    args = [str(corpus_dir), "--out", str(out), "--url", servers["wordpiece_default"].url, "--format", "flat"]
    args += ["--unit-bytes", UNIT, "--append-eos", "--eos-id", "3", "--concurrency", "2", "--request-texts", "16"]
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert "worker 0 of 1 (no index given: a single worker)" in done.stderr
    return args, tree(out)


def with_out(args: list[str], out: Path) -> list[str]:
    args = list(args)
    args[args.index("--out") + 1] = str(out)
    return args


def test_three_workers_write_the_bytes_of_one(reference_run, tmp_path):
    """Worker 0 alone first: it does its units, waits --wait seconds for units that never come, and exits 3
    naming them and their workers (no manifest). Then the three workers: the bytes of one."""
    args, expected = reference_run
    out = tmp_path / "out"
    alone = cli(*with_out(args, out), "--shard-index", "0", "--num-shards", "3", "--wait", "1")
    assert alone.returncode == 3, alone.stderr
    missing = r"units are not done after waiting 1s without progress: \S+ \(worker 1\), \S+ \(worker 2\)"
    assert re.search(missing, alone.stderr), alone.stderr
    assert "No manifest yet" in alone.stderr and not (out / "manifest.json").exists()
    workers = [
        start_cli(*with_out(args, out), "--shard-index", "0", "--num-shards", "3", "--wait", "120"),
        start_cli(*with_out(args, out), env={"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}),
        start_cli(*with_out(args, out), env={"JOB_COMPLETION_INDEX": "2", "JOB_COMPLETIONS": "3"}),
    ]
    results = [worker.communicate(timeout=240) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0], [err for _, err in results]
    assert "worker 0 of 3 (--shard-index/--num-shards)" in results[0][1]
    assert "worker 1 of 3 (SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT)" in results[1][1]
    assert "worker 2 of 3 (JOB_COMPLETION_INDEX, JOB_COMPLETIONS)" in results[2][1]
    assert "every shard is done" in results[0][1] and "every shard is done" not in results[1][1]
    assert tree(out) == expected  # every shard, every .done record, the manifest: byte for byte


@pytest.mark.slow
def test_parquet_shards_depend_on_neither_workers_nor_request_sizes(servers, corpus_dir, tmp_path):
    names = [str(corpus_dir / name) for name in ("a_news.jsonl", "d_table.parquet")]
    url = servers["bytelevel_bpe"].url
    common = [*names, "--url", url, "--unit-bytes", UNIT, "--keep-field", "label"]
    other_name = url.replace("127.0.0.1", "localhost")  # a second URL (the same server): requests spread over both
    one = cli(
        *common, "--url", other_name, "--out", str(tmp_path / "one"), "--request-texts", "7", "--concurrency", "3"
    )
    assert one.returncode == 0, one.stderr
    assert f"{url}, {other_name}: tokenizer" in one.stderr
    workers = [
        start_cli(*common, "--out", str(tmp_path / "three"), env={"RANK": str(rank), "WORLD_SIZE": "3"})
        for rank in range(3)
    ]
    errors = [worker.communicate(timeout=240)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0], errors
    assert tree(tmp_path / "three") == tree(tmp_path / "one")


def test_a_killed_worker_reruns_to_the_same_bytes(reference_run, tmp_path):
    args, expected = reference_run
    out = tmp_path / "out"
    worker = start_cli(*with_out(args, out), "--concurrency", "1")
    wait_until(lambda: any(out.rglob("*.done")), timeout=120, what="a first shard")
    os.kill(worker.pid, signal.SIGKILL)
    worker.communicate(timeout=30)
    assert len(list(out.rglob("*.done"))) < sum(name.endswith(".done") for name in expected), "finished too early"
    assert not (out / "manifest.json").exists()
    rerun = cli(*with_out(args, out))
    assert rerun.returncode == 0, rerun.stderr
    assert "already" in rerun.stderr
    assert tree(out) == expected


@pytest.mark.slow
def test_service_restart_is_ridden_out_a_dead_service_fails_and_the_rerun_finishes(reference_run, tmp_path):
    """Two workers lose the service mid-run (it is killed while they are paused with units left to do).
    Each says at once which URL failed and how, then counts down. The one with a short retry deadline
    fails, naming the service, leaving its done shards and no partial file; the other retries until the
    service is back on the same address, says so, and finishes. The failed one's rerun finishes too. Both
    give the reference bytes."""
    args, expected = reference_run
    port = free_port()
    server = ServerProcess(port=port, log_path=tmp_path / "server.log").start()
    url = server.url
    impatient, patient = tmp_path / "impatient", tmp_path / "patient"

    def worker_args(out: Path) -> list[str]:
        run_args = with_out(args, out)
        run_args[run_args.index("--url") + 1] = url
        return [*run_args, "--concurrency", "1"]

    try:
        workers = {
            impatient: start_cli(*worker_args(impatient), "--retry-deadline", "3"),
            patient: start_cli(*worker_args(patient), "--retry-deadline", "120"),
        }
        tail = Tail(workers[patient])
        for out, worker in workers.items():
            wait_until(lambda out=out: any(out.rglob("*.done")), timeout=120, what="a first shard")
            os.kill(worker.pid, signal.SIGSTOP)
        done_before = len(list(impatient.rglob("*.done")))
        server.stop(signal.SIGKILL)  # a crash, with both workers mid-run
        for worker in workers.values():
            os.kill(worker.pid, signal.SIGCONT)

        _, stderr = workers[impatient].communicate(timeout=120)
        assert workers[impatient].returncode == 1, stderr
        assert f"the service at {url} fails (ConnectError: " in stderr, stderr  # at once: which URL, and how
        assert f"the service at {url} failed after retrying" in stderr and "--retry-deadline 3" in stderr, stderr
        assert len(list(impatient.rglob("*.done"))) >= done_before  # done shards stay done
        assert not (impatient / "manifest.json").exists()
        assert not [p for p in impatient.rglob(".*") if ".partial-" in p.name]  # the shard in progress left nothing

        # the patient one says so while the service is still down, and counts down
        wait_until(lambda: f"the service at {url} fails" in tail.text(), timeout=30, what="the outage said")
        assert re.search(r"retrying for \d+ s more \(--retry-deadline\)", tail.text()), tail.text()
        server = ServerProcess(port=port, log_path=tmp_path / "server.log").start()  # back, same address
        assert workers[patient].wait(240) == 0, tail.rest()
        assert "the service answers again after" in tail.rest()
        assert tree(patient) == expected
        rerun = cli(*worker_args(impatient))
        assert rerun.returncode == 0, rerun.stderr
        assert tree(impatient) == expected
    finally:
        for worker in workers.values():
            if worker.poll() is None:
                os.kill(worker.pid, signal.SIGKILL)
                worker.communicate()
        server.stop()


# -- bad input and refusals ------------------------------------------------------------------------------
def test_bad_records_stop_the_run_naming_file_and_line_or_are_counted(servers, tmp_path):
    source = tmp_path / "in" / "bad.jsonl"
    source.parent.mkdir()
    lines = [json.dumps({"text": f"document {i}"}) for i in range(50)]
    lines[20] = '{"text": "broken'
    lines[30] = json.dumps({"text": None})
    lines[40] = json.dumps({"text": ""})  # an empty document is a document
    source.write_text("\n".join(lines) + "\n")
    url = servers["wordpiece_default"].url
    failed = cli(str(source), "--out", str(tmp_path / "strict"), "--url", url, "--format", "flat")
    assert failed.returncode == 1
    assert f"{source}:21: malformed JSON" in failed.stderr
    assert not list((tmp_path / "strict").rglob("*.done"))

    skipped = cli(
        str(source), "--out", str(tmp_path / "lenient"), "--url", url, "--format", "flat", "--on-bad-record", "skip"
    )
    assert skipped.returncode == 0, skipped.stderr
    manifest = read_manifest(tmp_path / "lenient")
    assert manifest.data["totals"]["skipped"] == 2 and manifest.documents == 48
    record = json.loads((tmp_path / "lenient" / "bad.jsonl.00000.done").read_text())
    assert record["stats"]["skipped"] == 2
    assert record["stats"]["skipped_examples"] == [
        f"{source}:21: malformed JSON (Unterminated string starting at: line 1 column 10 (char 9))",
        f"{source}:31: field 'text' is null, not a string",
    ]


def test_a_bad_record_names_the_flag_keeps_done_units_and_the_skipping_rerun_names_it(servers, tmp_path):
    """Defect (issue 42): one malformed line in the 2nd of two files stopped the worker without naming
    --on-bad-record; the 1st file's shard, read whole before it, was never committed (no output folder, a rerun
    started from zero); with --on-bad-record skip the console said "1 records skipped" and where only inside a
    .done record. Now the error names the flag and what it does, the 1st unit is done, and the rerun with
    --on-bad-record skip redoes only the 2nd unit, naming the skipped record's file:line on the console."""
    inputs = tmp_path / "badcorpus"
    inputs.mkdir()
    for number in range(2):
        lines = [json.dumps({"text": f"part {number} document {i}"}) for i in range(200)]
        if number == 1:
            lines[120] = '{"text": "broken" "x"}'
        (inputs / f"part-{number}.jsonl").write_text("\n".join(lines) + "\n")
    bad = inputs / "part-1.jsonl"
    out = tmp_path / "badtokens"
    args = [str(inputs), "--out", str(out), "--url", servers["wordpiece_default"].url, "--format", "flat"]

    failed = cli(*args, "--progress", "none")
    assert failed.returncode == 1, failed.stderr
    error = failed.stderr.strip().splitlines()[-1]
    assert error.startswith(f"tokenizer-service pretokenize: error: {bad}:121: malformed JSON ("), error
    assert "--on-bad-record skip" in error, error
    first_record = out / "part-0.jsonl.00000.done"
    assert first_record.exists(), sorted(p.name for p in out.iterdir()) if out.exists() else "no output folder"
    assert not (out / "part-1.jsonl.00000.done").exists()
    first_done = first_record.stat().st_mtime_ns

    rerun = cli(*args, "--on-bad-record", "skip", "--progress", "none")
    assert rerun.returncode == 0, rerun.stderr
    assert first_record.stat().st_mtime_ns == first_done  # done, not redone
    assert "1 shard written, 1 already done" in rerun.stderr, rerun.stderr
    skipped = [line for line in rerun.stderr.splitlines() if "1 record skipped" in line]
    assert skipped and all(f"{bad}:121: malformed JSON" in line for line in skipped), rerun.stderr
    assert "1 records" not in rerun.stderr and "1 shards" not in rerun.stderr, rerun.stderr
    summary = rerun.stderr.strip().splitlines()[-1]  # the closing summary names it too
    assert summary.startswith("pretokenize: ") and f"{bad}:121" in summary, summary
    assert read_manifest(out).data["totals"]["skipped"] == 1


def test_a_document_over_the_server_limit_is_named_never_truncated(servers, tmp_path):
    source = tmp_path / "long.txt"
    limit = 1_000_000  # the test servers' --max-text-chars
    source.write_text("short\n" + "x" * (limit + 1) + "\nshort again\n")
    url = servers["wordpiece_default"].url
    failed = cli(str(source), "--out", str(tmp_path / "a"), "--url", url, "--format", "flat")
    assert failed.returncode == 1
    assert f"{source}:2: the document has {limit + 1:,} characters, over the service's max_text_chars={limit:,}" in (
        failed.stderr
    )
    skipped = cli(
        str(source), "--out", str(tmp_path / "b"), "--url", url, "--format", "flat", "--on-bad-record", "skip"
    )
    assert skipped.returncode == 0, skipped.stderr
    manifest = read_manifest(tmp_path / "b")
    assert manifest.documents == 2 and manifest.data["totals"]["skipped"] == 1


def test_other_tokenizers_settings_or_plans_are_refused_never_mixed(servers, corpus_dir, tmp_path):
    source = str(corpus_dir / "b_notes.txt")
    out = tmp_path / "out"
    base = [source, "--out", str(out), "--format", "flat", "--unit-bytes", UNIT]
    first = cli(*base, "--url", servers["wordpiece_default"].url)
    assert first.returncode == 0, first.stderr
    before = tree(out)

    other_tokenizer = cli(*base, "--url", servers["bytelevel_bpe"].url)
    assert other_tokenizer.returncode == 1
    assert (
        "never mixed" in other_tokenizer.stderr
        and reference_fingerprint(servers["bytelevel_bpe"].url) in other_tokenizer.stderr
    )
    other_settings = cli(*base, "--url", servers["wordpiece_default"].url, "--no-add-special-tokens")
    assert other_settings.returncode == 1 and "other settings" in other_settings.stderr
    assert "add_special_tokens" in other_settings.stderr
    other_unit_size = cli(*[a if a != UNIT else "16K" for a in base], "--url", servers["wordpiece_default"].url)
    assert other_unit_size.returncode == 1 and "unit_bytes: 49152 then, 16384 now" in other_unit_size.stderr
    other_inputs = cli(*base[1:], str(corpus_dir / "a_news.jsonl"), "--url", servers["wordpiece_default"].url)
    assert other_inputs.returncode == 1 and "plan does not have" in other_inputs.stderr
    assert tree(out) == before  # nothing touched

    other = "sha256:" + "0" * 12  # a prefix, as serve logs it
    pinned = cli(*base, "--url", servers["wordpiece_default"].url, "--expected-fingerprint", other)
    assert pinned.returncode == 1 and f"pinned to expected_fingerprint={other}" in pinned.stderr
    malformed = cli(*base, "--url", servers["wordpiece_default"].url, "--expected-fingerprint", "sha256:other")
    assert malformed.returncode == 1 and "is not a fingerprint" in malformed.stderr


def test_arguments_are_checked_before_any_work(servers, tmp_path):
    url = servers["wordpiece_default"].url
    missing = cli(str(tmp_path / "nothing*.jsonl"), "--out", str(tmp_path / "o"), "--url", url)
    assert missing.returncode == 1 and "no input matches" in missing.stderr
    (tmp_path / "x.txt").write_text("hello\n")
    flat_fields = cli(str(tmp_path / "x.txt"), "--out", str(tmp_path / "o"), "--format", "flat", "--keep-field", "id")
    assert flat_fields.returncode == 2 and "--format parquet" in flat_fields.stderr
    no_eos = cli(str(tmp_path / "x.txt"), "--out", str(tmp_path / "o"), "--url", url, "--append-eos")
    assert no_eos.returncode == 1 and "has no eos_token" in no_eos.stderr and "--eos-id" in no_eos.stderr
    half = cli(str(tmp_path / "x.txt"), "--out", str(tmp_path / "o"), "--url", url, env={"RANK": "1"})
    assert half.returncode == 1 and "WORLD_SIZE is not set" in half.stderr
    # A URL that has never answered is a wrong URL, not an outage: one line naming it and why, at once
    # (defect: retried for --retry-deadline, 300 s by default). An outage after first contact is retried:
    # test_service_restart_is_ridden_out_a_dead_service_fails_and_the_rerun_finishes.
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for wrong_url, cause in [
        (dead, "refused"),
        ("http://tok.invalid:8000", "tok.invalid"),  # a name that never resolves (RFC 2606)
        (url.replace("http://", "https://"), "SSL"),  # TLS against the plain-HTTP server
    ]:
        started = time.monotonic()
        unreachable = cli(str(tmp_path / "x.txt"), "--out", str(tmp_path / "o"), "--url", wrong_url)
        assert time.monotonic() - started < 60, "a URL that never answered should fail at once, not in 300 s"
        assert unreachable.returncode == 1, unreachable.stderr
        error = unreachable.stderr.strip().splitlines()[-1]
        assert error.startswith(f"tokenizer-service pretokenize: error: GET /info: {wrong_url} has never answered")
        assert cause in error and "retrying" not in unreachable.stderr, unreachable.stderr
    wrong = cli(str(tmp_path / "x.txt"), "--out", str(tmp_path / "o"), "--url", url + "/not-the-service")
    assert wrong.returncode == 1 and f"{url}/not-the-service/info" in wrong.stderr and "404" in wrong.stderr
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_an_output_folder_that_cannot_be_one_is_refused_in_words_before_any_work(servers, tmp_path):
    """Defect: `pretokenize --out afile` (an existing file) printed its start-up lines, asked the service, then
    died on `[Errno 20] Not a directory: 'afile/part-0.jsonl.00000.done'`. Now one line, before the service
    is asked: what --out is, and what to do."""
    (tmp_path / "x.txt").write_text("hello\n")
    (tmp_path / "afile").write_text("not a folder\n")
    url = servers["wordpiece_default"].url
    for out, wrong in [("afile", "afile is a file"), ("afile/tokens", "afile is a file")]:
        refused = cli(str(tmp_path / "x.txt"), "--out", str(tmp_path / out), "--url", url)
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.count("\n") == 1, refused.stderr  # one line: no start-up lines before it
        line = refused.stderr.strip()
        assert line.startswith(f"tokenizer-service pretokenize: error: --out {tmp_path / out}: "), line
        assert f"{tmp_path / wrong}, not a folder" in line and "Errno" not in line, line
        assert (tmp_path / "afile").read_text() == "not a folder\n"


def test_an_output_folder_among_the_inputs_is_not_read_back(servers, corpus_dir, tmp_path):
    inputs = tmp_path / "data"
    inputs.mkdir()
    (inputs / "notes.txt").write_bytes((corpus_dir / "b_notes.txt").read_bytes())
    args = [str(inputs), "--out", str(inputs / "tokens"), "--url", servers["wordpiece_default"].url]
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    again = cli(*args)  # its Parquet shards are not inputs now
    assert again.returncode == 0, again.stderr
    assert "1 of 1 units" in again.stderr and "done already" in again.stderr


def test_encode_options_the_service_refuses_are_named_before_any_work(corpus_dir, tmp_path):
    from service.pretokenize import ServedTokenizer, TextsRefused

    class Refusing:  # stands for a service whose tokenizer refuses the options; the runner is under test
        async def facts(self):
            return ServedTokenizer(fingerprint="sha256:x", vocab_size=100, source="stub")

        async def encode(self, texts):
            raise TextsRefused("stride 9 is too large for max_length 4")

        async def aclose(self):
            pass

        def describe(self):
            return "stub"

    config = PretokenizeConfig(inputs=(str(corpus_dir / "b_notes.txt"),), out=tmp_path / "out", progress="none")
    with pytest.raises(CorpusError, match="refuses these encode options: stride 9"):
        asyncio.run(pretokenize(config, encoder=Refusing(), log=lambda message: None))
    assert not list((tmp_path / "out").rglob("*.*"))


# -- progress and memory ---------------------------------------------------------------------------------
def test_progress_is_a_log_line_off_a_terminal_and_a_bar_on_request(servers, corpus_dir, tmp_path):
    url = servers["wordpiece_default"].url
    source = str(corpus_dir / "a_news.jsonl")
    logged = cli(
        source, "--out", str(tmp_path / "a"), "--url", url, "--format", "flat", "--log-every", "0", "--unit-bytes", UNIT
    )
    assert logged.returncode == 0, logged.stderr
    lines = [line for line in logged.stderr.splitlines() if "ETA" in line]
    assert lines and all("docs/s" in line and "tokens/s" in line for line in lines)
    barred = cli(source, "--out", str(tmp_path / "b"), "--url", url, "--format", "flat", "--progress", "bar")
    assert barred.returncode == 0, barred.stderr
    bars = [line for line in barred.stderr.splitlines() if "%|" in line]  # tqdm's lines (\r read as \n)
    assert bars and "100%|" in bars[-1] and "tokens/s" in bars[-1]


@pytest.mark.slow
def test_memory_stays_bounded_on_a_large_input(servers, tmp_path):
    """Peak RSS (VmHWM, which the worker reads from /proc/self/status as it ends) on a 16 MB input exceeds
    that on a tiny one by far less than the input: streaming, a bounded window of requests, no whole file
    (nor all of its tokens) in memory. The full-size case (1 GB, under 500 MB) is in the benchmark."""
    url = servers["wordpiece_default"].url
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    corpora.write_jsonl(small, 20_000, fields=False)
    corpora.write_jsonl(large, 16 * 1024 * 1024, fields=False)

    def peak_rss(source: Path, out: Path) -> float:
        done = cli(str(source), "--out", str(out), "--url", url, "--format", "flat", "--progress", "none")
        assert done.returncode == 0, done.stderr
        return float(re.search(r"peak RSS ([\d.]+) MiB", done.stderr).group(1)) * 2**20

    baseline = peak_rss(small, tmp_path / "small-out")
    peak = peak_rss(large, tmp_path / "large-out")
    assert read_manifest(tmp_path / "large-out").documents > 10_000
    assert peak - baseline < 10 * 2**20 < large.stat().st_size / 1.5, (baseline, peak)


# -- reading back in training ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def parquet_run(servers, corpus_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("parquet") / "out"
    names = ("a_news.jsonl", "c_reviews.jsonl.gz", "d_table.parquet")
    config = PretokenizeConfig(
        inputs=tuple(str(corpus_dir / name) for name in names),
        out=out,
        url=servers["sentencepiece"].url,
        keep_fields=("label",),
        unit_bytes=48 * 1024,
        progress="none",
    )
    run(config)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_documents_and_blocks_read_back_in_dataloader_workers(reference_run, parquet_run, tmp_path, context):
    """Map-style datasets over a manifest, in two DataLoader worker processes, give exactly the shards'
    documents and blocks; the parent used them first (memory maps open) before the workers started."""
    import torch
    from torch.utils.data import DataLoader

    from service.pretokenize import TokenBlocks, TokenizedDocuments

    flat_out = tmp_path / "flat"
    flat_out.mkdir()
    for name, content in reference_run[1].items():
        (flat_out / name).parent.mkdir(parents=True, exist_ok=True)
        (flat_out / name).write_bytes(content)
    expected_flat = [ids for ids, _ in shard_documents(flat_out)]
    expected_parquet = shard_documents(parquet_run)

    # Fork: two workers each. Spawn costs an interpreter with torch per worker: one each.
    workers = 2 if context == "fork" else 1
    documents = TokenizedDocuments(flat_out)
    assert documents[0].tolist() == expected_flat[0] and documents[-1].tolist() == expected_flat[-1]  # parent
    if context == "fork":
        loader = DataLoader(documents, batch_size=None, num_workers=workers, multiprocessing_context=context)
        assert [t.tolist() for t in loader] == expected_flat

    with_fields = TokenizedDocuments(parquet_run, fields=["label"])
    assert with_fields[3]["label"] == expected_parquet[3][1]["label"]
    loader = DataLoader(with_fields, batch_size=None, num_workers=workers, multiprocessing_context=context)
    got = list(loader)
    assert [item["input_ids"].tolist() for item in got] == [ids for ids, _ in expected_parquet]
    assert [item["label"] for item in got] == [columns["label"] for _, columns in expected_parquet]
    assert all(item["input_ids"].dtype == torch.int64 for item in got)

    stream = [token for ids in expected_flat for token in ids]
    blocks = TokenBlocks(flat_out, block_size=129)
    assert len(blocks) == len(stream) // 129
    assert blocks[0].tolist() == stream[:129]
    loader = DataLoader(blocks, batch_size=8, num_workers=workers, multiprocessing_context=context)
    batches = list(loader)
    assert all(batch.shape[1] == 129 and batch.dtype == torch.int64 for batch in batches)
    assert torch.cat(batches).flatten().tolist() == stream[: len(blocks) * 129]  # across shard boundaries too
    with pytest.raises(ValueError, match="flat format"):
        TokenBlocks(parquet_run, block_size=16)
