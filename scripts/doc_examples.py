"""The code examples of the README and the docs site, as the tests run them (``tests/shipping/test_docs_examples.py``).

Every fenced ```` ```python ```` and ```` ```bash ```` block of ``README.md`` and ``docs/**/*.md`` is an example
the tests run, exactly as written, from an empty folder outside the clone -- unless its first line says
``# from the clone's root`` (the set-up with ``make``, ``pip install .``, the clone's own ``examples/``), which
the reader sees too, or an HTML comment on the line before it says otherwise (invisible on GitHub and on the
site). What the comment may say:

``<!-- example: skip: REASON -->``
    Not run, for the reason given (it needs a Kubernetes cluster, AWS, a GPU...). Keep these few:
    ``python -m scripts.doc_examples --skipped`` lists them, and the tests bound their number.
``<!-- example: serve -->``
    A bash block that starts a server and keeps running (``tokenizer-service serve``): the tests start it
    in the background, on a free port, and the page's later blocks talk to it.
``<!-- example: continues -->``
    A python block that goes on from the page's python block before it (the reader's session goes on): it
    runs as one script with the blocks it continues, and says so to the reader in its first line, a comment
    (``# continues the block above: ...``).

Nothing else is made for a page: what a block needs (a corpus, a tokenizer folder) is made by a block the
page shows before it.
``<!-- example: output -->``
    On a ```` ```text ```` block: what the runnable block before it prints, compared line by line.

``python -m scripts.doc_examples`` lists every block with what the tests do with it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNNABLE = ("python", "bash")
#: The first line of a block that runs in the clone's root (every other block runs from any folder).
CLONE_MARK = "# from the clone's root"
#: The address the examples use for a service the reader started; the tests substitute the one they started.
EXAMPLE_ADDRESS = "127.0.0.1:8000"

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`\n]*)$")
_DIRECTIVE = re.compile(r"^\s*<!-- example: (?P<body>.*?) -->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path  # relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    directive: str  # the comment's body on the line before ("" when none)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str:
        """run, skip, serve, continues, output, or text (a block nothing runs: yaml, text, ...)."""
        if self.directive.startswith("skip:"):
            return "skip"
        if self.directive in ("serve", "continues", "output"):
            return self.directive
        if self.language in RUNNABLE:
            return "run"
        return "text"

    @property
    def in_clone(self) -> bool:
        """Whether the block runs in the clone's root (its first line says so), not from any folder."""
        return self.code.startswith(CLONE_MARK)

    @property
    def skip_reason(self) -> str:
        return self.directive.removeprefix("skip:").strip()


def pages() -> list[Path]:
    """The README and every page of the site, relative to the repository root."""
    return [Path("README.md"), *sorted(p.relative_to(REPO) for p in (REPO / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order, each with the directive on the line before it."""
    lines = (REPO / page).read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        language = opening["info"].strip().split(" ")[0]
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        directive = ""
        if start > 0:
            comment = _DIRECTIVE.match(lines[start - 1])
            if comment:
                directive = comment["body"].strip()
        found.append(Block(page, start + 1, language, "\n".join(body) + "\n", directive))
        i += 1
    return found


def check_directive(block: Block) -> str | None:
    """What is wrong with a block's directive, or None."""
    directive = block.directive
    if not directive:
        return None
    if directive.startswith("skip:"):
        return None if block.skip_reason else "a skip says why"
    if directive == "continues" and not block.code.startswith("# continues"):
        return "a continuing block says so in its first line: # continues the block above: ..."
    if directive in ("serve", "continues"):
        return None if block.language in RUNNABLE else f"{directive} is for python and bash blocks"
    if directive == "output":
        return None if block.language == "text" else "output is for ```text blocks"
    return f"unknown directive {directive!r}"


def main(argv: list[str]) -> int:
    skipped_only = "--skipped" in argv
    for page in pages():
        for block in blocks(page):
            if block.kind == "text":
                continue
            if skipped_only and block.kind != "skip":
                continue
            note = f" ({block.skip_reason})" if block.kind == "skip" else ""
            where = " (in the clone)" if block.in_clone else ""
            print(f"{block.where:<40} {block.language:<7} {block.kind}{where}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
