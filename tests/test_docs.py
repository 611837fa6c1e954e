"""The README states facts a reader can run: keep them true."""

from __future__ import annotations

import re
from pathlib import Path

from service.http.settings import settings_table

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_readme_configuration_table_matches_the_settings_object():
    block = re.search(r"<!-- settings-table:start -->\n(.*?)\n<!-- settings-table:end -->", README, re.S)
    assert block, "README lost its settings table markers"
    assert block.group(1) == settings_table(), "run: python scripts/settings_table.py and paste into README"


def test_ci_runs_the_readme_test_command():
    assert "make test" in README
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_default_tokenizer_stays_within_budget():
    folder = REPO / "service" / "default_tokenizer"
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 2 * 1024 * 1024
