"""The offline jobs without a shared file system: a real S3-protocol server on 127.0.0.1 (moto's server mode, as
s3fs's own tests run it), ``s3://`` inputs to ``s3://`` outputs. Workers are real ``tokenizer-service``
processes whose index comes from SageMaker's resource config (one file per host), as on SageMaker Processing.

Pre-tokenization with 3 workers writes every object byte-identical to 1 worker (and to the same job on local
files); training with 3 workers gives the tokenizer.json of 1; a worker killed mid-upload leaves no partial
object anyone trusts and its rerun finishes; the store going away mid-run is ridden out within
``--retry-deadline`` (and past it the worker exits 1 naming the URL, its done shards kept); ``serve --model
s3://...`` answers /encode exactly as the same tokenizer from disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from gates import wait_until

from testkit import corpora, jobs
from testkit.jobs import Tail
from testkit.objectstore import LoopbackS3
from testkit.servers import REPO, ServerProcess

pytestmark = pytest.mark.slow  # whole jobs against an S3-protocol server, servers of their own

UNIT = "48K"
INDEX_VARIABLES = ("RANK", "WORLD_SIZE", "NODE_INDEX", "NUM_NODES", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID")


@pytest.fixture(scope="module")
def s3() -> Any:
    with LoopbackS3() as store:
        yield store


@pytest.fixture(scope="module")
def corpus(s3, tmp_path_factory) -> tuple[Path, str]:
    """A small corpus of every format, on disk and uploaded to s3://corpus/ (about ten 48 KiB units)."""
    root = tmp_path_factory.mktemp("corpus")
    corpora.write_jsonl(root / "a_news.jsonl", 150_000, seed=1)
    corpora.write_text(root / "b_notes.txt", 200, seed=2)
    corpora.write_jsonl(root / "c_reviews.jsonl.gz", 40_000, seed=3)
    corpora.write_parquet(root / "d_table.parquet", 300, seed=4, row_group_size=100)
    fs = s3.filesystem()
    for bucket in ("corpus", "tokens", "models"):
        fs.mkdir(bucket)
    for path in sorted(root.iterdir()):
        fs.put_file(str(path), f"corpus/data/{path.name}")
    return root, "s3://corpus/data/"


def job_env(s3: LoopbackS3, host: str | None = None, hosts: int = 3, config_dir: Path | None = None) -> dict[str, str]:
    """A worker's environment: the store's credentials and, for ``host``, a SageMaker resource config naming
    it among ``algo-1..algo-N`` (listed out of order, as nothing promises their order)."""
    env = {name: value for name, value in os.environ.items() if name not in INDEX_VARIABLES}
    env.update(s3.client_env())
    if host is not None and config_dir is not None:
        config = config_dir / f"{host}.json"
        names = [f"algo-{n}" for n in range(hosts, 0, -1)]
        config.write_text(json.dumps({"current_host": host, "hosts": names, "network_interface_name": "eth0"}))
        env["TOKENIZER_SERVICE_RESOURCE_CONFIG"] = str(config)
    return env


