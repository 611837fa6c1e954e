"""Which worker this process is, from flags or the scheduler: the first present of the sources
``cli.WORKER_SOURCES`` lists (docs/guides/pretokenize.md, "Workers"), else worker 0 of 1. Half of a pair, a
SageMaker description that cannot be read, or two that disagree are errors, not guesses: a host taking itself for
the only worker would redo every unit and write the final outputs beside worker 0.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .errors import CorpusError

#: The total of a Kubernetes Indexed Job (its ``spec.completions``), which Kubernetes does not put in the environment.
TOTAL_ENV = "JOB_COMPLETIONS"
#: Where SageMaker describes a job's instances to each: a Processing job's container, a Training job's.
SAGEMAKER_RESOURCE_CONFIGS = ("/opt/ml/config/resourceconfig.json", "/opt/ml/input/config/resourceconfig.json")
SAGEMAKER_CURRENT_HOST_ENV, SAGEMAKER_HOSTS_ENV = "SM_CURRENT_HOST", "SM_HOSTS"  # a name, a JSON list
#: Another resource config file, read instead of SageMaker's (a test, a container that mounts it elsewhere).
RESOURCE_CONFIG_ENV = "TOKENIZER_SERVICE_RESOURCE_CONFIG"

T = TypeVar("T")


@dataclass(frozen=True)
class Worker:
    """This process's ``index`` in ``[0, count)`` among the workers, and where that came from."""

    index: int
    count: int
    source: str

    def take(self, units: Sequence[T]) -> list[T]:
        """``units[index::count]``: consecutive units go to different workers."""
        return list(units[self.index :: self.count])

    def describe(self) -> str:
        return f"worker {self.index} of {self.count} ({self.source})"


def resolve_worker(
    index: int | None = None,
    count: int | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    root: str | Path = "/",
) -> Worker:
    """This process's :class:`Worker`, or a :class:`CorpusError`; ``root``: where SageMaker's files are looked for."""
    env = os.environ if environ is None else environ
    if index is not None:
        if count is None:
            raise CorpusError("--shard-index needs --num-shards (the number of workers)")
        return _checked(index, count, "--shard-index/--num-shards")
    if "JOB_COMPLETION_INDEX" in env:
        total = count if count is not None else _optional_int_env(env, TOTAL_ENV)
        if total is None:
            raise CorpusError(
                "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but the number of workers is not: pass "
                f"--num-shards or set {TOTAL_ENV} to the Job's spec.completions"
            )
        source = "JOB_COMPLETION_INDEX, " + ("--num-shards" if count is not None else TOTAL_ENV)
        return _checked(_int_env(env, "JOB_COMPLETION_INDEX"), total, source)
    if count is not None:
        raise CorpusError("--num-shards needs --shard-index, or a scheduler's index in the environment")
    if "SLURM_ARRAY_TASK_ID" in env or "SLURM_ARRAY_TASK_COUNT" in env:
        task = _int_env(env, "SLURM_ARRAY_TASK_ID")
        total = _int_env(env, "SLURM_ARRAY_TASK_COUNT")
        first = _optional_int_env(env, "SLURM_ARRAY_TASK_MIN") or 0
        step = _optional_int_env(env, "SLURM_ARRAY_TASK_STEP") or 1
        if (task - first) % step:
            raise CorpusError(f"SLURM_ARRAY_TASK_ID={task} is not on the array's grid (min {first}, step {step})")
        return _checked((task - first) // step, total, "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT")
    for index_name, count_name in (("RANK", "WORLD_SIZE"), ("NODE_INDEX", "NUM_NODES")):
        if index_name in env or count_name in env:
            return _checked(_int_env(env, index_name), _int_env(env, count_name), f"{index_name}/{count_name}")
    return sagemaker_worker(env, root) or Worker(0, 1, "no index given: a single worker")


def sagemaker_worker(environ: Mapping[str, str], root: str | Path = "/") -> Worker | None:
    """The worker of a SageMaker instance; None when no description is present."""
    named = environ.get(RESOURCE_CONFIG_ENV)
    if named and not Path(named).exists():
        raise CorpusError(f"{RESOURCE_CONFIG_ENV}={named}: no such file")
    paths = [Path(named)] if named else [Path(root, path.lstrip("/")) for path in SAGEMAKER_RESOURCE_CONFIGS]
    places = [(str(path), *_read_resource_config(path)) for path in paths if path.exists()]
    if SAGEMAKER_CURRENT_HOST_ENV in environ or SAGEMAKER_HOSTS_ENV in environ:
        places.append((f"{SAGEMAKER_CURRENT_HOST_ENV}/{SAGEMAKER_HOSTS_ENV}", *_read_host_variables(environ)))
    if not places:
        return None
    (source, current, hosts), *others = places
    for other, other_current, other_hosts in others:
        if (other_current, other_hosts) != (current, hosts):
            raise CorpusError(
                f"SageMaker's descriptions of this job disagree: {source} says {current} of {', '.join(hosts)}, "
                f"{other} says {other_current} of {', '.join(other_hosts)}"
            )
    if current not in hosts:
        raise CorpusError(f"{source}: current_host {current!r} is not among hosts {hosts}")
    return _checked(hosts.index(current), len(hosts), f"SageMaker {current} of {', '.join(hosts)}")


def _read_resource_config(path: Path) -> tuple[str, list[str]]:
    try:
        config = json.loads(path.read_text("utf-8"))
        return _current_and_hosts(config["current_host"], config["hosts"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorpusError(f"{path}: not a SageMaker resource config with current_host and hosts ({exc})") from None


def _read_host_variables(environ: Mapping[str, str]) -> tuple[str, list[str]]:
    if SAGEMAKER_CURRENT_HOST_ENV not in environ or SAGEMAKER_HOSTS_ENV not in environ:
        raise CorpusError(f"{SAGEMAKER_CURRENT_HOST_ENV} and {SAGEMAKER_HOSTS_ENV} go together: set both, or neither")
    try:
        return _current_and_hosts(environ[SAGEMAKER_CURRENT_HOST_ENV], json.loads(environ[SAGEMAKER_HOSTS_ENV]))
    except (ValueError, TypeError) as exc:
        hosts = environ[SAGEMAKER_HOSTS_ENV]
        raise CorpusError(f"{SAGEMAKER_HOSTS_ENV}={hosts!r} is not a JSON list of hosts ({exc})") from None


def _current_and_hosts(current: object, hosts: object) -> tuple[str, list[str]]:
    if not isinstance(current, str) or not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise TypeError("current_host must be a string and hosts a list of strings")
    return current, sorted(hosts, key=_host_order)


def _host_order(host: str) -> list[tuple[int, int, str]]:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", host)]


def _int_env(env: Mapping[str, str], name: str) -> int:
    value = _optional_int_env(env, name)
    if value is None:
        raise CorpusError(f"{name} is not set, but its pair is: set both, or neither")
    return value


def _optional_int_env(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        raise CorpusError(f"{name}={value!r} is not an integer") from None


def _checked(index: int, count: int, source: str) -> Worker:
    if count < 1:
        raise CorpusError(f"the number of workers must be at least 1, not {count} ({source})")
    if not 0 <= index < count:
        raise CorpusError(f"worker index {index} is outside [0, {count}) ({source})")
    return Worker(index, count, source)
