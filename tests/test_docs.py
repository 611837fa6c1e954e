"""The README states facts a reader can run: keep them true."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from service.http.settings import settings_table
from testkit.servers import script_env

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


@pytest.mark.timeout(180)
def test_readme_token_budget_example_runs_as_written(servers, tmp_path):
    """The DataLoader example of "Less padding" is complete: it runs against a real server and prints what it says."""
    block = re.search(
        r"<!-- token-budget-example:start -->\n```python\n(.*?)```\n<!-- token-budget-example:end -->", README, re.S
    )
    assert block, "README lost its token-budget example markers"
    code = block.group(1)
    assert code.count("http://127.0.0.1:8000") == 1
    script = tmp_path / "example.py"
    script.write_text(code.replace("http://127.0.0.1:8000", servers["wordpiece_default"].url))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=script_env(), capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    paddings = [float(re.search(r"padding ([\d.]+)%", line).group(1)) for line in lines if line.startswith("epoch")]
    assert len(paddings) == 2 and max(paddings) < 10  # grouped: little padding
    assert lines[2].startswith("torch.Size([1, ") and "batches for rank 0 of 2" in lines[3]


@pytest.mark.timeout(120)
def test_readme_first_dataloader_example_launches_and_runs_as_written(tmp_path):
    """The first DataLoader example is the launched form: it runs as written, and leaves no server behind."""
    block = re.search(r"<!-- launch-example:start -->\n```python\n(.*?)```\n<!-- launch-example:end -->", README, re.S)
    assert block, "README lost its launch example markers"
    code = block.group(1)
    assert "TokenizerClient.launch()" in code and "http" not in code
    launch_dir = Path(tempfile.mkdtemp(prefix="tsd-", dir="/tmp"))  # short: a socket path holds 107 bytes
    script = tmp_path / "example.py"
    script.write_text(code)
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=script_env(TOKENIZER_SERVICE_LAUNCH_DIR=str(launch_dir)),
            capture_output=True,
            text=True,
            timeout=100,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.startswith("torch.Size([32, ") and "torch.Size([32, " in done.stdout.split(")", 1)[1]
        assert not list(launch_dir.glob("*.sock")), "the launched service outlived the example"
    finally:
        shutil.rmtree(launch_dir, ignore_errors=True)
