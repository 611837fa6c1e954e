"""What ``TokenizerClient.launch`` runs: :class:`ServeCommand`, the ``serve`` command line, environment and launch
key of a launched service, built from ``launch``'s arguments (servers are started by exec, with exactly these
settings: this environment's ``TOKENIZER_SERVICE_*`` are not passed on; secrets go by environment)."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..embedded import DEFAULT_TOKENIZER, DEFAULT_TOKENIZER_DIR
from ..extras import unmet_line
from ..processes import child_environment
from ..serve_flags import serve_arguments
from ..sizing import AUTO, check_replicas, plan_replicas
from ..transport.exceptions import LaunchError
from ..wire import API_KEY_ENV, ENV_PREFIX
from .rendezvous import ServicePaths, launch_key

__all__ = ["ServeCommand", "RESERVED_OPTIONS", "check_server_installed"]

logger = logging.getLogger(__name__)

#: Serve settings ``launch`` sets itself.
RESERVED_OPTIONS = frozenset({"host", "port", "uds", "owners_file", "drain_listen_seconds", "reuse_port", "replica_of"})


@dataclass(frozen=True)
class ServeCommand:
    """How to start the service. Secrets go by environment (a command line is readable by other users);
    ``replicas_asked`` is as given, so ``"auto"`` is one key whatever each rank's count of cores."""

    python: str
    model: str | None
    flags: tuple[str, ...]
    secrets: tuple[tuple[str, str], ...]
    model_identity: Any
    description: str
    replicas: int = 1
    replicas_asked: int | str = 1
    threads: int | None = None  # each replica's Rust threads as the plan chose them (None: as the flags say)

    @classmethod
    def build(
        cls,
        model: str | os.PathLike[str] | None,
        serve_options: Mapping[str, Any],
        api_key: str | None,
        python: str,
        replicas: object = 1,
    ) -> ServeCommand:
        if isinstance(model, os.PathLike):
            model = os.fspath(model)  # a pathlib.Path to the tokenizer's folder, as often as not
        if model == DEFAULT_TOKENIZER:
            model = None  # the same service as launch() without a model, found under the same key
        if model is not None and not isinstance(model, str):
            raise TypeError(
                f"model must be a str or a path (a tokenizer file or folder, or a hub id) or None, "
                f"not {type(model).__name__}"
            )
        if "url" in serve_options or "urls" in serve_options:
            raise ValueError(
                "launch() starts a service of its own and knows its URL; to use a service that is running "
                "already, connect to it: TokenizerClient(url)"
            )
        reserved = sorted(RESERVED_OPTIONS & set(serve_options))
        if reserved:
            raise ValueError(
                f"launch() chooses where its service listens, who owns it and how it stops, so {reserved} cannot "
                "be set; for a service on a TCP port, run `tokenizer-service serve` and connect with its URL"
            )
        interpreter = shutil.which(python)
        if interpreter is None:
            raise LaunchError(
                f"python={python!r} is not an interpreter that can be run (neither an executable file nor a "
                "command on PATH): pass the path of the python that has tokenizer-service[server]"
            )
        asked = check_replicas(replicas)
        threads = serve_options.get("threads")
        if asked == AUTO:
            from ..calibration.auto import auto_plan

            calibrated = serve_options.get("calibrate", True) is not False
            revision = serve_options.get("revision")
            plan = auto_plan(model, revision, threads=threads, use_calibration=calibrated, python=interpreter)
            logger.info("TokenizerClient.launch(replicas='auto'): %s", plan.summary)
        else:
            plan = plan_replicas(asked, threads)
        if plan.warning:
            warnings.warn(f"TokenizerClient.launch: {plan.warning}", RuntimeWarning, stacklevel=5)  # the caller's line
        flags = tuple(serve_arguments(serve_options))
        secrets = ((API_KEY_ENV, api_key),) if api_key else ()
        identity, description = _model_identity(model)
        each = plan.threads if threads is None else None  # the plan's threads, where --threads is not a flag already
        return cls(interpreter, model, flags, secrets, identity, description, plan.count, asked, each)

    def key(self) -> str:
        arguments = [*self.flags, f"version={__version__}"]
        if self.replicas_asked != 1:
            arguments.append(f"replicas={self.replicas_asked}")
        return launch_key(self.model_identity, arguments, dict(self.secrets), self.python)

    def argv(self, paths: ServicePaths) -> list[str]:
        model = ["--model", self.model] if self.model is not None else []
        ours = ["--uds", paths.socket, "--owners-file", paths.owners, "--drain-listen-seconds", "0"]
        if self.replicas > 1:
            ours += ["--replica-of", str(self.replicas)]  # its share of the cores and of the memory limit
        if self.threads is not None:
            ours += ["--threads", str(self.threads)]
        return [self.python, "-m", "service", "serve", *ours, *model, *self.flags]

    def environment(self) -> dict[str, str]:
        env = child_environment({name: value for name, value in os.environ.items() if not name.startswith(ENV_PREFIX)})
        env.update(self.secrets)
        return env

    def name(self, replica: int) -> str:
        which = f"replica {replica + 1} of {self.replicas} of " if self.replicas > 1 else ""
        return f"{which}the tokenizer service for {self.description}"


def _model_identity(model: str | None) -> tuple[Any, str]:
    """(what identifies the tokenizer's files, a description): local files by real path, names, sizes and times
    (retraining in place changes them); a hub id by its name (``revision`` is among the flags)."""
    if model is None:
        return _files_identity(DEFAULT_TOKENIZER_DIR), "the embedded default tokenizer"
    path = Path(model).expanduser()
    if path.exists():
        return _files_identity(path), model
    return {"hub": model}, model


def _files_identity(path: Path) -> dict[str, Any]:
    # every file under a folder: named chat templates live in additional_chat_templates/
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    names = [path.name] if path.is_file() else [p.relative_to(path).as_posix() for p in files]
    stats = [(name, p.stat().st_size, p.stat().st_mtime_ns) for name, p in zip(names, files, strict=True)]
    return {"path": os.path.realpath(path), "files": stats}


def check_server_installed(python: str) -> None:
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return  # another interpreter: its own `serve` says what it lacks
    problem = unmet_line("server")  # what `serve` itself checks at start-up (service/extras.py)
    if problem is not None:
        raise LaunchError(
            f"TokenizerClient.launch runs the server with this interpreter ({sys.executable}): {problem} -- or "
            "pass python= an interpreter that has it, or run `tokenizer-service serve` elsewhere and connect with "
            "its URL"
        )
