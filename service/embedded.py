"""The embedded default tokenizer: its name for every command, and its folder (package data: in every install,
the client alone too, and offline). ``tokenizer-service default-tokenizer`` prints the folder; ``--copy DIR``
copies the files into a folder of your own to change them. Standard library only."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

#: Its name wherever a tokenizer source is taken: ``serve --model`` (as no ``--model``), ``train --like``,
#: ``TokenizerClient.launch``.
DEFAULT_TOKENIZER = "embedded:default"
#: Its files' folder in the installed package: ``AutoTokenizer.from_pretrained(service.DEFAULT_TOKENIZER_DIR)``.
DEFAULT_TOKENIZER_DIR = Path(__file__).resolve().parent / "default_tokenizer"


def copy_default_tokenizer(target: str | Path) -> Path:
    """Copy the files into ``target`` (made if missing) and return it; FileExistsError rather than overwrite."""
    folder = Path(target)
    files = sorted(path for path in DEFAULT_TOKENIZER_DIR.iterdir() if path.is_file())
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"{folder} is a file, not a folder")
    taken = [folder / path.name for path in files if (folder / path.name).exists()]
    if taken:
        raise FileExistsError(f"{taken[0]} exists already: copy into another folder, or remove it")
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copyfile(path, folder / path.name)
    return folder


def build_parser(prog: str = "tokenizer-service default-tokenizer") -> argparse.ArgumentParser:
    from .suggestions import ArgumentParser

    parser = ArgumentParser(
        prog=prog,
        description=(
            "Print the folder of the embedded default tokenizer (its files ship in the package, so it works "
            f"offline, from any folder): AutoTokenizer.from_pretrained loads it. Every command also takes it by "
            f"name, {DEFAULT_TOKENIZER} (serve --model, train --like, TokenizerClient.launch); in Python, "
            "service.DEFAULT_TOKENIZER_DIR is the folder."
        ),
    )
    parser.add_argument(
        "--copy",
        metavar="DIR",
        help="copy its files into DIR (made if missing; no file there is overwritten) and print DIR",
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service default-tokenizer") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.copy is None:
        print(DEFAULT_TOKENIZER_DIR)
        return 0
    try:
        print(copy_default_tokenizer(args.copy))
    except OSError as exc:
        reason = f"{exc.strerror}: {exc.filename}" if exc.strerror else str(exc)
        print(f"{prog}: --copy {args.copy}: {reason}", file=sys.stderr)
        return 1
    return 0
