"""``tokenizer-service serve``: one process, one tokenizer, Rust parallelism on, never forks. Every flag is a field
of :class:`service.http.settings.Settings`."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import sys
import time
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import SecretStr, ValidationError

from ..engine import TokenizerLoadError, configure_rust_parallelism, load_tokenizer
from ..engine.loading import describe_source, keep_torch_out
from ..exits import EXIT_INTERRUPTED
from ..suggestions import ArgumentParser
from ..wire import ENV_PREFIX
from .port_taken import cannot_listen
from .settings import Settings

logger = logging.getLogger(__name__)

REFUSED_FLAGS = {
    "--workers": "the service runs exactly one process (it holds one Rust thread pool and must never fork); "
    "scale with --threads inside a pod and with replicas across pods",
    "--reload": "reloading forks a supervisor and restarts the tokenizer; run without it",
}


def _flag_type(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) > 1:
            return str  # a number or a word (--replicas 4, --replicas auto): the settings read it
        annotation = args[0]
    return str if annotation is SecretStr else annotation


def build_parser(prog: str = "tokenizer-service serve") -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        description="Serve a tokenizer over HTTP (POST /encode, /tokenize, /decode; GET /info, /healthz, "
        f"/readyz, /metrics, /docs). Each flag also reads the environment variable {ENV_PREFIX}<FLAG>.",
    )
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        env = ENV_PREFIX + name.upper()
        default = "" if field.default is None else f" (default: {field.default})"
        help_text = f"{field.description}{default} [env {env}]".replace("%", "%%")
        kind = _flag_type(field.annotation)
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text)
        elif typing.get_origin(kind) is typing.Literal:
            parser.add_argument(flag, choices=typing.get_args(kind), default=argparse.SUPPRESS, help=help_text)
        else:
            parser.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=help_text, metavar=name.upper())
    for flag, reason in REFUSED_FLAGS.items():
        parser.add_argument(flag, nargs="?", default=argparse.SUPPRESS, help=f"refused: {reason}")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service serve") -> int:
    try:
        return _serve(argv, prog)
    except KeyboardInterrupt:  # Ctrl-C before the server took the signal over (from then on, it drains)
        print(f"{prog}: interrupted (Ctrl-C) before serving; nothing was served", file=sys.stderr)
        return EXIT_INTERRUPTED


def _serve(argv: Sequence[str] | None, prog: str) -> int:
    parser = build_parser(prog)
    given = vars(parser.parse_args(argv))
    for flag in REFUSED_FLAGS:
        if flag.lstrip("-") in given:
            parser.error(f"{flag} is not supported: {REFUSED_FLAGS[flag]}")
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        lines = [f"  {'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors(include_url=False)]
        print(f"{prog}: invalid settings\n" + "\n".join(lines), file=sys.stderr)
        return 2

    who = " [pid %(process)d]" if settings.replicas != 1 or settings.replica_of != 1 else ""  # replicas share a log
    log_format = f"%(asctime)s %(levelname)s{who} %(name)s: %(message)s"
    logging.basicConfig(level=settings.log_level.upper(), format=log_format)
    if settings.replicas != 1:
        from .replicas import serve_replicas

        status = serve_replicas(settings, given, prog)
        if status is not None:
            return status  # else one replica is what the cores allow: this process serves
    # Said at once: loading takes seconds (a hub download minutes).
    logger.info("loading %s", describe_source(settings.model, settings.revision))
    from .server import OwnersWatch, SocketFile, bind_listener, bind_unix_listener, connection_guard, run

    socket_files: list[SocketFile] = []
    listeners: list[socket.socket] = []

    def leave_unserved() -> None:
        for listener in listeners:
            listener.close()
        for socket_file in socket_files:
            socket_file.remove()

    try:  # before the tokenizer loads: a port in use fails at once
        if settings.uds is not None:
            listener, socket_file = bind_unix_listener(settings.uds)
            listeners.append(listener)
            socket_files.append(socket_file)
    except OSError as exc:
        leave_unserved()
        print(f"{prog}: cannot listen on {settings.uds}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        if settings.uds is None or settings.reuse_port:  # a replica: the shared port, and its own socket
            listeners.append(bind_listener(settings.host, settings.port, reuse_port=settings.reuse_port))
    except OSError as exc:
        leave_unserved()
        print(cannot_listen(prog, settings.host, settings.port, exc), file=sys.stderr)
        return 1

    def stop_loading() -> None:  # the owners left during the load: nothing to drain
        leave_unserved()
        logging.shutdown()
        os._exit(0)

    owners = OwnersWatch(settings.owners_file, stop_loading).start() if settings.owners_file else None
    # Parallelism must be configured before tokenizers touches its rayon pool.
    threads = settings.rust_threads()
    configure_rust_parallelism(threads)
    keep_torch_out()  # this process serves and nothing else: transformers without the torch it never uses here
    started = time.monotonic()
    try:
        loaded = load_tokenizer(settings.model, settings.revision)
    except TokenizerLoadError as exc:
        leave_unserved()
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        leave_unserved()
        raise
    logger.info("loaded %s in %.1fs (%s)", loaded.source, time.monotonic() - started, loaded.fingerprint[:19])

    from .app import create_app
    from .runtime import Runtime

    runtime = Runtime(settings.model_copy(update={"threads": threads}), loaded)
    app = create_app(runtime.settings, runtime=runtime)
    guard = connection_guard(
        max_connections=settings.max_connections,
        max_header_bytes=settings.max_header_bytes,
        header_timeout=settings.header_timeout_seconds,
        body_timeout=settings.body_timeout_seconds,
        keep_alive=settings.keep_alive_seconds,
        drain_state=runtime,
    )
    # What is loaded now lives until exit: frozen, it costs no full collection while serving and none at exit
    # (1.4 s of interpreter teardown, measured, for the embedded default).
    gc.freeze()
    try:
        run(
            app,
            runtime,
            listeners=listeners,
            log_level=settings.log_level,
            access_log=settings.access_log,
            grace_seconds=settings.graceful_shutdown_seconds,
            drain_listen_seconds=settings.drain_listen_seconds,
            guard=guard,
            http_protocol=settings.http_protocol,
            socket_files=socket_files,
            owners=owners,
            # launch()'s servers drain for nobody; a `serve --replicas` replica (owned by its parent, so as not to
            # outlive it) drains for its port's clients
            private=owners is not None and not settings.reuse_port,
        )
    finally:
        for socket_file in socket_files:
            socket_file.remove()  # (the drain removed it already, unless interrupted otherwise)
    return 0
