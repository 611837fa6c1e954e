"""The offline jobs without a shared file system, against every object store the docs name, each a real server
of its protocol on 127.0.0.1 (testkit/objectstore.py): ``s3://`` (moto's server mode, as s3fs's own tests run it),
``gs://`` (gcp-storage-emulator) and ``az://`` (Azurite), store inputs to store outputs. Workers are real
``tokenizer-service`` processes whose index comes from SageMaker's resource config (one file per host), as on
SageMaker Processing. Every run's objects are compared byte for byte with one worker's files on local disk (made
once for the module).

Every store runs what its own client library does: reading each input format, listing, uploading whole and the
``.done`` records, with workers writing into one prefix at once (pre-tokenization by several workers writes the
objects of one; training's counts go up and come back, its tokenizer is written); its errors and retries while the
store is away (a worker rides the outage out within ``--retry-deadline``; one past it exits 1 naming the URL, its
done shards kept; one killed mid-upload leaves nothing a reader trusts; one rerun finishes after both); a write
into a bucket that does not exist named at once; ``serve --model <store URL>`` answering /encode exactly as the
same tokenizer from disk, an empty prefix refused naming its URL.

S3 alone, the reference emulator, runs what does not depend on the store: three workers where the others run two,
and training by three worker processes where the others train by two workers in this process (training's workers
meet only through the executor that pre-tokenization runs on every store; N workers giving the bytes of one is
proven on local disk too: test_pretokenize.py::test_three_workers_write_the_bytes_of_one, test_train.py's
test_bpe_equals_train_from_iterator_on_the_raw_corpus_with_any_number_of_workers); a worker's exit on a refusal;
and what only S3 has here: IAM refusals, bounded memory. Azure alone: a key it refuses, ``abfs://`` beside
``az://``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.engine.loading import TokenizerLoadError, load_tokenizer
from service.jobs.errors import StorageError
from service.jobs.stores import STORAGE_OPTIONS_ENV, Storage
from service.jobs.work_units import parse_size
from testkit import corpora, jobs
from testkit.gates import wait_until
from testkit.jobs import Tail
from testkit.objectstore import AZURITE_KEY, STORES, LoopbackStore, StoreUnavailable
from testkit.servers import REPO, ServerProcess

pytestmark = pytest.mark.slow  # whole jobs against an S3-protocol server, servers of their own

UNIT = "48K"
INDEX_VARIABLES = ("RANK", "WORLD_SIZE", "NODE_INDEX", "NUM_NODES", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID")
DATA_ARGS = "megatron-data-args.txt"  # the one file that names where the run is
#: Workers of a store-to-store run, by scheme: three SageMaker instances on S3, two on the other stores (still
#: writing into one prefix at once, one waiting for the other's records).
WORKERS = {"s3": 3, "gs": 2, "az": 2}
#: The training every run does, as TrainConfig's fields.
TRAINING: dict[str, Any] = {"model": "byte-level-bpe", "vocab_size": 1200, "processes": 1, "progress": "none"}


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
def local_corpus(tmp_path_factory) -> Path:
    """A small corpus of every format (eight 48 KiB units)."""
    root = tmp_path_factory.mktemp("corpus")
    corpora.write_jsonl(root / "a_news.jsonl", 150_000, seed=1)
    corpora.write_text(root / "b_notes.txt", 200, seed=2)
    corpora.write_jsonl(root / "c_reviews.jsonl.gz", 40_000, seed=3)
    corpora.write_parquet(root / "d_table.parquet", 300, seed=4, row_group_size=100)
    return root


@pytest.fixture(scope="module")
def corpus(store, local_corpus) -> tuple[Path, str]:
    """The corpus on disk and uploaded to <store>://corpus/data/."""
    store.make_buckets("corpus", "tokens", "models")
    fs = store.filesystem()
    for path in sorted(local_corpus.iterdir()):
        fs.put_file(str(path), f"corpus/data/{path.name}")
    return local_corpus, store.url("corpus/data/")


def job_env(
    store: LoopbackStore | None, host: str | None = None, hosts: int = 3, config_dir: Path | None = None
) -> dict[str, str]:
    """A worker's environment: the store's credentials and, for ``host``, a SageMaker resource config naming
    it among ``algo-1..algo-N`` (listed out of order, as nothing promises their order)."""
    env = {name: value for name, value in os.environ.items() if name not in INDEX_VARIABLES}
    if store is not None:
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


def storage_args(store: LoopbackStore | None) -> list[str]:
    return [] if store is None else ["--storage-options", store.options_json]


def pretokenize_args(
    store: LoopbackStore | None, inputs: str, out: str, url: str, output_format: str = "flat"
) -> list[str]:
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
        *storage_args(store),
        "--progress",
        "none",
    ]


