"""The embedded default tokenizer: the name every command takes for it, and where its files are.

Its files ship inside the package (package data), so it is there in every install -- the client alone too --
and works offline, from any folder. ``tokenizer-service default-tokenizer`` prints its folder, and ``--copy DIR``
copies its files into a folder of your own (to change them: the package's own files are left as they are).
Standard library only: it runs on a client-only install.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

#: The name of the embedded default tokenizer, taken wherever a tokenizer source is: ``serve --model`` (the same as
#: no ``--model``), ``train --like``, ``TokenizerClient.launch``.
DEFAULT_TOKENIZER = "embedded:default"
#: The folder of its files (``tokenizer.json``, ``tokenizer_config.json``), inside the installed package:
#: ``AutoTokenizer.from_pretrained(service.DEFAULT_TOKENIZER_DIR)``.
DEFAULT_TOKENIZER_DIR = Path(__file__).resolve().parent / "default_tokenizer"


def copy_default_tokenizer(target: str | Path) -> Path:
    """Copy the embedded default tokenizer's files into ``target`` (made if missing) and return it; a file of
    the same name there is never overwritten (FileExistsError naming it)."""
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