def start(command: str, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return jobs.start([command, *args], env)


def run(command: str, *args: str, env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", command, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def local_tree(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def pretokenize_args(s3: LoopbackS3, inputs: str, out: str, url: str, output_format: str = "flat") -> list[str]:
    return [
        inputs,
        "--out",
        out,
        "--url",
        url,
        "--format",
        output_format,
        "--unit-bytes",
        UNIT,
        "--append-eos",
        "--eos-id",
        "3",
        "--storage-options",
        s3.options_json,
        "--progress",
        "none",
    ]


@pytest.fixture(scope="module")
def reference(s3, corpus, servers, tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    """One worker, s3:// in and out (the megatron format): every object of its output."""
    url = servers["wordpiece_default"].url
    done = run("pretokenize", *pretokenize_args(s3, corpus[1], "s3://tokens/one", url, "megatron"), env=job_env(s3))
    assert done.returncode == 0, done.stderr
    assert "worker 0 of 1" in done.stderr
    no_bucket = run("pretokenize", *pretokenize_args(s3, corpus[1], "s3://absent/x", url, "megatron"), env=job_env(s3))
    assert no_bucket.returncode == 1 and "s3://absent/x/" in no_bucket.stderr and "bucket" in no_bucket.stderr
    return url, s3.tree("tokens/one")


def test_pretokenize_from_s3_to_s3_three_sagemaker_instances_write_the_objects_of_one(s3, corpus, reference, tmp_path):
    url, expected = reference
    assert "manifest.json" in expected and "megatron-data-args.txt" in expected
    assert sum(name.endswith(".done") for name in expected) >= 8
    workers = [
        start(
            "pretokenize",
            *pretokenize_args(s3, corpus[1], "s3://tokens/three", url, "megatron"),
            env=job_env(s3, f"algo-{n}", config_dir=tmp_path),
        )
        for n in (1, 2, 3)
    ]
    errors = [worker.communicate(timeout=240)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0], errors
    for index, err in enumerate(errors):
        assert f"worker {index} of 3 (SageMaker algo-{index + 1} of algo-1, algo-2, algo-3)" in err
    assert s3.tree("tokens/three") == {
        name: content.replace(b"s3://tokens/one/", b"s3://tokens/three/") for name, content in expected.items()
    }  # every object, byte for byte (the data-args file names its own prefix)

    local = tmp_path / "local"  # the same job on local files writes the same shards and records
    done = run("pretokenize", *pretokenize_args(s3, str(corpus[0]), str(local), url, "megatron"), env=job_env(s3))
    assert done.returncode == 0, done.stderr
    shards = {name: content for name, content in expected.items() if name.endswith((".bin", ".idx", ".done"))}
    assert {name: content for name, content in local_tree(local).items() if name in shards} == shards


def test_a_worker_killed_mid_upload_and_a_store_outage(s3, corpus, reference, tmp_path):
    """The store goes away while two workers are mid-run. One is SIGKILLed while it retries an upload: none
    of its objects without a record is trusted, and its rerun finishes to the reference bytes. One with a
    short --retry-deadline exits 1 naming the URL, its done shards kept; its rerun finishes. One with a long
    deadline rides out the outage (the store back on the same port) and finishes: the same bytes."""
    url, expected = reference
    outs = {name: f"s3://tokens/{name}" for name in ("killed", "impatient", "patient")}
    deadlines = {"killed": "120", "impatient": "2", "patient": "120"}
    workers = {
        name: start(
            "pretokenize",
            *pretokenize_args(s3, corpus[1], out, url, "megatron"),
            "--concurrency",
            "1",
            "--request-texts",
            "2",  # ~400 requests of work each: stopped after its first shard, never after its last
            "--retry-deadline",
            deadlines[name],
            env=job_env(s3),
        )
        for name, out in outs.items()
    }

    fs = s3.filesystem()

    def has_done(name: str) -> bool:  # a listing only: cheap enough to catch each worker early
        try:
            return any(key.endswith(".done") for key in fs.find(f"tokens/{name}"))
        except FileNotFoundError:
            return False

    try:
        stopped: set[str] = set()

        def stop_each_after_its_first_shard() -> bool:
            for name, worker in workers.items():
                if name not in stopped and has_done(name):
                    os.kill(worker.pid, signal.SIGSTOP)
                    stopped.add(name)
            return len(stopped) == len(workers)

        wait_until(stop_each_after_its_first_shard, timeout=120, what="a first shard of each worker")
        assert all(worker.poll() is None for worker in workers.values()), "a worker finished too early"
        before = {name: s3.tree(f"tokens/{name}") for name in outs}
        assert not any("manifest.json" in tree for tree in before.values()), "a worker finished too early"
        tails = {name: Tail(workers[name]) for name in ("killed", "patient")}
        s3.stop()  # the store is gone, with every worker mid-run
        for worker in workers.values():
            os.kill(worker.pid, signal.SIGCONT)
        _, err = workers["impatient"].communicate(timeout=120)
        assert workers["impatient"].returncode == 1, err
        assert "s3://" in err and "--retry-deadline" in err, err  # which URL, and why it gave up
        for tail in tails.values():  # each says at once which URL failed and how, and that it retries
            wait_until(lambda tail=tail: "retrying" in tail.text(), timeout=60, what="a retry line")
        assert "storage: s3://" in tails["patient"].text()
        workers["killed"].kill()  # while it retries a request to the store
        workers["killed"].wait(30)
        s3.start()  # back, same port, same buckets
        assert workers["patient"].wait(240) == 0, tails["patient"].text()
    finally:
        if not s3.running:
            s3.start()
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    assert s3.tree("tokens/patient") == rename(expected, "patient")
    for name in ("killed", "impatient"):
        left = s3.tree(f"tokens/{name}")
        assert "manifest.json" not in left
        records = [json.loads(content) for key, content in left.items() if key.endswith(".done")]
        assert len(records) >= sum(key.endswith(".done") for key in before[name])  # done shards stay done
        for record in records:  # whatever a record vouches for is whole
            assert all(len(left[f["name"]]) == f["bytes"] for f in record["files"])
        rerun = run("pretokenize", *pretokenize_args(s3, corpus[1], outs[name], url, "megatron"), env=job_env(s3))
        assert rerun.returncode == 0, rerun.stderr
        assert s3.tree(f"tokens/{name}") == rename(expected, name)


def rename(tree: dict[str, bytes], name: str) -> dict[str, bytes]:
    return {key: value.replace(b"s3://tokens/one/", f"s3://tokens/{name}/".encode()) for key, value in tree.items()}


def test_train_from_s3_to_s3_three_sagemaker_instances_give_the_tokenizer_of_one(s3, corpus, tmp_path):
    def args(out: str) -> list[str]:
        return [
            corpus[1],
            "--out",
            out,
            "--model",
            "byte-level-bpe",
            "--vocab-size",
            "1200",
            "--unit-bytes",
            UNIT,
            "--processes",
            "1",
            "--storage-options",
            s3.options_json,
            "--progress",
            "none",
        ]

    one = run("train", *args("s3://models/one"), env=job_env(s3))
    assert one.returncode == 0, one.stderr
    workers = [
        start("train", *args("s3://models/three"), env=job_env(s3, f"algo-{n}", config_dir=tmp_path)) for n in (1, 2, 3)
    ]
    errors = [worker.communicate(timeout=240)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0], errors
    assert "worker 2 of 3 (SageMaker algo-3" in errors[2] and "worker 0 merges" in errors[2]
    single, three = s3.tree("models/one"), s3.tree("models/three")
    assert set(three) == {"tokenizer.json", "tokenizer_config.json", "manifest.json"}  # nothing but the tokenizer
    assert three["tokenizer.json"] == single["tokenizer.json"]
    assert any(key.endswith(".done") for key in s3.tree("models/three.counts"))  # the counts, beside it


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_serve_a_tokenizer_from_s3_exactly_as_from_disk(s3, tokenizer_dirs, servers, tmp_path):
    source = tokenizer_dirs["sentencepiece"]
    fs = s3.filesystem()
    fs.mkdir("served")
    for path in sorted(Path(source).iterdir()):
        if path.is_file():
            fs.put_file(str(path), f"served/tokenizers/spm/{path.name}")
    env = {**job_env(s3), "TOKENIZER_SERVICE_STORAGE_OPTIONS": s3.options_json}
    texts = ["Hello world", "你好，世界", "😀 emoji", ""]
    local = servers["sentencepiece"]  # the same tokenizer, served from disk
    with ServerProcess("--model", "s3://served/tokenizers/spm/", env=env, log_path=tmp_path / "s3.log") as remote:
        infos = [
            json.loads(urllib.request.urlopen(server.url + "/info", timeout=30).read()) for server in (remote, local)
        ]
        assert infos[0]["fingerprint"] == infos[1]["fingerprint"]
        assert infos[0]["source"] == "s3://served/tokenizers/spm/"
        for options in ({}, {"padding": True, "truncation": True, "max_length": 8, "return_offsets_mapping": True}):
            body = {"texts": texts, **options}
            assert post(remote.url + "/encode", body) == post(local.url + "/encode", body)
    missing = ServerProcess("--model", "s3://served/tokenizers/none/", env=env, log_path=tmp_path / "missing.log")
    with pytest.raises(RuntimeError, match="exited"):
        missing.start(timeout=60)
    assert "s3://served/tokenizers/none/" in (tmp_path / "missing.log").read_text()


def test_refusals_name_the_url_and_what_the_store_said_never_a_secret(s3, corpus, reference, tmp_path):
    """An empty glob, no credentials at all, a key the store does not know, a bucket the key may not write,
    and an output prefix holding another run's shards: each stops the worker (exit 1) before any work, naming
    the URL and what the store answered -- and no secret."""
    url, expected = reference

    def attempt(inputs: str, out: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
        return run("pretokenize", *pretokenize_args(s3, inputs, out, url), *extra, env=env, timeout=120)

    empty = attempt("s3://corpus/data/nothing-*.jsonl", "s3://tokens/empty", job_env(s3))
    assert empty.returncode == 1 and "no input matches 's3://corpus/data/nothing-*.jsonl'" in empty.stderr

    nowhere = str(tmp_path / "absent")  # no key in the environment, no profile, no instance identity
    bare = {name: value for name, value in job_env(s3).items() if not name.startswith("AWS_")}
    bare.update(AWS_SHARED_CREDENTIALS_FILE=nowhere, AWS_CONFIG_FILE=nowhere, AWS_EC2_METADATA_DISABLED="true")
    anonymous = attempt(corpus[1], "s3://tokens/anonymous", bare)
    assert anonymous.returncode == 1, anonymous.stderr
    assert "s3://corpus/data/: the store refused: NoCredentialsError: Unable to locate credentials" in anonymous.stderr

    reader = s3.user(
        "corpus-reader",
        [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": ["arn:aws:s3:::corpus*"]}],
    )
    unknown_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzzSECRET"
    with s3.authenticating():
        unknown = attempt(
            corpus[1],
            "s3://tokens/unknown",
            {**job_env(s3), "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7UNKNOWN", "AWS_SECRET_ACCESS_KEY": unknown_secret},
        )
        denied = attempt(corpus[1], "s3://tokens/denied", {**job_env(s3), **reader})
    assert unknown.returncode == 1, unknown.stderr
    assert "s3://corpus/data/: the store refused: PermissionError: Forbidden; check the credentials" in unknown.stderr
    assert denied.returncode == 1, denied.stderr
    assert "s3://tokens/denied: the store refused: PermissionError: Access Denied; check the" in denied.stderr
    for done, secret in ((unknown, unknown_secret), (denied, reader["AWS_SECRET_ACCESS_KEY"])):
        assert secret not in done.stdout + done.stderr
    assert s3.tree("tokens/denied") == {}

    other = attempt(corpus[1], "s3://tokens/one", job_env(s3), "--no-add-special-tokens", "--format", "megatron")
    assert other.returncode == 1 and "s3://tokens/one: " in other.stderr and "other settings" in other.stderr
    assert s3.tree("tokens/one") == expected  # refused before touching anything


MEMORY_PROBE = r"""
import json, os, sys
from pathlib import Path
from service.corpus.storage import Storage


def peak():  # VmHWM, MiB
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))

storage = Storage(json.loads(sys.argv[1]))
storage.folder("s3://corpus/probe").listing()  # the filesystem made, its client loaded
before = peak()
with storage.open_input("s3://corpus/probe/big.bin") as stream:
    while stream.read(1 << 20):
        pass
read = peak()
storage.folder("s3://tokens/probe").upload(Path(sys.argv[2]), "big.bin")
print(json.dumps({"read": read - before, "upload": peak() - read}))
"""


def test_reading_and_uploading_a_large_object_take_bounded_memory(s3, corpus, tmp_path):
    """A 48 MiB object read through ranged GETs and a 48 MiB file uploaded in parts: the worker's peak RSS
    (VmHWM) grows by a few blocks, never by the object (s3fs alone would read a file under 100 MiB whole for
    one PUT, and hold 10 parts of a larger one)."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as stream:
        for _ in range(48):
            stream.write(os.urandom(1 << 20))
    s3.filesystem().put_file(str(big), "corpus/probe/big.bin")
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, s3.options_json, str(big)],
        cwd=REPO,
        env=job_env(s3),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    grown = json.loads(done.stdout)
    assert grown["read"] < 24 and grown["upload"] < 32, grown  # MiB; the object is 48
    assert s3.tree("tokens/probe") == {"big.bin": big.read_bytes()}