def train_args(store: LoopbackStore, inputs: str, out: str) -> list[str]:
    """``tokenizer-service train``'s arguments for :data:`TRAINING` (each field's flag is its name, dashed)."""
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in TRAINING.items()]
    return [inputs, "--out", out, *flags, "--unit-bytes", UNIT, *storage_args(store)]


def train_in_process(inputs: str, out: str, **options: Any) -> None:
    """The training of :data:`TRAINING`, in this process."""
    from service.training import TrainConfig, train

    config = TrainConfig(inputs=(inputs,), out=out, unit_bytes=parse_size(UNIT), **TRAINING, **options)
    train(config, log=lambda line: None)


@dataclass(frozen=True)
class Reference:
    """One worker's pre-tokenization on local files (the megatron format): the service it asked, its folder,
    and every file it wrote."""

    url: str
    out: Path
    files: dict[str, bytes]

    def on(self, store: LoopbackStore, prefix: str) -> dict[str, bytes]:
        """The objects a run must write under ``prefix`` of ``store``: these files byte for byte, the data-args
        file naming that prefix instead of the local folder."""
        here, there = f"{self.out}/".encode(), store.url(f"{prefix}/").encode()
        return {name: data.replace(here, there) if name == DATA_ARGS else data for name, data in self.files.items()}


@pytest.fixture(scope="module")
def reference(local_corpus, servers, tmp_path_factory) -> Reference:
    """One worker, local files in and out: what every run on every store must write."""
    url, out = servers["wordpiece_default"].url, tmp_path_factory.mktemp("reference") / "tokens"
    done = run("pretokenize", *pretokenize_args(None, str(local_corpus), str(out), url, "megatron"), env=job_env(None))
    assert done.returncode == 0, done.stderr
    assert "worker 0 of 1" in done.stderr
    files = local_tree(out)
    assert "manifest.json" in files and DATA_ARGS in files
    assert sum(name.endswith(".done") for name in files) >= 8  # several units for each of three workers
    return Reference(url, out, files)


@pytest.fixture(scope="module")
def trained(local_corpus, tmp_path_factory) -> dict[str, bytes]:
    """One worker trained on local files: the tokenizer files every run on every store must write."""
    out = tmp_path_factory.mktemp("trained") / "tokenizer"
    train_in_process(str(local_corpus), str(out))
    return {name: (out / name).read_bytes() for name in ("tokenizer.json", "tokenizer_config.json")}


