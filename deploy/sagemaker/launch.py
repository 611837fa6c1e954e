"""Start the offline jobs as a SageMaker Processing job: N instances, S3 in, S3 out, no shared volume.

    python deploy/sagemaker/launch.py train --image IMAGE --role ROLE_ARN -- \\
        s3://corpus/web/ --out s3://tokenizers/web-bpe --model byte-level-bpe --vocab-size 32000
    python deploy/sagemaker/launch.py pretokenize --image IMAGE --role ROLE_ARN [--model s3://models/tok/] -- \\
        s3://corpus/web/ --out s3://tokens/web-v1 --format megatron --append-eos
    python deploy/sagemaker/launch.py pretokenize --url http://tokenizer.internal:8000 --subnet subnet-1 \\
        --security-group sg-1 --image IMAGE --role ROLE_ARN -- ...      # a deployed service, in your VPC

Every instance runs ``entrypoint.py`` (baked into the image by ``deploy/sagemaker/Dockerfile``) with the same
arguments; each finds its index in SageMaker's resource config. The job has no processing inputs or outputs:
the jobs read and write S3 themselves, with the job role's credentials. ``--dry-run`` prints what would be
submitted without the SDK. Needs the SageMaker Python SDK (``pip install sagemaker``), v2 or v3.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Where deploy/sagemaker/Dockerfile puts the entry point in the image.
ENTRYPOINT = ["python3", "/opt/tokenizer-service/sagemaker_entrypoint.py"]
STORAGE_OPTIONS_ENV = "TOKENIZER_SERVICE_STORAGE_OPTIONS"


@dataclass(frozen=True)
class ProcessingJob:
    """What is submitted: the ``Processor`` arguments and the ``run`` arguments, SDK-free."""

    processor: dict[str, Any]
    arguments: list[str]
    network: dict[str, Any] = field(default_factory=dict)  # NetworkConfig's arguments; {}: none
    follow: bool = False  # stay until the job ends, streaming its logs

    def describe(self) -> str:
        return json.dumps({"processor": self.processor, "network": self.network, "arguments": self.arguments}, indent=1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launch.py",
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Everything after -- goes to tokenizer-service train/pretokenize on every instance.",
    )
    parser.add_argument("command", choices=("train", "pretokenize"))
    parser.add_argument("--image", required=True, help="the image URI (deploy/sagemaker/Dockerfile, pushed to ECR)")
    parser.add_argument("--role", required=True, help="the job's IAM role ARN: read the corpus, write --out")
    parser.add_argument("--instance-count", type=int, default=4, help="instances, one worker each (default 4)")
    parser.add_argument("--instance-type", default="ml.c5.4xlarge", help="default ml.c5.4xlarge")
    parser.add_argument("--volume-size", type=int, default=100, metavar="GB", help="ML storage volume (default 100)")
    parser.add_argument("--max-runtime", type=int, default=24 * 3600, metavar="SECONDS", help="default 24 h")
    parser.add_argument("--job-name", default=None, help="base job name (default tokenizer-<command>)")
    parser.add_argument("--storage-options", metavar="JSON", help="fsspec options (an endpoint...); no credentials")
    parser.add_argument("--url", help="pretokenize: a deployed service's URL instead of a sidecar per instance")
    parser.add_argument("--model", help="pretokenize's sidecar: the tokenizer to serve (a directory, hub id or URL)")
    parser.add_argument("--subnet", action="append", default=[], help="VPC subnet (repeat): to reach --url")
    parser.add_argument("--security-group", action="append", default=[], help="VPC security group (repeat)")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="stay until the job ends, streaming its logs (not the job's --wait SECONDS: give that after --)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would be submitted and exit")
    return parser


def plan(argv: Sequence[str]) -> tuple[ProcessingJob, bool]:
    """The job the command line describes, and whether it is a dry run; SystemExit(2) on a usage error."""
    argv = list(argv)
    if "--" not in argv:
        build_parser().error("give the job's arguments after --")
    split = argv.index("--")
    parser = build_parser()
    args, job_args = parser.parse_args(argv[:split]), argv[split + 1 :]
    out = job_out(job_args)
    if out is None or "://" not in out:
        parser.error("the job needs --out s3://...: an instance's disk is gone when the job ends")
    if args.instance_count < 1:
        parser.error("--instance-count must be at least 1")
    if args.command == "train" and (args.url or args.model):
        parser.error("--url and --model are for pretokenize")
    if args.url and args.model:
        parser.error("--model configures the sidecar, which --url replaces")
    if bool(args.subnet) != bool(args.security_group):
        parser.error("--subnet and --security-group go together")
    env = {}
    if args.storage_options:
        try:
            json.loads(args.storage_options)
        except ValueError as exc:
            parser.error(f"--storage-options is not JSON ({exc})")
        env[STORAGE_OPTIONS_ENV] = args.storage_options
    entry = [args.command, *(["--url", args.url] if args.url else []), *(["--model", args.model] if args.model else [])]
    processor = {
        "role": args.role,
        "image_uri": args.image,
        "instance_count": args.instance_count,
        "instance_type": args.instance_type,
        "entrypoint": ENTRYPOINT,
        "volume_size_in_gb": args.volume_size,
        "max_runtime_in_seconds": args.max_runtime,
        "base_job_name": args.job_name or f"tokenizer-{args.command}",
        "env": env,
    }
    network = {"subnets": args.subnet, "security_group_ids": args.security_group} if args.subnet else {}
    return ProcessingJob(processor, [*entry, "--", *job_args], network, args.follow), args.dry_run


def job_out(job_args: Sequence[str]) -> str | None:
    """The job's ``--out``, read as the job's own parser reads it (``--out X``, ``--out=X``); None if absent."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--out")
    try:
        known, _ = parser.parse_known_args(job_args)
    except argparse.ArgumentError:  # --out without a value
        return None
    return known.out  # type: ignore[no-any-return]


def _sdk() -> tuple[Any, Any]:
    """``(Processor, NetworkConfig)`` of the installed SageMaker SDK (v3's module paths, else v2's)."""
    try:
        from sagemaker.core.network import NetworkConfig  # type: ignore[import-not-found]
        from sagemaker.core.processing import Processor  # type: ignore[import-not-found]
    except ImportError:
        try:
            from sagemaker.network import NetworkConfig  # type: ignore[import-not-found]
            from sagemaker.processing import Processor  # type: ignore[import-not-found]
        except ImportError:
            raise SystemExit("launch.py needs the SageMaker Python SDK: pip install sagemaker") from None
    return Processor, NetworkConfig


def submit(job: ProcessingJob) -> Any:
    """Create the Processing job (no inputs, no outputs: the jobs use S3 themselves); the Processor."""
    processor_type, network_type = _sdk()
    extra = {"network_config": network_type(**job.network)} if job.network else {}
    processor = processor_type(**job.processor, **extra)
    processor.run(arguments=job.arguments, wait=job.follow, logs=job.follow)
    return processor


def main(argv: Sequence[str] | None = None) -> int:
    job, dry_run = plan(sys.argv[1:] if argv is None else argv)
    print(job.describe())
    if not dry_run:
        submit(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
