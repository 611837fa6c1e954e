"""The SageMaker Processing entry point of the offline jobs: what every instance of the job runs.

    python entrypoint.py train -- s3://corpus/web/ --out s3://tokenizers/web-bpe --model bpe --vocab-size 32000
    python entrypoint.py pretokenize -- s3://corpus/web/ --out s3://tokens/web-v1 --format megatron --append-eos
    python entrypoint.py pretokenize --model s3://models/my-tokenizer/ -- ...   # the sidecar serves this tokenizer
    python entrypoint.py pretokenize --url http://tokenizer.internal:8000 -- ...  # a deployed service instead

Everything after ``--`` goes to ``tokenizer-service train`` or ``tokenizer-service pretokenize`` unchanged:
every instance gets the same arguments. Each instance finds its index itself, from SageMaker's resource
config (``current_host`` among ``hosts``: algo-1 is worker 0; where a Processing or a Training job puts it);
no channel, no shared volume: inputs are read from S3 and outputs written there by the jobs themselves.
Before anything starts, the job's arguments are checked by the job's own parser, with the packages they
need (``--format parquet`` needs pyarrow: the ``pipeline`` extra) and the instance's place among the workers.

``pretokenize`` needs the service: without ``--url``, each instance starts its own (``tokenizer-service serve``
on 127.0.0.1, a sidecar process in the same container: a Processing job runs one container per instance),
waits until it is ready, pre-tokenizes its share through it and stops it. The sidecar runs ``--replicas auto``:
the replicas x Rust threads a calibration of the instance plans (made as it starts, within ``--ready-timeout``;
the default plan where it cannot measure), all on its one port; ``--serve-arg=--replicas=N`` overrides it.
Temporary files (spooled uploads, counting spills) go to the job's ML storage volume (``/opt/ml/processing``)
when it is writable.

Exit status: the job's (0 done, 1 failed, 2 wrong arguments, 3 worker 0 gave up waiting), or 1 when the
checks before the start failed or the sidecar did not become ready. It runs with the image's Python, which
has the project installed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

#: Where SageMaker mounts the job's ML storage volume (``volume_size_in_gb``) in a Processing container.
PROCESSING_VOLUME = Path("/opt/ml/processing")
#: How the sidecar scales with the instance: as many server processes as its cores keep busy.
SIDECAR_SCALING = ("--replicas", "auto")


def log(message: str) -> None:
    print(f"sagemaker: {message}", file=sys.stderr, flush=True)


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    if "--" not in argv:
        raise SystemExit("usage: entrypoint.py {train,pretokenize} [options] -- JOB ARGUMENTS (see the docstring)")
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="entrypoint.py", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("command", choices=("train", "pretokenize"))
    parser.add_argument("--url", help="pretokenize: a deployed service's URL (default: a sidecar per instance)")
    parser.add_argument("--model", help="pretokenize's sidecar: the tokenizer to serve (a directory, hub id or URL)")
    parser.add_argument(
        "--serve-arg", action="append", default=[], metavar="ARG", help="more arguments for the sidecar's serve"
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=600.0, metavar="SECONDS", help="how long the sidecar may take to load"
    )
    args = parser.parse_args(argv[:split])
    if args.command == "train" and (args.url or args.model or args.serve_arg):
        parser.error("--url, --model and --serve-arg are for pretokenize")
    if args.url and (args.model or args.serve_arg):
        parser.error("--model and --serve-arg configure the sidecar, which --url replaces")
    return args, argv[split + 1 :]


def preflight(command: str, job_args: Sequence[str]) -> str:
    """The job's arguments through the job's own parser (SystemExit 2 when wrong), the packages they need,
    and this instance's place among the workers, described; a JobError when the job cannot run here. Done
    before the sidecar starts: it takes a while to load, and each host would start one for nothing."""
    from service.cli import COMMANDS
    from service.jobs import cli as jobcli
    from service.jobs import resolve_worker

    module_name, _, extra = COMMANDS[command]
    try:
        job = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"sagemaker: {command} needs pip install 'tokenizer-service[{extra}]' ({exc})") from None
    config = jobcli.parse(job.build_parser(f"tokenizer-service {command}"), job_args, job.CONFIG)
    config.check_installed()
    return resolve_worker(config.shard_index, config.num_shards, config.environ).describe()


def job_environment() -> dict[str, str]:
    env = dict(os.environ)
    scratch = PROCESSING_VOLUME / "tmp"
    if "TMPDIR" not in env and PROCESSING_VOLUME.is_dir() and os.access(PROCESSING_VOLUME, os.W_OK):
        scratch.mkdir(exist_ok=True)
        env["TMPDIR"] = str(scratch)  # the job's volume, not the container's small root disk
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(server: subprocess.Popen[bytes], url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            log(f"the sidecar exited with status {server.returncode} before it was ready")
            return False
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    log(f"the sidecar was not ready within {timeout:.0f} s (--ready-timeout)")
    return False


def stop(server: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)  # drains: nothing is in flight once the job is done
        try:
            server.wait(grace)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    log(f"sidecar stopped (status {server.returncode})")


def main(argv: Sequence[str] | None = None) -> int:
    args, job_args = parse(sys.argv[1:] if argv is None else argv)
    from service.jobs import JobError

    try:
        log(f"this instance is {preflight(args.command, job_args)}")
    except JobError as exc:
        log(f"error: {exc}")
        return 1
    env = job_environment()
    command = [sys.executable, "-m", "service", args.command, *job_args]
    if args.command == "train" or args.url:
        if args.url:
            command += ["--url", args.url]
        return subprocess.call(command, env=env)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", str(port), *SIDECAR_SCALING]
    serve += [*(["--model", args.model] if args.model else []), *args.serve_arg]  # (a flag given twice: the last wins)
    log(f"starting the sidecar: tokenizer-service serve on {url}")
    server = subprocess.Popen(serve, env=env)
    try:
        if not wait_ready(server, url, args.ready_timeout):
            return 1
        return subprocess.call([*command, "--url", url], env=env)
    finally:
        stop(server)


if __name__ == "__main__":
    sys.exit(main())