def sagemaker_workers(store: LoopbackStore, command: str, args: list[str], config_dir: Path) -> list[str]:
    """``command`` run at once by the store's :data:`WORKERS`, each a SageMaker instance; their stderr, once
    every one has exited 0 saying which worker it was."""
    count = WORKERS[store.scheme]
    hosts = [f"algo-{n}" for n in range(1, count + 1)]
    workers = [start(command, *args, env=job_env(store, host, count, config_dir)) for host in hosts]
    errors = [worker.communicate(timeout=240)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * count, errors
    for index, err in enumerate(errors):
        assert f"worker {index} of {count} (SageMaker {hosts[index]} of {', '.join(hosts)})" in err, err
    return errors


def test_pretokenize_store_to_store_sagemaker_instances_write_the_objects_of_one_worker_on_local_files(
    store, corpus, reference, tmp_path
):
    """Each worker a process indexed by SageMaker's resource config, all at once into one prefix."""
    out = store.url("tokens/workers")
    sagemaker_workers(
        store, "pretokenize", pretokenize_args(store, corpus[1], out, reference.url, "megatron"), tmp_path
    )
    assert store.tree("tokens/workers") == reference.on(store, "tokens/workers")  # every object, byte for byte


def test_a_worker_killed_mid_upload_and_a_store_outage(store, corpus, reference):
    """The store goes away while three workers are mid-run, each past its first shard. Two are workers 0 and 1 of
    one job: worker 1 is SIGKILLed while it retries a request, worker 0 (a short --retry-deadline) exits 1 naming
    the URL; of what they leave, no object without a record is trusted, their done shards stay done, and one rerun
    finishes the job. The third, alone on a prefix of its own with a long deadline, rides out the outage (the
    store back on the same port) and finishes. Both prefixes end with the reference's bytes."""
    job, alone = "tokens/stopped", "tokens/patient"
    plan = [shard["name"] for shard in json.loads(reference.files["manifest.json"])["shards"]]  # in unit order
    # (prefix, its units, worker flags, deadline); ~400 requests of work each (worker i of 2 takes units i::2):
    # stopped after its first shard, never after its last
    roles = {
        "impatient": (job, plan[0::2], ("--shard-index", "0", "--num-shards", "2", "--request-texts", "1"), "2"),
        "killed": (job, plan[1::2], ("--shard-index", "1", "--num-shards", "2", "--request-texts", "1"), "120"),
        "patient": (alone, plan, ("--request-texts", "2"), "120"),
    }
    workers = {
        name: start(
            "pretokenize",
            *pretokenize_args(store, corpus[1], store.url(prefix), reference.url, "megatron"),
            *flags,
            "--concurrency",
            "1",
            "--retry-deadline",
            deadline,
            env=job_env(store),
        )
        for name, (prefix, _, flags, deadline) in roles.items()
    }

    fs = store.filesystem()

    def listed(prefix: str) -> set[str]:  # a listing only: cheap enough to catch each worker early
        try:
            return set(fs.find(prefix))
        except FileNotFoundError:
            return set()

    try:
        stopped: set[str] = set()

        def stop_each_after_its_first_shard() -> bool:
            waiting = [name for name in workers if name not in stopped]
            keys = set().union(*(listed(prefix) for prefix in {roles[name][0] for name in waiting}))
            for name in waiting:
                prefix, units = roles[name][:2]
                if any(f"{prefix}/{unit}.done" in keys for unit in units):
                    os.kill(workers[name].pid, signal.SIGSTOP)
                    stopped.add(name)
            return len(stopped) == len(workers)

        # every 50 ms, not wait_until's 5: each poll is a listing of each prefix, which the store serves
        wait_until(stop_each_after_its_first_shard, timeout=120, what="a first shard of each worker", interval=0.05)
        assert all(worker.poll() is None for worker in workers.values()), "a worker finished too early"
        before = {prefix: store.tree(prefix) for prefix in (job, alone)}
        assert not any("manifest.json" in tree for tree in before.values()), "a worker finished too early"
        tails = {name: Tail(workers[name]) for name in ("killed", "patient")}
        store.stop()  # the store is gone, with every worker mid-run
        for worker in workers.values():
            os.kill(worker.pid, signal.SIGCONT)
        # --retry-deadline 2 bounds the job's retrying; a store client's own silent retries must not add a minute
        # (Azure's did, 15 + 18 + 24 s a request; gcsfs's 6 tries over ~35 s a request, twice per upload)
        bound = 45
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
    assert store.tree(alone) == reference.on(store, alone)
    left = store.tree(job)
    assert "manifest.json" not in left
    records = [json.loads(content) for key, content in left.items() if key.endswith(".done")]
    assert len(records) >= sum(key.endswith(".done") for key in before[job])  # done shards stay done
    for record in records:  # whatever a record vouches for is whole
        assert all(len(left[f["name"]]) == f["bytes"] for f in record["files"])
    rerun = run(
        "pretokenize",
        *pretokenize_args(store, corpus[1], store.url(job), reference.url, "megatron"),
        env=job_env(store),
    )
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(records)} done already" in rerun.stderr  # and not redone
    assert store.tree(job) == reference.on(store, job)


@s3_only
def test_train_store_to_store_three_sagemaker_instances_give_the_tokenizer_of_one_worker_on_local_files(
    store, corpus, trained, tmp_path
):
    errors = sagemaker_workers(store, "train", train_args(store, corpus[1], store.url("models/workers")), tmp_path)
    assert "worker 0 merges" in errors[-1]
    tokenizer = store.tree("models/workers")
    assert set(tokenizer) == {"tokenizer.json", "tokenizer_config.json", "manifest.json"}  # nothing but the tokenizer
    assert {name: tokenizer[name] for name in trained} == trained
    assert any(key.endswith(".done") for key in store.tree("models/workers.counts"))  # the counts, beside it


