"""The README is a front door whose facts stay true; the examples themselves run in test_docs_examples.py and
the site is built and checked in test_docs_site.py."""

from __future__ import annotations

import re
from pathlib import Path

from scripts.doc_examples import CLONE_MARK

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
GUIDES = (
    "dataloader",
    "less-padding",
    "conversations",
    "pretokenize",
    "train",
    "deploying",
    "playground",
    "performance",
)


def test_readme_is_a_front_door():
    lines = README.count("\n")
    assert 150 <= lines <= 250, f"the README has {lines} lines: keep it a front door, move detail into docs/"
    for guide in GUIDES:
        assert f"](docs/guides/{guide}.md" in README, f"the README does not link the {guide} guide"
    assert "](docs/getting-started.md" in README


def test_readme_workflow_examples_are_there():
    """One short example per workflow: serve, DataLoader, conversations, pre-tokenize, train."""
    code = "\n".join(re.findall(r"```(?:bash|python)\n(.*?)```", README, re.S))
    for needle in (
        "make serve",
        "TokenizerClient.launch()",
        "tokenizer-service pretokenize",
        "tokenizer-service train",
        "chat_collator(",
        "DataLoader(",
    ):
        assert needle in code, needle


def test_readme_opens_with_the_one_command_that_sets_up_and_serves():
    """Defect: the first command shown was `make install` (silent for minutes), serving came sections later."""
    first_block = re.search(r"```(\w+)\n(.*?)```", README, re.S)
    assert first_block is not None and first_block[1] == "bash", "the README's first block is a command"
    command = first_block[2].removeprefix(CLONE_MARK + "\n")  # said first: it runs from the clone's root
    assert command.split("#")[0].strip() == "make serve", first_block[2]
    assert README[: first_block.start()].count("\n") <= 10, "make serve is the first thing a reader sees"
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^serve: \$\(STAMP\)$", makefile, re.M), "make serve sets up first"
    test_needs = re.search(r"^test: \$\((\w+)\)$", makefile, re.M)
    assert test_needs is not None, "make test names what it needs"
    needs = test_needs[1] == "STAMP" or re.search(rf"^{test_needs[1]} := \$\(STAMP\)", makefile, re.M)
    assert needs, "make test sets up first"


def test_make_install_says_what_it_does_as_it_goes():
    """Defect: `make install` ran pip with --quiet: minutes without a line. Each step is announced, and the
    long installs (torch, then the package and its extras) let pip print a line per package."""
    recipe = re.search(r"^\$\(STAMP\): .*?\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert recipe is not None
    lines = recipe[1].splitlines()
    steps = [line for line in lines if line.strip().startswith('@echo "==> [')]
    installs = [line for line in lines if "pip install" in line and "--upgrade pip" not in line]
    assert len(steps) == 3 and len(installs) == 2, lines
    assert not [line for line in installs if "--quiet" in line or " -q" in line], installs


def test_ci_runs_the_readme_test_command_and_builds_the_docs():
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in README and "make test" in ci
    assert "make docs" in README and "make docs" in ci


def test_default_tokenizer_stays_within_budget():
    folder = REPO / "service" / "default_tokenizer"
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 2 * 1024 * 1024
