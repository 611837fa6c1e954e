"""Mutation check: every curated one-line bug in service/ (scripts/mutations.py) must make a test fail.

    .venv/bin/python -m scripts.mutants              # all of them (`make mutants`; ~25 min on 2 cores)
    .venv/bin/python -m scripts.mutants --list       # what is in the list
    .venv/bin/python -m scripts.mutants stride 502   # those whose name contains "stride" or "502"

Run from the repository root. The working tree is never touched: the repository is copied once into a
temporary directory (without .git, .venv, caches and results), and each mutation is applied there, one at a
time, then undone. For each, pytest runs the test files the mutation names (stopping at the first failure,
without hypothesis shrinking: ``--hypothesis-profile=mutants``); a mutation of the parity table is then run
against the real-server tier alone (tests/http/test_server.py), which must catch it too. First the same test
files run on the unmutated copy (``--no-baseline`` skips that), so a mutant is never "caught" by a test that
fails anyway. Real tokenizers come from the assets cache this checkout already holds
(``$TOKENIZER_SERVICE_ASSETS``, else ``.cache/assets``).

Exit status: 0 when every mutation was caught, 1 otherwise; one line per mutation says by which test.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from scripts.mutations import MUTATIONS, SERVER, Mutation
from testkit.objectstore import AZURITE_BIN, AZURITE_ENV

REPO = Path(__file__).resolve().parent.parent
NOT_COPIED = (".git", ".venv", ".cache", "bench-results", "__pycache__", ".hypothesis", ".mypy_cache")
NOT_COPIED += (".ruff_cache", ".pytest_cache", "*.egg-info", "build", "dist")
RUN_TIMEOUT = 900  # seconds per pytest run; a surviving mutant runs its test files to the end
BASELINE_TIMEOUT = 2400  # the unmutated copy runs every named file: most of the suite


@dataclass
class Outcome:
    """One pytest run: did a test fail (the mutant was caught), which one, how long it took."""

    status: str  # "caught", "survived", or "error" (pytest could not run the tests: exit 2-5, a timeout)
    detail: str
    seconds: float


def copy_repository(into: Path) -> Path:
    target = into / "repo"
    shutil.copytree(REPO, target, ignore=shutil.ignore_patterns(*NOT_COPIED), symlinks=True)
    return target


def run_tests(copy: Path, files: tuple[str, ...], processes: int = 0, timeout: float = RUN_TIMEOUT) -> Outcome:
    """pytest on ``files`` of ``copy``, stopping at the first failure; in ``processes`` pytest processes (a module
    each at a time, as ``make test``), or in one (0)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(copy),
        "RUST_BACKTRACE": "0",
        "TOKENIZER_SERVICE_ASSETS": os.environ.get("TOKENIZER_SERVICE_ASSETS", str(REPO / ".cache" / "assets")),
        AZURITE_ENV: os.environ.get(AZURITE_ENV, str(AZURITE_BIN)),  # the copy has no .cache: this one's Azurite
    }
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--hypothesis-profile=mutants"]
    if processes:
        command += ["-n", str(processes), "--dist", "loadfile"]
    started = time.monotonic()
    try:
        done = subprocess.run([*command, *files], cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome("error", f"pytest ran over {timeout:.0f} s", time.monotonic() - started)
    seconds = time.monotonic() - started
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.MULTILINE)
    if done.returncode == 1 and failed:
        return Outcome("caught", failed[0], seconds)
    if done.returncode == 0:
        return Outcome("survived", "every test passed", seconds)
    tail = " | ".join(done.stdout.strip().splitlines()[-3:] + done.stderr.strip().splitlines()[-2:])
    return Outcome("error", f"pytest exit {done.returncode}: {tail[-400:]}", seconds)


def check(mutation: Mutation, copy: Path) -> list[tuple[str, Outcome]]:
    """Apply ``mutation`` to ``copy``, run its tiers, undo it; (what ran, outcome) per run."""
    path = copy / mutation.path
    original = path.read_text()
    path.write_text(mutation.apply(original))
    try:
        runs = [(" ".join(mutation.caught_by), run_tests(copy, mutation.caught_by))]
        if mutation.parity:
            runs.append((f"{SERVER} alone", run_tests(copy, (SERVER,))))
        return runs
    finally:
        path.write_text(original)


def select(patterns: list[str]) -> list[Mutation]:
    if not patterns:
        return list(MUTATIONS)
    chosen = [m for m in MUTATIONS if any(p.lower() in m.name.lower() for p in patterns)]
    if not chosen:
        raise SystemExit(f"no mutation's name contains any of {patterns}; see --list")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.mutants",
        description=(__doc__ or "").split("\n\n")[0],
        epilog=(__doc__ or "").split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("names", nargs="*", help="run only mutations whose name contains one of these")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run of the unmutated copy")
    args = parser.parse_args(argv)
    chosen = select(args.names)
    if args.list:
        for m in chosen:
            tiers = " ".join(m.caught_by) + (f" + {SERVER} alone" if m.parity else "")
            within = f" (within {m.within})" if m.within else ""
            print(f"{m.name}\n    {m.at}: {m.node}{within}\n    -> {m.mutated}\n    caught by: {tiers}")
        return 0
    for m in chosen:  # all of them must apply before anything runs (a module gone: where its function went)
        m.apply((REPO / m.path).read_text() if (REPO / m.path).is_file() else "")

    started = time.monotonic()
    results: list[tuple[Mutation, list[tuple[str, Outcome]]]] = []
    with tempfile.TemporaryDirectory(prefix="tokenizer-mutants-") as scratch:
        copy = copy_repository(Path(scratch))
        if not args.no_baseline:
            files = tuple(dict.fromkeys(f for m in chosen for f in (*m.caught_by, *((SERVER,) if m.parity else ()))))
            # as make test runs them (TEST_PROCESSES, which `make mutants` passes on), else in one process
            baseline = run_tests(copy, files, int(os.environ.get("TEST_PROCESSES") or 0), BASELINE_TIMEOUT)
            passed = baseline.status == "survived"  # nothing failed: for the unmutated copy, what we want
            print(f"baseline, unmutated: {' '.join(files)} {'pass' if passed else 'FAIL'} in {baseline.seconds:.0f} s")
            if not passed:
                print(f"the unmutated tests do not pass ({baseline.detail}); fix that first", file=sys.stderr)
                return 1
        for index, mutation in enumerate(chosen, 1):
            runs = check(mutation, copy)
            results.append((mutation, runs))
            print(f"[{index}/{len(chosen)}] {mutation.name}", flush=True)
            for what, outcome in runs:
                print(f"    {outcome.status:8s} {outcome.seconds:5.0f} s  {what}: {outcome.detail}", flush=True)

    missed = [(m, what) for m, runs in results for what, outcome in runs if outcome.status != "caught"]
    caught = len(results) - len({m.name for m, _ in missed})
    print(f"\n{caught} of {len(results)} mutations caught in {time.monotonic() - started:.0f} s", flush=True)
    for mutation, what in missed:
        print(f"NOT CAUGHT: {mutation.name} ({what})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
