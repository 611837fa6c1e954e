"""The offline jobs without a shared file system, against every object store the docs name, each a real server
of its protocol on 127.0.0.1 (testkit/objectstore.py): ``s3://`` (moto's server mode, as s3fs's own tests run it),
``gs://`` (gcp-storage-emulator) and ``az://`` (Azurite), store inputs to store outputs. Workers are real
``tokenizer-service`` processes whose index comes from SageMaker's resource config (one file per host), as on
SageMaker Processing. Each test runs against each store, except the two about S3 alone (IAM refusals; memory).

Pre-tokenization with 3 workers writes every object byte-identical to 1 worker (and to the same job on local
files); training with 3 workers gives the tokenizer.json of 1; a worker killed mid-upload leaves no partial
object anyone trusts and its rerun finishes; the store going away mid-run is ridden out within
``--retry-deadline`` (and past it the worker exits 1 naming the URL, its done shards kept); ``serve --model
<store URL>`` answers /encode exactly as the same tokenizer from disk."""

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

from service.jobs.errors import StorageError
from service.jobs.stores import Storage
from testkit import corpora, jobs
from testkit.gates import wait_until
from testkit.jobs import Tail
from testkit.objectstore import AZURITE_KEY, STORES, LoopbackStore, StoreUnavailable
from testkit.servers import REPO, ServerProcess

pytestmark = pytest.mark.slow  # whole jobs against an S3-protocol server, servers of their own

UNIT = "48K"
INDEX_VARIABLES = ("RANK", "WORLD_SIZE", "NODE_INDEX", "NUM_NODES", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID")


def ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module", params=sorted(STORES))
def store(request) -> Any:
    """Each store in turn (one server at a time); one that is not installed here skips, except in CI (``CI``
    set), where it fails."""
    try:
        started = STORES[request.param]().start()
    except StoreUnavailable as exc:
        if ci():
            pytest.fail(f"CI is set: {exc}", pytrace=False)
        pytest.skip(str(exc))
    try:
        yield started
    finally:
        started.close()


#: The tests about S3 alone run against the loopback S3 store only.
s3_only = pytest.mark.parametrize("store", ["s3"], indirect=True)


@pytest.fixture(scope="module")
def corpus(store, tmp_path_factory) -> tuple[Path, str]:
    """A small corpus of every format, on disk and uploaded to <store>://corpus/ (about ten 48 KiB units)."""
    root = tmp_path_factory.mktemp("corpus")
    corpora.write_jsonl(root / "a_news.jsonl", 150_000, seed=1)
    corpora.write_text(root / "b_notes.txt", 200, seed=2)
    corpora.write_jsonl(root / "c_reviews.jsonl.gz", 40_000, seed=3)
    corpora.write_parquet(root / "d_table.parquet", 300, seed=4, row_group_size=100)
    store.make_buckets("corpus", "tokens", "models")
    fs = store.filesystem()
    for path in sorted(root.iterdir()):
        fs.put_file(str(path), f"corpus/data/{path.name}")
    return root, store.url("corpus/data/")


def job_env(
    store: LoopbackStore, host: str | None = None, hosts: int = 3, config_dir: Path | None = None
) -> dict[str, str]:
    """A worker's environment: the store's credentials and, for ``host``, a SageMaker resource config naming
    it among ``algo-1..algo-N`` (listed out of order, as nothing promises their order)."""
    env = {name: value for name, value in os.environ.items() if name not in INDEX_VARIABLES}
    env.update(store.client_env())
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


def pretokenize_args(store: LoopbackStore, inputs: str, out: str, url: str, output_format: str = "flat") -> list[str]:
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
        store.options_json,
        "--progress",
        "none",
    ]


@pytest.fixture(scope="module")
def reference(store, corpus, servers, tmp_path_factory) -> tuple[str, dict[str, bytes]]:
    """One worker, store in and out (the megatron format): every object of its output. An output in a bucket
    that does not exist stops the worker at once, saying so."""
    url = servers["wordpiece_default"].url
    one, absent = store.url("tokens/one"), store.url("absent/x")
    done = run("pretokenize", *pretokenize_args(store, corpus[1], one, url, "megatron"), env=job_env(store))
    assert done.returncode == 0, done.stderr
    assert "worker 0 of 1" in done.stderr
    no_bucket = run("pretokenize", *pretokenize_args(store, corpus[1], absent, url, "megatron"), env=job_env(store))
    assert (
        no_bucket.returncode == 1 and f"{absent}/" in no_bucket.stderr and "does the bucket exist?" in no_bucket.stderr
    )
    return url, store.tree("tokens/one")


