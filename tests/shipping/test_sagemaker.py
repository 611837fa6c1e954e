"""deploy/sagemaker/: the Processing entry point run as every instance of a job would run it -- one process
per host, each with its own SageMaker resource config -- against a real S3-protocol server on 127.0.0.1, and
the launcher's job checked without AWS.

The SageMaker SDK is not installed in the test environment (it would pull in ~50 packages and downgrade
protobuf and pyarrow): the launcher's plan is checked as data, and its submission through a stand-in
``Processor`` that records what the SDK would be given."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from testkit import corpora, jobs
from testkit.objectstore import LoopbackS3
from testkit.servers import REPO

pytestmark = pytest.mark.slow  # whole jobs run as SageMaker runs them: `make test-fast` leaves it to CI

SAGEMAKER = REPO / "deploy" / "sagemaker"
INDEX_VARIABLES = ("RANK", "WORLD_SIZE", "NODE_INDEX", "NUM_NODES", "JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID")


def load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"sagemaker_{name}", SAGEMAKER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Any:
    with LoopbackS3() as store:
        fs = store.filesystem()
        for bucket in ("sm-corpus", "sm-out"):
            if not fs.exists(bucket):  # moto's buckets outlive a server in this process
                fs.mkdir(bucket)
        root = tmp_path_factory.mktemp("corpus")
        store.documents = sum(corpora.write_jsonl(root / f"part-{i}.jsonl", 40_000, seed=i) for i in range(3))
        for path in sorted(root.iterdir()):
            fs.put_file(str(path), f"sm-corpus/web/{path.name}")
        yield store


def instances(s3: LoopbackS3, tmp_path: Path, command: list[str], hosts: int) -> list[str]:
    """Run the entry point once per host, all at once, as SageMaker starts them; each host's stderr."""
    names = [f"algo-{n}" for n in range(1, hosts + 1)]
    processes = []
    for host in names:
        config = tmp_path / f"{host}.json"
        config.write_text(json.dumps({"current_host": host, "hosts": names, "network_interface_name": "eth0"}))
        env = {name: value for name, value in os.environ.items() if name not in INDEX_VARIABLES}
        env.update(s3.client_env(), TOKENIZER_SERVICE_RESOURCE_CONFIG=str(config))
        env["TOKENIZER_SERVICE_STORAGE_OPTIONS"] = s3.options_json  # what launch.py --storage-options sets
        processes.append(jobs.start(command, env, python_args=[str(SAGEMAKER / "entrypoint.py")]))
    errors = [process.communicate(timeout=240)[1] for process in processes]
    assert [process.returncode for process in processes] == [0] * hosts, [err[-3000:] for err in errors]
    for index, (host, err) in enumerate(zip(names, errors, strict=True)):
        worker = f"worker {index} of {hosts} (SageMaker {host} of {', '.join(names)})"
        assert f"sagemaker: this instance is {worker}" in err  # before the sidecar starts
        assert f"pretokenize: {worker}" in err or f"train: {worker}" in err  # the job's own
    return errors


@pytest.mark.timeout(300)
def test_train_on_every_instance_node_0_writes_the_tokenizer_to_s3(s3, tmp_path):
    job = ["s3://sm-corpus/web/", "--out", "s3://sm-out/tokenizer", "--model", "byte-level-bpe", "--vocab-size", "600"]
    errors = instances(s3, tmp_path, ["train", "--", *job, "--unit-bytes", "32K", "--processes", "1"], hosts=3)
    assert "worker 0 merges" in errors[1]
    written = s3.tree("sm-out/tokenizer")
    assert set(written) == {"tokenizer.json", "tokenizer_config.json", "manifest.json"}
    assert json.loads(written["manifest.json"])["counts"]["documents"] == s3.documents
    assert any(key.endswith(".done") for key in s3.tree("sm-out/tokenizer.counts"))


