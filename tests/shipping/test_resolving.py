"""How pip resolves the extras (issue 42), in one venv made twice over: first as the Makefile makes .venv, then as a
training venv is made from it.

**As make makes .venv** (pip upgraded; torch==2.13.0 from the machine's wheel before the test extra): ``make
install``'s resolves land at once, and its editable build prints no warning. Defects: pip printed "This is taking
longer than usual" three times over the test extra, trying 60 aiobotocore, 28 s3fs and 23 boto3 releases (boto3
was open while aiobotocore pins botocore to a few releases; 42 s here), and two selenium releases that need a
certifi not released; and each of make install's four editable installs printed setuptools' boxed "Editable
installation" warning (a flat layout without ``package-dir``: setuptools installs a meta path finder and warns
about it; ``package-dir = {"" = "."}`` makes the editable install a .pth of the root). Each resolve is a dry run
(``pip install --dry-run --report``); the editable install is uninstalled again, leaving the venv as it was.

**Beside training**: the server extra installed into a training venv moves none of its packages, and ``serve``
there refuses a uvicorn its internals are not known to work on, naming the release and the range. Defect: the
server extra pinned ``uvicorn==0.54.0`` (service/http/server/ uses uvicorn's internals), so ``pip install
'tokenizer-service[server]'`` in a training venv moved that venv's uvicorn (and conflicted with anything needing
another release). It now accepts the releases the internals are tested on (``service/http/server/internals.py``:
``UVICORN_RELEASES``). The training venv is made as a training venv is: torch (the machine's CPU wheel; the venv
above), then transformers, datasets, accelerate and TRL, and uvicorn, as a venv with TRL's ``vllm`` extra has it
(vLLM's ``fastapi[standard]`` brings it): its newest release below the room's upper bound. Then ``pip install
--dry-run --report '.[server]'`` says what would move, and the extra is installed for real (the launched service
runs from this same venv).

The checks of make's venv are made, and kept, before the training packages join it, whatever order the tests run
in. Each pip is bounded in time: a resolver that backtracks fails here, it does not hang. pip reaches the index,
so a new upstream release that breaks a range shows here first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from service.http.server.internals import UVICORN_RELEASES
from testkit.venvs import CleanVenv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TORCH = "torch==2.13.0"  # the machine's CPU wheel (see the Makefile)
#: What pip says when its resolver backtracks: it tries older releases of a package, one after another.
BACKTRACKING = (
    "is looking at multiple versions of",
    "is still looking at multiple versions of",
    "taking longer than usual",
)
#: uvicorn: its newest release below the room's upper bound (one above it is refused by design).
NEWEST_UVICORN = "uvicorn" + ",".join(str(s) for s in SpecifierSet(UVICORN_RELEASES) if s.operator in ("<", "<="))
TRAINING_STACK = ("transformers", "datasets", "accelerate", "trl", NEWEST_UVICORN)
#: A release below the room's range (its internals test fails on it: no Connection: close on a cleared keep-alive).
UNTESTED_UVICORN = "0.52.4"
EXTRAS = ("server", "test")


@dataclass
class MakeChecks:
    """What pip said in the venv as make makes it: each extra's dry run (its output and report), the editable
    install's output."""

    resolves: dict[str, tuple[str, dict[str, Any]]]
    editable: str


@dataclass
class TrainingVenv:
    """The same venv made a training venv: what it held before the server extra, what the dry run said would
    install, what it held after the real install."""

    venv: CleanVenv
    before: dict[str, str]
    report: dict[str, Any]
    after: dict[str, str]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> CleanVenv:
    """A fresh venv as the Makefile makes .venv before the test extra: a current pip, then torch."""
    venv = CleanVenv(tmp_path_factory.mktemp("resolving") / "venv")
    venv.pip("install", TORCH)
    return venv