def test_pretokenize_store_to_store_three_sagemaker_instances_write_the_objects_of_one(
    store, corpus, reference, tmp_path
):
    url, expected = reference
    assert "manifest.json" in expected and "megatron-data-args.txt" in expected
    assert sum(name.endswith(".done") for name in expected) >= 8
    workers = [
        start(
            "pretokenize",
            *pretokenize_args(store, corpus[1], store.url("tokens/three"), url, "megatron"),
            env=job_env(store, f"algo-{n}", config_dir=tmp_path),
        )
        for n in (1, 2, 3)
    ]
    errors = [worker.communicate(timeout=240)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0], errors
    for index, err in enumerate(errors):
        assert f"worker {index} of 3 (SageMaker algo-{index + 1} of algo-1, algo-2, algo-3)" in err
    assert store.tree("tokens/three") == rename(store, expected, "three")  # every object, byte for byte

    local = tmp_path / "local"  # the same job on local files writes the same shards and records
    done = run("pretokenize", *pretokenize_args(store, str(corpus[0]), str(local), url, "megatron"), env=job_env(store))
    assert done.returncode == 0, done.stderr
    shards = {name: content for name, content in expected.items() if name.endswith((".bin", ".idx", ".done"))}
    assert {name: content for name, content in local_tree(local).items() if name in shards} == shards


def test_a_worker_killed_mid_upload_and_a_store_outage(store, corpus, reference, tmp_path):
    """The store goes away while two workers are mid-run. One is SIGKILLed while it retries an upload: none
    of its objects without a record is trusted, and its rerun finishes to the reference bytes. One with a
    short --retry-deadline exits 1 naming the URL, its done shards kept; its rerun finishes. One with a long
    deadline rides out the outage (the store back on the same port) and finishes: the same bytes."""
    url, expected = reference
    outs = {name: store.url(f"tokens/{name}") for name in ("killed", "impatient", "patient")}
    deadlines = {"killed": "120", "impatient": "2", "patient": "120"}
    workers = {
        name: start(
            "pretokenize",
            *pretokenize_args(store, corpus[1], out, url, "megatron"),
            "--concurrency",
            "1",
            "--request-texts",
            "2",  # ~400 requests of work each: stopped after its first shard, never after its last
            "--retry-deadline",
            deadlines[name],
            env=job_env(store),
        )
        for name, out in outs.items()
    }

    fs = store.filesystem()

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
        before = {name: store.tree(f"tokens/{name}") for name in outs}
        assert not any("manifest.json" in tree for tree in before.values()), "a worker finished too early"
        tails = {name: Tail(workers[name]) for name in ("killed", "patient")}
        store.stop()  # the store is gone, with every worker mid-run
        for worker in workers.values():
            os.kill(worker.pid, signal.SIGCONT)
        # --retry-deadline 2 bounds the job's retrying; a store client's own silent retries must not add a minute
        # (Azure's did, 15 + 18 + 24 s a request). gcsfs retries 6 times over ~35 s itself and takes no option.
        bound = 45 + (45 if store.scheme == "gs" else 0)
        try:
            _, err = workers["impatient"].communicate(timeout=bound)
        except subprocess.TimeoutExpired:
            pytest.fail(f"a worker with --retry-deadline 2 still retried {bound} s after the store went away")
        assert workers["impatient"].returncode == 1, err
        assert store.url("") in err and "--retry-deadline" in err, err  # which URL, and why it gave up
        for tail in tails.values():  # each says at once which URL failed and how, and that it retries
            wait_until(lambda tail=tail: "retrying" in tail.text(), timeout=60, what="a retry line")
        assert f"storage: {store.url('')}" in tails["patient"].text()
        workers["killed"].kill()  # while it retries a request to the store
        workers["killed"].wait(30)
        store.start()  # back, same port, same buckets
        assert workers["patient"].wait(240) == 0, tails["patient"].text()
    finally:
        if not store.running:
            store.start()
        for worker in workers.values():
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    assert store.tree("tokens/patient") == rename(store, expected, "patient")
    for name in ("killed", "impatient"):
        left = store.tree(f"tokens/{name}")
        assert "manifest.json" not in left
        records = [json.loads(content) for key, content in left.items() if key.endswith(".done")]
        assert len(records) >= sum(key.endswith(".done") for key in before[name])  # done shards stay done
        for record in records:  # whatever a record vouches for is whole
            assert all(len(left[f["name"]]) == f["bytes"] for f in record["files"])
        rerun = run("pretokenize", *pretokenize_args(store, corpus[1], outs[name], url, "megatron"), env=job_env(store))
        assert rerun.returncode == 0, rerun.stderr
        assert store.tree(f"tokens/{name}") == rename(store, expected, name)


def rename(store: LoopbackStore, tree: dict[str, bytes], name: str) -> dict[str, bytes]:
    """The reference's objects as written under tokens/``name`` (the data-args file names its own prefix)."""
    one, other = store.url("tokens/one/").encode(), store.url(f"tokens/{name}/").encode()
    return {key: value.replace(one, other) for key, value in tree.items()}


