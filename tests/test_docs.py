"""The README is a front door whose facts stay true; the examples themselves run in test_docs_examples.py and
the site is built and checked in test_docs_site.py."""

from __future__ import annotations

import re
from pathlib import Path

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
        "tokenizer-service serve",
        "TokenizerClient.launch()",
        "tokenizer-service pretokenize",
        "tokenizer-service train",
        "chat_collator(",
        "DataLoader(",
    ):
        assert needle in code, needle


def test_ci_runs_the_readme_test_command_and_builds_the_docs():
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in README and "make test" in ci
    assert "make docs" in README and "make docs" in ci


def test_default_tokenizer_stays_within_budget():
    folder = REPO / "service" / "default_tokenizer"
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 2 * 1024 * 1024