@pytest.fixture(scope="module")
def make_checks(venv: CleanVenv) -> MakeChecks:
    resolves = {}
    for extra in EXTRAS:  # pip's whole output (no --quiet: its resolver's messages are what is checked)
        report = venv.root.parent / f"{extra}.json"
        output = venv.pip("install", "--dry-run", "--report", str(report), f".[{extra}]", quiet=False, timeout=300)
        resolves[extra] = (output, json.loads(report.read_text()))
    editable = venv.pip("install", "--no-deps", "-e", ".", quiet=False, timeout=300)
    venv.pip("uninstall", "--yes", "tokenizer-service")
    return MakeChecks(resolves, editable)


@pytest.fixture(scope="module")
def training_venv(venv: CleanVenv, make_checks: MakeChecks) -> TrainingVenv:
    """After make_checks, always: the training packages would change what those resolves start from."""
    venv.pip("install", *TRAINING_STACK)
    before = venv.installed()
    report = venv.root.parent / "server-extra.json"
    venv.pip("install", "--dry-run", "--report", str(report), ".[server]")
    would: dict[str, Any] = json.loads(report.read_text())
    venv.pip("install", ".[server]")
    return TrainingVenv(venv, before, would, venv.installed())


def backtracking(output: str) -> list[str]:
    return [line for line in output.splitlines() if any(said in line for said in BACKTRACKING)]


@pytest.mark.parametrize("extra", EXTRAS)
def test_the_extras_resolve_without_backtracking(make_checks: MakeChecks, extra: str):
    output, report = make_checks.resolves[extra]
    assert not backtracking(output), "\n".join(backtracking(output))
    resolved = {entry["metadata"]["name"].lower() for entry in report["install"]}
    assert {"uvicorn", "transformers"} <= resolved, sorted(resolved)
    if extra == "test":
        assert {"s3fs", "aiobotocore", "boto3", "selenium"} <= resolved, sorted(resolved)


def test_the_editable_install_prints_no_warning(make_checks: MakeChecks):
    output = make_checks.editable
    assert "Successfully installed tokenizer-service" in output, output
    warnings = [line for line in output.splitlines() if "Warning" in line or "!!" in line]
    assert not warnings, output


def test_the_server_extra_moves_no_package_of_a_training_venv(training_venv: TrainingVenv):
    before = training_venv.before
    assert {"torch", "transformers", "datasets", "accelerate", "trl", "uvicorn"} <= set(before), sorted(before)
    assert "tokenizer-service" not in before, "the editable install of make's checks was left in the venv"
    would = {
        entry["metadata"]["name"].lower(): entry["metadata"]["version"] for entry in training_venv.report["install"]
    }
    moved = {
        name: (before[name], version) for name, version in would.items() if name in before and before[name] != version
    }
    assert not moved, f"the dry run would move {moved}"
    assert "tokenizer-service" in would and "uvicorn" not in would, sorted(would)
    changed = {name: (version, training_venv.after.get(name)) for name, version in before.items()}
    assert {name: change for name, change in changed.items() if change[0] != change[1]} == {}


def test_serve_refuses_a_uvicorn_outside_the_range_naming_it_and_the_range(training_venv: TrainingVenv, tmp_path):
    """Refused at start-up, before a line of the web layer is imported (never a crash deep in a request): the
    older release stands first on the path, where the installed package finds it."""
    venv = training_venv.venv
    older = tmp_path / "older-uvicorn"
    venv.pip("install", "--no-deps", "--target", str(older), f"uvicorn=={UNTESTED_UVICORN}")
    serve = venv.run(venv.bin("tokenizer-service"), "serve", cwd=tmp_path, PYTHONPATH=str(older))
    accepted = Requirement(f"uvicorn{UVICORN_RELEASES}")
    assert not accepted.specifier.contains(UNTESTED_UVICORN)
    assert serve.returncode == 2, serve.stderr
    assert serve.stderr == (
        f"tokenizer-service serve: uvicorn {UNTESTED_UVICORN} is installed, but {accepted} is needed: "
        "the server extra brings it, pip install 'tokenizer-service[server]'\n"
    )