def test_train_store_to_store_three_sagemaker_instances_give_the_tokenizer_of_one(store, corpus, tmp_path):
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
            store.options_json,
            "--progress",
            "none",
        ]

    one = run("train", *args(store.url("models/one")), env=job_env(store))
    assert one.returncode == 0, one.stderr
    workers = [
        start("train", *args(store.url("models/three")), env=job_env(store, f"algo-{n}", config_dir=tmp_path))
        for n in (1, 2, 3)
    ]
    errors = [worker.communicate(timeout=240)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0, 0], errors
    assert "worker 2 of 3 (SageMaker algo-3" in errors[2] and "worker 0 merges" in errors[2]
    single, three = store.tree("models/one"), store.tree("models/three")
    assert set(three) == {"tokenizer.json", "tokenizer_config.json", "manifest.json"}  # nothing but the tokenizer
    assert three["tokenizer.json"] == single["tokenizer.json"]
    assert any(key.endswith(".done") for key in store.tree("models/three.counts"))  # the counts, beside it


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_serve_a_tokenizer_from_the_store_exactly_as_from_disk(store, tokenizer_dirs, servers, tmp_path):
    """The same tokenizer served from the store and from disk (the session's server): the same fingerprint, the
    same /encode answers; a prefix holding nothing stops the server at start-up, naming the URL."""
    source = tokenizer_dirs["sentencepiece"]
    store.make_buckets("served")
    fs = store.filesystem()
    for path in sorted(Path(source).iterdir()):
        if path.is_file():
            fs.put_file(str(path), f"served/tokenizers/spm/{path.name}")
    env = {**job_env(store), "TOKENIZER_SERVICE_STORAGE_OPTIONS": store.options_json}
    served, none = store.url("served/tokenizers/spm/"), store.url("served/tokenizers/none/")
    texts = ["Hello world", "你好，世界", "😀 emoji", ""]
    local = servers["sentencepiece"]
    with ServerProcess("--model", served, env=env, log_path=tmp_path / "store.log") as remote:
        infos = [
            json.loads(urllib.request.urlopen(server.url + "/info", timeout=30).read()) for server in (remote, local)
        ]
        assert infos[0]["fingerprint"] == infos[1]["fingerprint"]
        assert infos[0]["source"] == served
        for options in ({}, {"padding": True, "truncation": True, "max_length": 8, "return_offsets_mapping": True}):
            body = {"texts": texts, **options}
            assert post(remote.url + "/encode", body) == post(local.url + "/encode", body)
    missing = ServerProcess("--model", none, env=env, log_path=tmp_path / "missing.log")
    with pytest.raises(RuntimeError, match="exited"):
        missing.start(timeout=60)
    assert none in (tmp_path / "missing.log").read_text()


