"""The jobs image run as SageMaker runs it, on two hosts: deploy/check.sh's test of deploy/sagemaker/.

    python deploy/sagemaker/check_hosts.py IMAGE [--docker /usr/bin/docker]

For each job, the image's entry point (launch.py's ``ENTRYPOINT``) runs in two containers at once, one per
host, each with its own resource config mounted where the platform puts it -- pretokenize as a Processing
job (``/opt/ml/config/``), train as a Training job (``/opt/ml/input/config/``) -- against a loopback S3 server
(moto's server mode on 127.0.0.1, which the containers reach with ``--network host``), with the image's
defaults (pretokenize's format: Parquet; its sidecar: the embedded tokenizer). Each host must say which worker
it is; the objects the two write must be byte-identical to those of one worker (the same image, one
container, no resource config, writing to a local folder), but for the seconds and peak memory train's
manifest records. Exit 0 when they are, 1 with the hosts' logs
otherwise. Run with the project's venv (moto, s3fs): deploy/check.sh does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(Path(__file__).parent)]

from launch import ENTRYPOINT, STORAGE_OPTIONS_ENV  # noqa: E402  (this folder's launcher)

from service.jobs.workers import SAGEMAKER_RESOURCE_CONFIGS  # noqa: E402
from testkit import corpora  # noqa: E402
from testkit.objectstore import LoopbackS3  # noqa: E402

PROCESSING_CONFIG, TRAINING_CONFIG = SAGEMAKER_RESOURCE_CONFIGS
HOSTS = ("algo-1", "algo-2")
CONTAINER = "tokenizer-service-check-{job}-{host}"
CORPUS = "s3://corpus/web/"
LOCAL_OUT = "/out"  # where the one worker's folder is mounted in its container
# job -> (where its kind of SageMaker job puts the resource config, the job's arguments but --out)
JOBS: dict[str, tuple[str, list[str]]] = {
    "pretokenize": (PROCESSING_CONFIG, ["--unit-bytes", "32K", "--progress", "none"]),
    "train": (
        TRAINING_CONFIG,
        ["--model", "byte-level-bpe", "--vocab-size", "600", "--unit-bytes", "32K", "--processes", "1"],
    ),
}


def log(message: str) -> None:
    print(message, flush=True)


def docker_run(
    docker: str, image: str, name: str, env: dict[str, str], mounts: list[str], args: Sequence[str]
) -> subprocess.Popen[str]:
    command = [docker, "run", "--rm", "--name", name, "--network", "host", "--cap-drop", "ALL"]
    command += [item for key, value in env.items() for item in ("--env", f"{key}={value}")]
    command += [item for mount in mounts for item in ("--volume", mount)]
    command += ["--entrypoint", ENTRYPOINT[0], image, *ENTRYPOINT[1:], *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def local_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def check_job(docker: str, image: str, s3: LoopbackS3, job: str, work: Path) -> list[str]:
    """Run ``job`` on two hosts and on one worker, all at once; the problems found."""
    config_path, job_args = JOBS[job]
    env = {**s3.client_env(), STORAGE_OPTIONS_ENV: s3.options_json}
    runs: dict[str, subprocess.Popen[str]] = {}
    for host in HOSTS:
        config = work / f"{job}-{host}.json"
        config.write_text(json.dumps({"current_host": host, "hosts": list(HOSTS), "network_interface_name": "eth0"}))
        arguments = [job, "--", CORPUS, "--out", f"s3://out/{job}", *job_args]
        mounts = [f"{config}:{config_path}:ro"]
        runs[host] = docker_run(docker, image, CONTAINER.format(job=job, host=host), env, mounts, arguments)
    single = work / "single"
    single.mkdir(mode=0o777, exist_ok=True)
    single.chmod(0o777)  # the image's user writes there
    arguments = [job, "--", CORPUS, "--out", f"{LOCAL_OUT}/{job}", *job_args]
    mounts = [f"{single}:{LOCAL_OUT}"]
    runs["one worker"] = docker_run(docker, image, CONTAINER.format(job=job, host="single"), env, mounts, arguments)
    outputs = {name: run.communicate(timeout=600)[0] for name, run in runs.items()}
    problems = [f"{name}: exit {run.returncode}" for name, run in runs.items() if run.returncode]
    expected = {name: f"worker {i} of 2 (SageMaker {name} of {', '.join(HOSTS)})" for i, name in enumerate(HOSTS)}
    expected["one worker"] = "worker 0 of 1 (no index given: a single worker)"
    for name, worker in expected.items():
        if f"sagemaker: this instance is {worker}" not in outputs[name] or f"{job}: {worker}" not in outputs[name]:
            problems.append(f"{name}: did not say it is {worker}")
    if not problems:
        problems += compare(job, s3.tree(f"out/{job}"), local_tree(single / job))
    if problems:
        for name, output in outputs.items():
            log(f"--- {job}, {name}: last lines ---\n" + "\n".join(output.splitlines()[-25:]))
    return problems


def compare(job: str, hosts: dict[str, bytes], one: dict[str, bytes]) -> list[str]:
    """The two hosts' objects against the one worker's files, byte for byte (but where each was written, which
    a manifest names, and what :func:`comparable` leaves out)."""
    here, there = f"{LOCAL_OUT}/{job}".encode(), f"s3://out/{job}".encode()
    one = {name: content.replace(here, there) for name, content in one.items()}
    if job == "train":  # the counts are beside --out, in OUT.counts/: --out holds the tokenizer alone
        if set(hosts) != {"tokenizer.json", "tokenizer_config.json", "manifest.json"}:
            return [f"train: the hosts wrote {sorted(hosts)} into --out"]
    if set(hosts) != set(one):
        return [f"{job}: the hosts wrote {sorted(set(hosts) ^ set(one))} where one worker did not, or the reverse"]
    differ = [name for name in sorted(hosts) if comparable(job, name, hosts[name]) != comparable(job, name, one[name])]
    if differ:
        return [f"{job}: {name} differs from one worker's" for name in differ]
    log(f"{job}: the 2 hosts wrote {len(hosts)} objects ({', '.join(sorted(hosts)[:3])}, ...), as one worker")
    return []


def comparable(job: str, name: str, content: bytes) -> bytes:
    """``content``, less what differs from run to run by design: the seconds and peak memory that train's
    manifest records (its ``phases``)."""
    if job == "train" and name == "manifest.json":
        manifest = json.loads(content)
        manifest.pop("phases")
        return json.dumps(manifest, sort_keys=True).encode()
    return content


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("image")
    parser.add_argument("--docker", default="docker")
    args = parser.parse_args(argv)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="sagemaker-hosts-") as folder, LoopbackS3() as s3:
        work = Path(folder)
        fs = s3.filesystem()
        for bucket in ("corpus", "out"):
            fs.mkdir(bucket)
        for n in range(3):
            path = work / f"part-{n}.jsonl"
            corpora.write_jsonl(path, 40_000, seed=n)
            fs.put_file(str(path), f"{CORPUS.removeprefix('s3://')}{path.name}")
        for job, (config_path, _) in JOBS.items():
            started = time.monotonic()
            log(f"{job}: 2 hosts, resource config at {config_path}; 1 worker, none; at once")
            try:
                problems += check_job(args.docker, args.image, s3, job, work)
            finally:
                names = [CONTAINER.format(job=job, host=host) for host in (*HOSTS, "single")]
                subprocess.run([args.docker, "rm", "--force", *names], capture_output=True, check=False)
            log(f"{job}: {time.monotonic() - started:.1f} s")
    for problem in problems:
        log(f"FAILED: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