@pytest.mark.timeout(300)
def test_pretokenize_on_every_instance_through_its_own_sidecar_or_a_deployed_service(s3, servers, tmp_path):
    """Each instance starts its own service (the default tokenizer), pre-tokenizes its share through it and
    stops it; node 0 writes the manifest. Then the same job through a deployed service's URL: the same
    objects."""
    job = ["s3://sm-corpus/web/", "--format", "flat", "--unit-bytes", "32K", "--progress", "none"]
    # two replicas run the many-core instance's path whatever --replicas auto's calibration plans on 2 cores
    sidecar_args = ["pretokenize", "--serve-arg=--replicas=2", "--", *job, "--out", "s3://sm-out/sidecar"]
    errors = instances(s3, tmp_path, sidecar_args, hosts=2)
    for err in errors:
        assert "sagemaker: starting the sidecar: tokenizer-service serve on http://127.0.0.1:" in err
        assert " with 2 replicas (pids " in err  # serve --replicas said the whole set is up
        assert "sagemaker: sidecar stopped (status 0)" in err
    sidecar = s3.tree("sm-out/sidecar")
    assert json.loads(sidecar["manifest.json"])["totals"]["documents"] == s3.documents

    url = servers["wordpiece_default"].url  # the same tokenizer, served elsewhere
    errors = instances(s3, tmp_path, ["pretokenize", "--url", url, "--", *job, "--out", "s3://sm-out/url"], hosts=2)
    assert not any("sidecar" in err for err in errors)
    deployed = s3.tree("sm-out/url")
    assert {k: v for k, v in deployed.items() if k != "manifest.json"} == {
        k: v for k, v in sidecar.items() if k != "manifest.json"
    }


def test_a_package_the_jobs_format_needs_is_missed_before_the_sidecar_starts(tmp_path):
    """pretokenize's default format is Parquet: an image without pyarrow (the jobs image once installed only
    the server and s3 extras) is told so in one line, naming the extra, before any instance loads a sidecar;
    a job argument the job refuses is refused there too (exit 2)."""
    hidden = tmp_path / "hidden" / "pyarrow"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pyarrow'\", name='pyarrow')\n")
    env = {name: value for name, value in os.environ.items() if name not in INDEX_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(hidden.parent), env.get("PYTHONPATH", "")])
    command = ["pretokenize", "--", "s3://sm-corpus/web/", "--out", "s3://sm-out/never"]
    process = jobs.start(command, env, python_args=[str(SAGEMAKER / "entrypoint.py")])
    err = process.communicate(timeout=120)[1]
    assert process.returncode == 1, err
    assert "sagemaker: error: the Parquet format needs pyarrow: pip install 'tokenizer-service[pipeline]'" in err
    assert "sidecar" not in err
    process = jobs.start([*command, "--format", "arrow"], env, python_args=[str(SAGEMAKER / "entrypoint.py")])
    err = process.communicate(timeout=120)[1]
    assert process.returncode == 2 and "invalid choice: 'arrow'" in err and "sidecar" not in err


def test_the_launcher_builds_a_processing_job_of_four_instances_with_s3_in_and_out():
    launch = load("launch")
    options = ["--image", "123.dkr.ecr/tok-jobs:1", "--role", "arn:aws:iam::1:role/r"]
    train = ["s3://corpus/web/", "--out", "s3://tokenizers/x", "--model", "byte-level-bpe", "--vocab-size", "32000"]
    job, dry_run = launch.plan(["train", *options, "--", *train])
    assert not dry_run and not job.follow and job.network == {}
    assert job.processor["instance_count"] == 4 and job.processor["image_uri"] == "123.dkr.ecr/tok-jobs:1"
    assert job.processor["entrypoint"] == ["python3", "/opt/tokenizer-service/sagemaker_entrypoint.py"]
    assert job.processor["env"] == {}
    assert job.arguments == ["train", "--", *train]
    entrypoint = load("entrypoint")  # what every instance does with those arguments
    args, rest = entrypoint.parse(job.arguments)
    assert args.command == "train" and rest == job.arguments[2:]
    dockerfile = (SAGEMAKER / "Dockerfile").read_text()
    assert f"COPY deploy/sagemaker/entrypoint.py {job.processor['entrypoint'][1]}" in dockerfile

    options = '{"endpoint_url": "https://s3.internal"}'
    network = ["--subnet", "subnet-1", "--security-group", "sg-1"]
    more = ["--storage-options", options, "--instance-count", "8", "--follow"]
    service = ["--url", "http://tok:8000", *network, *more]
    job, _ = launch.plan(
        ["pretokenize", "--image", "i", "--role", "r", *service, "--", "s3://corpus/", "--out=s3://tokens/run"]
    )
    assert job.arguments == [
        "pretokenize",
        "--url",
        "http://tok:8000",
        "--",
        "s3://corpus/",
        "--out=s3://tokens/run",  # the form the job's parser accepts too
    ]
    assert job.network == {"subnets": ["subnet-1"], "security_group_ids": ["sg-1"]} and job.follow
    assert job.processor["env"] == {"TOKENIZER_SERVICE_STORAGE_OPTIONS": options}
    assert job.processor["instance_count"] == 8

    for wrong, message in (
        (["train", "--image", "i", "--role", "r", "--", "corpus/", "--out", "local/dir"], "--out s3://"),
        (["train", "--image", "i", "--role", "r", "--", "s3://c/", "--out=local/dir"], "--out= s3://"),
        (["train", "--image", "i", "--role", "r", "--", "s3://c/", "--out"], "--out without a value"),
        (["train", "--image", "i", "--role", "r", "--url", "http://x", "--", "s3://c/", "--out", "s3://o"], "--url"),
        (["pretokenize", "--image", "i", "--role", "r", "--subnet", "s", "--", "s3://c/", "--out", "s3://o"], "go"),
    ):
        with pytest.raises(SystemExit) as refused:
            launch.plan(wrong)
        assert refused.value.code == 2, message


