"""The ``tokenizer-service`` command. Each subcommand lives with the part it drives and is imported only when run,
so the command starts on a client-only install (``serve`` then says which extra it needs)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from . import __version__
from .extras import install_command, unmet_line
from .helptext import HelpFormatter
from .suggestions import ArgumentParser

PROG = "tokenizer-service"

# name -> (module with main(argv, prog) -> int, one line for --help, the extra it needs or None)
COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "serve": (
        "service.http.cli",
        "serve a tokenizer over HTTP: one process, Rust parallelism on, never forks",
        "server",
    ),
    "pretokenize": (
        "service.pretokenize.cli",
        "pre-tokenize a corpus through the service into token shards, one worker of many (client side)",
        "pipeline",
    ),
    "train": (
        "service.training.cli",
        "train a tokenizer from a corpus sharded across workers: each counts its units, worker 0 trains (server side)",
        "server",
    ),
    "calibrate": (
        "service.calibration.cli",
        "measure this machine with a tokenizer and plan replicas x threads (what replicas=auto uses)",
        "server",
    ),
    "default-tokenizer": (
        "service.embedded",
        "print the embedded default tokenizer's folder, or copy it (--copy DIR); commands take it as embedded:default",
        None,
    ),
}

# Commands whose whole extra is checked before they start (pretokenize names its extra only where it needs it).
WHOLE_EXTRA = frozenset({"serve", "train", "calibrate"})


def build_parser() -> argparse.ArgumentParser:
    listing = "\n".join(f"{name}\t{summary}" for name, (_, summary, _) in COMMANDS.items())  # a table (helptext)
    parser = ArgumentParser(
        prog=PROG,
        formatter_class=HelpFormatter,
        description="HuggingFace fast tokenization as a service, for training input pipelines: the server holds one "
        "fast tokenizer with its Rust thread pool and never forks; training processes (DataLoader workers too) call "
        "it over HTTP with the client SDK (service.client), which never loads the tokenizer.",
        epilog=f"commands:\n{listing}\n\n'{PROG} COMMAND --help' describes a command's options.",
        usage=f"{PROG} [-h] [--version] COMMAND ...",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("command", nargs="?", choices=sorted(COMMANDS), metavar="COMMAND", help="what to run (below)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error(f"name a command: {', '.join(COMMANDS)}")
    module_name, _, extra = COMMANDS[args.command]
    if extra is not None and args.command in WHOLE_EXTRA:
        problem = unmet_line(extra)
        if problem is not None:
            print(f"{PROG} {args.command}: {problem}", file=sys.stderr)
            return 2
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # a client-only install: the server's dependencies are an extra
        need = install_command(extra) if extra else "a complete install"
        print(f"{PROG} {args.command}: needs {need} ({exc})", file=sys.stderr)
        return 2
    status: int = module.main(args.args, prog=f"{PROG} {args.command}")
    return status