@pytest.mark.parametrize("store", ["azure", "gcs"], indirect=True)
def test_train_store_to_store_two_workers_give_the_tokenizer_of_one_worker_on_local_files(store, corpus, trained):
    """What training alone asks of a store: its counts streamed up beside the tokenizer, fetched back by worker 0,
    the tokenizer written. Worker 1 counts, then worker 0 counts and merges, in this process: workers in processes
    of their own, at once, are the executor's (the pre-tokenization test runs them on every store; the S3 test
    above, training)."""
    for index in (1, 0):
        phase = "all" if index == 0 else "count"
        options = {"storage_options": store.storage_options, "shard_index": index, "num_shards": 2, "phase": phase}
        train_in_process(corpus[1], store.url("models/two"), **options)
    tokenizer = store.tree("models/two")
    assert set(tokenizer) == {"tokenizer.json", "tokenizer_config.json", "manifest.json"}  # nothing but the tokenizer
    assert {name: tokenizer[name] for name in trained} == trained
    assert sum(key.endswith(".done") for key in store.tree("models/two.counts")) >= 8  # the counts, beside it


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_serve_a_tokenizer_from_the_store_exactly_as_from_disk(store, tokenizer_dirs, servers, tmp_path, monkeypatch):
    """The same tokenizer served from the store and from disk (the session's server): the same fingerprint, the
    same /encode answers. A prefix holding nothing is refused naming its URL, by the load the server runs at
    start-up (a load refused stops the server, whatever the source: test_launch.py's
    test_a_model_that_cannot_load_raises_the_servers_own_error)."""
    source = tokenizer_dirs["wordpiece_default"]  # the session's server of it runs already, for the jobs
    store.make_buckets("served")
    fs = store.filesystem()
    for path in sorted(Path(source).iterdir()):
        if path.is_file():
            fs.put_file(str(path), f"served/tokenizers/default/{path.name}")
    env = {**job_env(store), STORAGE_OPTIONS_ENV: store.options_json}
    served, none = store.url("served/tokenizers/default/"), store.url("served/tokenizers/none/")
    texts = ["Hello world", "你好，世界", "😀 emoji", ""]
    local = servers["wordpiece_default"]
    with ServerProcess("--model", served, env=env, log_path=tmp_path / "store.log") as remote:
        infos = [
            json.loads(urllib.request.urlopen(server.url + "/info", timeout=30).read()) for server in (remote, local)
        ]
        assert infos[0]["fingerprint"] == infos[1]["fingerprint"]
        assert infos[0]["source"] == served
        for options in ({}, {"padding": True, "truncation": True, "max_length": 8, "return_offsets_mapping": True}):
            body = {"texts": texts, **options}
            assert post(remote.url + "/encode", body) == post(local.url + "/encode", body)
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, store.options_json)
    nothing = (
        f"^cannot load tokenizer {re.escape(repr(none))}: {re.escape(none)}: no such object, and no object under it$"
    )
    with pytest.raises(TokenizerLoadError, match=nothing):
        load_tokenizer(none)


def test_a_shard_or_a_record_written_to_a_missing_bucket_is_named_at_once(store, tmp_path):
    """What a worker does on an output in a bucket that does not exist: listing and clearing it find nothing;
    uploading a shard and writing a record (one PUT) are named as a missing bucket at once, instead of retried
    until the deadline (adlfs passes azure-core's 404 on a PUT untranslated). How the worker then stops is the
    same on every store: the refusals test (S3)."""
    storage = Storage(store.storage_options, retry_deadline=30)
    folder = storage.folder(store.url("absent/run"))
    assert folder.listing() == {}
    folder.remove_partial(["x.bin", "x.done"])  # what a worker does to a unit it is about to write
    shard = tmp_path / "x.bin"
    shard.write_bytes(bytes(range(256)))
    for name, write in (
        ("x.bin", lambda: folder.upload(shard, "x.bin")),
        ("x.done", lambda: folder.write_bytes("x.done", b"{}")),
    ):
        at = re.escape(store.url(f"absent/run/{name}"))
        with pytest.raises(StorageError, match=f"^{at}: cannot write there .*does the bucket exist"):
            write()


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


#: What a reader of a bucket may do: AWS checks a listing as s3:ListBucket and a HEAD as the GET it stands for;
#: moto since 5.2.6 checks each by its operation's own name (ListObjectsV2, HeadObject, HeadBucket): both, so either
#: lets the reader read
READING = ("s3:GetObject", "s3:ListBucket", "s3:ListObjectsV2", "s3:HeadObject", "s3:HeadBucket")


@s3_only
def test_refusals_name_the_url_and_what_the_store_said_never_a_secret(store, corpus, reference, tmp_path):
    """An empty glob, no credentials at all, a key the store does not know, a bucket the key may not write,
    and an output prefix holding another run's shards: each stops the worker (exit 1) before any work, naming
    the URL and what the store answered -- and no secret. An output in a bucket that does not exist stops it
    at its first write, saying so."""
    url = reference.url

    def attempt(inputs: str, out: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
        return run("pretokenize", *pretokenize_args(store, inputs, out, url), *extra, env=env, timeout=120)

    empty = attempt("s3://corpus/data/nothing-*.jsonl", "s3://tokens/empty", job_env(store))
    assert empty.returncode == 1 and "no input matches 's3://corpus/data/nothing-*.jsonl'" in empty.stderr

    absent = attempt(corpus[1], "s3://absent/x", job_env(store))
    assert absent.returncode == 1 and "s3://absent/x/" in absent.stderr and "does the bucket exist?" in absent.stderr

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

    expected = reference.on(store, "tokens/other")  # another run's shards and records, as it wrote them
    fs = store.filesystem()
    for name, data in expected.items():
        fs.pipe_file(f"tokens/other/{name}", data)
    other = attempt(corpus[1], "s3://tokens/other", job_env(store), "--no-add-special-tokens", "--format", "megatron")
    assert other.returncode == 1 and "s3://tokens/other: " in other.stderr and "other settings" in other.stderr
    assert store.tree("tokens/other") == expected  # refused before touching anything


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