def test_the_launcher_shares_with_the_jobs_only_the_options_it_hands_on():
    """launch.py's own options and the jobs' (given after --) are one command line to a user: a name in both
    must mean the same thing in both (launch.py's --wait, a flag, once shadowed the jobs' --wait SECONDS)."""
    launch = load("launch")
    from service.pretokenize.cli import build_parser as pretokenize_parser
    from service.training.cli import build_parser as train_parser

    def options(parser: Any) -> set[str]:
        return {name for action in parser._actions for name in action.option_strings}

    launcher = options(launch.build_parser()) - {"-h", "--help"}
    handed_on = {
        "--url",  # entrypoint.py gives it to pretokenize
        "--storage-options",  # becomes the job's TOKENIZER_SERVICE_STORAGE_OPTIONS
        "--model",  # pretokenize's sidecar serves it; refused for train, whose --model (the family) goes after --
    }
    for job in (pretokenize_parser("pretokenize"), train_parser("train")):
        assert launcher & options(job) <= handed_on
    base = ["train", "--image", "i", "--role", "r", "--"]
    job, _ = launch.plan([*base, "s3://c/", "--out", "s3://o", "--model", "bpe", "--vocab-size", "900", "--wait", "60"])
    assert job.arguments[-2:] == ["--wait", "60"] and not job.follow


def test_the_launcher_hands_its_plan_to_the_sdk(monkeypatch):
    """A stand-in for the SDK's ``Processor``/``NetworkConfig`` (v2's module paths) records the calls."""
    launch = load("launch")
    calls: list[tuple[str, dict[str, Any]]] = []

    class Processor:
        def __init__(self, **kwargs: Any) -> None:
            calls.append(("Processor", kwargs))

        def run(self, **kwargs: Any) -> None:
            calls.append(("run", kwargs))

    class NetworkConfig:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    sdk = types.ModuleType("sagemaker")
    monkeypatch.setitem(sys.modules, "sagemaker", sdk)
    monkeypatch.setitem(sys.modules, "sagemaker.processing", types.SimpleNamespace(Processor=Processor))
    monkeypatch.setitem(sys.modules, "sagemaker.network", types.SimpleNamespace(NetworkConfig=NetworkConfig))
    argv = ["pretokenize", "--image", "i", "--role", "r", "--subnet", "s-1", "--security-group", "g-1", "--"]
    assert launch.main([*argv, "s3://c/", "--out", "s3://o/run"]) == 0
    (_, made), (_, ran) = calls
    job, _ = launch.plan([*argv, "s3://c/", "--out", "s3://o/run"])
    network = made.pop("network_config")
    assert made == job.processor and network.kwargs == {"subnets": ["s-1"], "security_group_ids": ["g-1"]}
    assert ran == {"arguments": job.arguments, "wait": False, "logs": False}
