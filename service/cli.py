"""``tokenizer-service serve``: one process, one tokenizer, Rust parallelism on, never forks.

Every flag is a field of :class:`service.settings.Settings` and can equally be set through its
``TOKENIZER_SERVICE_*`` environment variable; flags win.
"""

from __future__ import annotations

import argparse
import logging
import sys
import types
import typing
from typing import Any, Sequence

from . import __version__

REFUSED_FLAGS = {
    "--workers": "the service runs exactly one process (it holds one Rust thread pool and must never fork); "
    "scale with --threads inside a pod and with replicas across pods",
    "--reload": "reloading forks a supervisor and restarts the tokenizer; run without it",
}


def _flag_type(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = args[0] if args and (typing.get_origin(annotation) in (typing.Union, types.UnionType)) else annotation
    if getattr(base, "__name__", "") == "SecretStr":
        return str
    return base


def build_parser() -> argparse.ArgumentParser:
    from .settings import ENV_PREFIX, Settings

    parser = argparse.ArgumentParser(prog="tokenizer-service", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a tokenizer over HTTP",
                                description="Serve a tokenizer. Each flag also reads " + ENV_PREFIX + "<FLAG>.")
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        env = ENV_PREFIX + name.upper()
        default = "" if field.default is None else f" (default: {field.default})"
        help_text = f"{field.description}{default} [env {env}]".replace("%", "%%")
        kind = _flag_type(field.annotation)
        if kind is bool:
            serve.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text)
        else:
            serve.add_argument(flag, type=kind, default=argparse.SUPPRESS, help=help_text, metavar=name.upper())
    for flag, reason in REFUSED_FLAGS.items():
        serve.add_argument(flag, nargs="?", default=argparse.SUPPRESS, help=f"refused: {reason}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except ImportError as exc:  # a client-only install: the server's dependencies are an extra
        print(f"tokenizer-service: the server needs its extra: pip install 'tokenizer-service[server]' ({exc})",
              file=sys.stderr)
        return 2
    args = vars(parser.parse_args(argv))
    args.pop("command")  # "serve", the only command
    return serve(parser, args)


def serve(parser: argparse.ArgumentParser, given: dict[str, Any]) -> int:
    for flag in REFUSED_FLAGS:
        if flag.lstrip("-") in given:
            parser.error(f"{flag} is not supported: {REFUSED_FLAGS[flag]}")
    from pydantic import ValidationError

    from .settings import Settings

    try:
        settings = Settings(**given)
    except ValidationError as exc:
        lines = [f"  {'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors(include_url=False)]
        print("tokenizer-service: invalid settings\n" + "\n".join(lines), file=sys.stderr)
        return 2

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Parallelism must be configured before tokenizers touches its rayon pool.
    from .parallelism import available_cpus, configure_rust_parallelism

    threads = settings.threads or available_cpus()
    configure_rust_parallelism(threads)

    from .loading import TokenizerLoadError, load_tokenizer

    try:
        loaded = load_tokenizer(settings.model, settings.revision)
    except TokenizerLoadError as exc:
        print(f"tokenizer-service: {exc}", file=sys.stderr)
        return 1

    from .app import create_app
    from .serving import run

    app = create_app(settings.model_copy(update={"threads": threads}), loaded)
    run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=settings.access_log,
        grace_seconds=settings.graceful_shutdown_seconds)
    return 0