@pytest.mark.parametrize("store", ["azure"], indirect=True)
def test_a_key_azure_does_not_accept_is_refused_at_once_never_printed(store, corpus, servers, tmp_path):
    """A connection string whose key Azurite does not accept (it checks every request's signature, as Azure
    does): the worker stops at once (no retrying for --retry-deadline), naming the URL, the refusal and where
    credentials come from; the key appears nowhere."""
    wrong_key = "V3JvbmcgYnV0IHdlbGwgZm9ybWVkIGtleSBmb3IgYSB0ZXN0LCBub3QgQXp1cml0ZSdzIG93bg=="
    options = {"connection_string": store.connection_string.replace(AZURITE_KEY, wrong_key)}
    args = pretokenize_args(store, corpus[1], store.url("tokens/wrong-key"), servers["wordpiece_default"].url)
    args[args.index("--storage-options") + 1] = json.dumps(options)
    done = run("pretokenize", *args, env=job_env(store), timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"{corpus[1]}: the store refused: " in done.stderr and "check the credentials" in done.stderr
    assert "retrying" not in done.stderr and wrong_key not in done.stdout + done.stderr


@pytest.mark.parametrize("store", ["azure"], indirect=True)
def test_abfs_and_az_name_the_same_container(store):
    """adlfs serves ``abfs://`` and ``az://`` with one filesystem: what the storage layer writes through one
    is read, listed and removed through the other."""
    storage = Storage(store.storage_options)
    store.make_buckets("schemes")
    storage.folder("abfs://schemes/run").write_bytes("a/b.txt", b"written through abfs://")
    folder = storage.folder("az://schemes/run")
    assert folder.listing() == {"a/b.txt": 23} and folder.read_bytes("a/b.txt") == b"written through abfs://"
    folder.remove("a/b.txt")
    assert storage.folder("abfs://schemes/run").listing() == {}


@pytest.mark.parametrize("store", ["azure"], indirect=True)
def test_a_record_written_to_a_missing_container_is_named_at_once(store):
    """A small object (a .done record, a coordination file: one PUT) written to a container that does not
    exist: adlfs passes azure-core's 404 on untranslated; the storage layer names it as a missing bucket at once
    instead of retrying it until the deadline."""
    storage = Storage(store.storage_options, retry_deadline=30)
    with pytest.raises(StorageError, match=r"^az://absent/run/x\.done: cannot write there .*does the bucket exist"):
        storage.folder("az://absent/run").write_bytes("x.done", b"{}")


#: What a reader of a bucket may do: AWS checks a listing as s3:ListBucket and a HEAD as the GET it stands for;
#: moto since 5.2.6 checks each by its operation's own name (ListObjectsV2, HeadObject, HeadBucket): both, so either
#: lets the reader read
READING = ("s3:GetObject", "s3:ListBucket", "s3:ListObjectsV2", "s3:HeadObject", "s3:HeadBucket")


@s3_only
def test_refusals_name_the_url_and_what_the_store_said_never_a_secret(store, corpus, reference, tmp_path):
    """An empty glob, no credentials at all, a key the store does not know, a bucket the key may not write,
    and an output prefix holding another run's shards: each stops the worker (exit 1) before any work, naming
    the URL and what the store answered -- and no secret."""
    url, expected = reference

    def attempt(inputs: str, out: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
        return run("pretokenize", *pretokenize_args(store, inputs, out, url), *extra, env=env, timeout=120)

    empty = attempt("s3://corpus/data/nothing-*.jsonl", "s3://tokens/empty", job_env(store))
    assert empty.returncode == 1 and "no input matches 's3://corpus/data/nothing-*.jsonl'" in empty.stderr

    nowhere = str(tmp_path / "absent")  # no key in the environment, no profile, no instance identity
    bare = {name: value for name, value in job_env(store).items() if not name.startswith("AWS_")}
    bare.update(AWS_SHARED_CREDENTIALS_FILE=nowhere, AWS_CONFIG_FILE=nowhere, AWS_EC2_METADATA_DISABLED="true")
    anonymous = attempt(corpus[1], "s3://tokens/anonymous", bare)
    assert anonymous.returncode == 1, anonymous.stderr
    assert "s3://corpus/data/: the store refused: NoCredentialsError: Unable to locate credentials" in anonymous.stderr

    reader = store.user(
        "corpus-reader",
        [{"Effect": "Allow", "Action": list(READING), "Resource": ["arn:aws:s3:::corpus*"]}],
    )
    unknown_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzzSECRET"
    with store.authenticating():
        unknown = attempt(
            corpus[1],
            "s3://tokens/unknown",
            {**job_env(store), "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7UNKNOWN", "AWS_SECRET_ACCESS_KEY": unknown_secret},
        )
        denied = attempt(corpus[1], "s3://tokens/denied", {**job_env(store), **reader})
    assert unknown.returncode == 1, unknown.stderr
    assert "s3://corpus/data/: the store refused: PermissionError: Forbidden; check the credentials" in unknown.stderr
    assert denied.returncode == 1, denied.stderr
    assert "s3://tokens/denied: the store refused: PermissionError: Access Denied; check the" in denied.stderr
    for done, secret in ((unknown, unknown_secret), (denied, reader["AWS_SECRET_ACCESS_KEY"])):
        assert secret not in done.stdout + done.stderr
    assert store.tree("tokens/denied") == {}

    other = attempt(corpus[1], "s3://tokens/one", job_env(store), "--no-add-special-tokens", "--format", "megatron")
    assert other.returncode == 1 and "s3://tokens/one: " in other.stderr and "other settings" in other.stderr
    assert store.tree("tokens/one") == expected  # refused before touching anything


MEMORY_PROBE = r"""
import json, os, sys
from pathlib import Path
from service.jobs.errors import StorageError
from service.jobs.stores import Storage


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


@s3_only
def test_reading_and_uploading_a_large_object_take_bounded_memory(store, corpus, tmp_path):
    """A 48 MiB object read through ranged GETs and a 48 MiB file uploaded in parts: the worker's peak RSS
    (VmHWM) grows by a few blocks, never by the object (s3fs alone would read a file under 100 MiB whole for
    one PUT, and hold 10 parts of a larger one)."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as stream:
        for _ in range(48):
            stream.write(os.urandom(1 << 20))
    store.filesystem().put_file(str(big), "corpus/probe/big.bin")
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, store.options_json, str(big)],
        cwd=REPO,
        env=job_env(store),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    grown = json.loads(done.stdout)
    assert grown["read"] < 24 and grown["upload"] < 32, grown  # MiB; the object is 48
    assert store.tree("tokens/probe") == {"big.bin": big.read_bytes()}
