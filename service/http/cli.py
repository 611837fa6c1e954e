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
from ..helptext import HelpFormatter, short_usage
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


#: The help's sections, in order: (title, description, the Settings fields in it), each field once; the first
#: (title None) holds what a first run sets, and is the usage.
LAYOUT: tuple[tuple[str | None, str | None, tuple[str, ...]], ...] = (
    (None, None, ("model", "revision", "host", "port", "threads", "replicas", "api_key", "log_level")),
    (
        "request limits (over one: refused at once, 413/422; all in GET /info)",
        None,
        (
            "max_texts_per_request",
            "max_text_chars",
            "max_body_bytes",
            "max_response_tokens",
            "memory_budget_mib",
            "allow_chat_template_bodies",
        ),
    ),
    (
        "batching and the queue",
        None,
        (
            "batching",
            "batch_wait_ms",
            "max_batch_texts",
            "max_batch_chars",
            "max_queued_requests",
            "max_queued_texts",
            "queue_timeout_seconds",
        ),
    ),
    (
        "connections",
        None,
        (
            "uds",
            "max_connections",
            "keep_alive_seconds",
            "max_header_bytes",
            "header_timeout_seconds",
            "body_timeout_seconds",
            "http_protocol",
            "access_log",
        ),
    ),
    ("shutdown (SIGTERM)", None, ("graceful_shutdown_seconds", "drain_listen_seconds")),
    ("--replicas auto", None, ("calibrate",)),
    (
        "set by a launcher (TokenizerClient.launch, --replicas), not by hand",
        None,
        ("owners_file", "reuse_port", "replica_of"),
    ),
)


def build_parser(prog: str = "tokenizer-service serve") -> argparse.ArgumentParser:
    placed = [name for _, _, names in LAYOUT for name in names]
    if sorted(placed) != sorted(Settings.model_fields):
        raise ValueError(
            f"serve's help LAYOUT places {sorted(placed)}, not the settings {sorted(Settings.model_fields)}"
        )
    parser = ArgumentParser(
        prog=prog,
        formatter_class=HelpFormatter,
        description="Serve a tokenizer over HTTP (POST /encode, /tokenize, /decode; GET /info, /healthz, "
        f"/readyz, /metrics, /docs). Each flag also reads an environment variable, {ENV_PREFIX}<FLAG> "
        f"(--max-text-chars: {ENV_PREFIX}MAX_TEXT_CHARS); flags win.",
    )
    for title, description, names in LAYOUT:
        group = parser if title is None else parser.add_argument_group(title, description)
        for name in names:
            _add_setting(group, name)
    refused = parser.add_argument_group("refused (uvicorn's, which this server does not take)")
    for flag, reason in REFUSED_FLAGS.items():
        refused.add_argument(flag, nargs="?", default=argparse.SUPPRESS, help=reason)
    parser.usage = short_usage(parser, LAYOUT[0][2])
    return parser


def _add_setting(group: Any, name: str) -> None:
    field = Settings.model_fields[name]
    flag = "--" + name.replace("_", "-")
    default = "" if field.default is None else f" (default: {field.default})"
    help_text = f"{field.description}{default}".replace("%", "%%")
    kind = _flag_type(field.annotation)
    if kind is bool:
        group.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text)
    elif typing.get_origin(kind) is typing.Literal:
        group.add_argument(flag, choices=typing.get_args(kind), default=argparse.SUPPRESS, help=help_text)
    else:
        group.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=help_text, metavar=_metavar(name, kind))


def _metavar(name: str, kind: Any) -> str:
    """A number's unit (SECONDS, MS) or N; else the setting's name (MODEL, HOST)."""
    if kind in (int, float):
        return next((unit.upper() for unit in ("seconds", "ms") if name.endswith("_" + unit)), "N")
    return name.upper()


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
        from .replicas import plan_for, serve_replicas

        plan = plan_for(settings, prog)
        if plan.count > 1:
            return serve_replicas(settings, given, prog, plan)
        # one replica is what the plan asks for: this process serves, with the plan's threads
        settings = settings.model_copy(update={"replicas": 1, "threads": plan.threads})
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
