"""Every code example of the README and the docs site runs as a reader pastes it.

A page's ```python and ```bash blocks run in order, as one reader goes through the page: from an empty
folder outside the clone, the reader's own, with the venv these tests run in activated (as the docs say,
once) and nothing else of this process's environment that could help: no ``TOKENIZER_SERVICE_*`` variable,
no ``PYTHONPATH`` to the repository. A block whose first line says ``# from the clone's root`` (the set-up:
``make``, ``pip install .``; the clone's own ``examples/``) runs in a folder laid out as the clone's root
instead (its files linked, ``.venv`` the venv these tests run in, its set-up marked done with ``make
--touch install``). A python block is saved to a file and run with ``python FILE``; a bash block runs in
``bash -e``. Nothing a page runs may show in the clone's ``git status``. What the tests do beyond running the
text (``scripts/doc_examples.py`` describes the directives a page may give a block):

- The address ``127.0.0.1:8000`` -- where the examples say a started service listens -- is replaced by the
  address of a real server on a free port: the one the page's ``serve`` block started (run as written,
  ``TOKENIZER_SERVICE_PORT`` choosing the port), else a shared server of the embedded default tokenizer.
- A block that starts worker processes (``num_workers=``, ``num_proc=``) runs with the ``spawn`` start method
  (the default on macOS and Windows), set by a ``sitecustomize`` module: the stricter of the two for a text,
  whose entry point must be guarded and whose workers' arguments must pickle. Under ``fork`` (Linux's
  default) the same client paths run in tests/data/test_client_dataloader.py, tests/launch/test_launch.py and
  tests/pretokenize/ (their ``fork`` cases).
- ``pip install`` resolves without installing (a ``pip`` first on ``PATH`` adds ``--dry-run``; the build of
  the package itself is real): the command, its path and its extras must be right, and the venv stays as it
  is.
- A launched service (``TokenizerClient.launch()``) meets its users in a folder of the test's own.
- Nothing else: no corpus, no tokenizer folder is made for a page. What a block needs, a block before it on
  the same page makes, as the reader sees it.
- ``skip`` blocks are not run; :func:`test_skipped_examples_are_few_and_say_why` lists and bounds them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.doc_examples import EXAMPLE_ADDRESS, Block, blocks, check_directive, pages
from testkit.servers import REPO, free_port
from testkit.venvs import linked_venv

#: The most blocks the docs may leave unrun (each with its reason): raise it only for a block no test can run.
MOST_SKIPPED = 17
#: The most blocks that must run in the clone's root (the set-up, the clone's examples and benchmarks): every
#: other block runs from any folder, as a reader outside the clone runs it.
MOST_IN_CLONE = 6
WORKERS = re.compile(r"\bnum_workers=[1-9]|\bnum_proc=[1-9]")
BLOCK_TIMEOUT = 240  # seconds
#: A package pin in a printed block, compared by name only (see PageRun.compare_output).
_PIN = re.compile(r"([A-Za-z0-9_.-]+)==[0-9][0-9A-Za-z.+-]*")
# `pip install ...` as `pip install --dry-run ...` (pip's own subprocesses, which install build dependencies,
# run `python -m pip` and are not affected)
PIP_DRY_RUN = """\
#!/bin/bash
if [ "$1" = install ]; then shift; exec python -m pip install --dry-run "$@"; fi
exec python -m pip "$@"
"""
SITECUSTOMIZE = """\
import os

_method = os.environ.get("DOCS_EXAMPLE_START_METHOD")
if _method:
    import multiprocessing

    multiprocessing.set_start_method(_method, force=True)
"""


def runnable_pages() -> list[Path]:
    return [page for page in pages() if any(b.kind in ("run", "serve", "continues") for b in blocks(page))]


# -- a reader's folders and environment ---------------------------------------------------------------------
def clone_root(folder: Path) -> Path:
    """A folder laid out as the clone's root: its tracked top-level files and folders linked, ``.venv`` the
    venv of this interpreter (where the examples' ``pip`` and ``tokenizer-service`` come from: its entries
    linked, not its set-up records), set up already as far as make knows (``make --touch install``)."""
    folder.mkdir()
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for name in sorted({path.split("/")[0] for path in tracked}):
        if (REPO / name).exists():
            (folder / name).symlink_to(REPO / name)
    linked_venv(folder / ".venv", cwd=folder)
    return folder


def installed_package_is_this_checkout() -> bool:
    """Whether the venv's own ``import service`` (no PYTHONPATH, from no checkout) is this checkout's package:
    not so in a git worktree whose venv's editable install is another checkout."""
    found = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "python"), "-c", "import service; print(service.__file__)"],
        cwd="/",
        env={name: value for name, value in os.environ.items() if not name.startswith("PYTHON")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(found).resolve().parent == REPO / "service"


def reader_env(private: Path, launch_dir: Path) -> dict[str, str]:
    """The environment of a reader with the venv activated; what the test adds to it lives in ``private``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("TOKENIZER_SERVICE_", "PYTHON", "VIRTUAL_ENV", "PIP_"))
    }
    bin_dir = str(Path(sys.prefix) / "bin")
    customize = private / "sitecustomize"
    customize.mkdir(parents=True, exist_ok=True)
    (customize / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = [str(customize)]  # the start-method switch: the package comes from the install
    if not installed_package_is_this_checkout():  # the package alone, as installed: not the clone's other folders
        package = private / "package"
        package.mkdir(exist_ok=True)
        (package / "service").symlink_to(REPO / "service")
        path.append(str(package))
    shims = private / "shims"
    shims.mkdir(exist_ok=True)
    (shims / "pip").write_text(PIP_DRY_RUN)
    (shims / "pip").chmod(0o755)
    env.update(
        PATH=os.pathsep.join([str(shims), bin_dir, env.get("PATH", "/usr/bin:/bin")]),
        VIRTUAL_ENV=sys.prefix,
        PYTHONPATH=os.pathsep.join(path),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        HF_HUB_OFFLINE="1",
        HF_HOME=str(private / "hf-home"),
        TOKENIZER_SERVICE_LAUNCH_DIR=str(launch_dir),
        MPLBACKEND="Agg",
    )
    return env


def clone_status() -> set[str]:
    """The clone's ``git status``, a line per changed or untracked file."""
    status = ["git", "status", "--porcelain", "--untracked-files=all"]
    return set(subprocess.run(status, cwd=REPO, capture_output=True, text=True, check=True).stdout.splitlines())


# -- running a page ------------------------------------------------------------------------------------------
class PageRun:
    """One reader going through one page: the reader's folder (empty, outside the clone), the clone's, the
    server the page talks to, what ran."""

    def __init__(self, page: Path, root: Path, launch_dir: Path, shared_server: object) -> None:
        self.page = page
        self.folder = root / "reader"
        self.folder.mkdir()
        self.clone = clone_root(root / "clone")
        self.private = root / "private"  # what the test adds: never in a folder the reader works in
        self.env = reader_env(self.private, launch_dir)
        self.shared_server = shared_server  # the `servers` fixture: its default server, started on first use
        self.address: str | None = None
        self.served: list[subprocess.Popen[bytes]] = []
        self.python_chain: list[Block] = []
        self.last_stdout: str | None = None
        self.start_methods: dict[str, list[str]] = {}

    def address_for(self, block: Block) -> str:
        if self.address is None:
            server = self.shared_server["wordpiece_default"]  # type: ignore[index]
            self.address = server.url.removeprefix("http://")
        return self.address

    def text_of(self, block: Block, code: str) -> str:
        assert "localhost:8000" not in code, f"{block.where}: the examples write {EXAMPLE_ADDRESS}"
        if EXAMPLE_ADDRESS in code:
            code = code.replace(EXAMPLE_ADDRESS, self.address_for(block))
        return code

    def run(self, block: Block) -> None:
        if block.kind == "serve":
            self.serve(block)
        elif block.kind == "output":
            self.compare_output(block)
        elif block.language == "python":
            chain = [*self.python_chain, block] if block.kind == "continues" else [block]
            self.python_chain = chain
            code = "\n".join(b.code for b in chain)
            self.run_python(block, code)
        elif block.language == "bash":
            self.run_process(block, ["bash", "-e", "-c", self.text_of(block, block.code)])

    def cwd_of(self, block: Block) -> Path:
        return self.clone if block.in_clone else self.folder

    def run_python(self, block: Block, code: str) -> None:
        script = self.cwd_of(block) / f"example_{block.page.stem.replace('-', '_')}_{block.line}.py"
        script.write_text(self.text_of(block, code))
        method = "spawn" if WORKERS.search(code) else ""
        self.run_process(block, [str(Path(sys.prefix) / "bin" / "python"), script.name], method)
        self.start_methods.setdefault(block.where, []).append(method or "none")

    def run_process(self, block: Block, argv: list[str], start_method: str = "") -> None:
        env = {**self.env, "DOCS_EXAMPLE_START_METHOD": start_method}
        done = subprocess.run(
            argv,
            cwd=self.cwd_of(block),
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
        how = f" under {start_method}" if start_method else ""
        assert done.returncode == 0, (
            f"{block.where} ({block.language}) failed{how}, exit {done.returncode}:\n"
            f"--- code ---\n{block.code}--- stderr ---\n{done.stderr[-4000:]}\n--- stdout ---\n{done.stdout[-2000:]}"
        )
        self.last_stdout = done.stdout

    def serve(self, block: Block) -> None:
        assert "--port" not in block.code, f"{block.where}: serve on the default port (the tests choose it)"
        port = free_port()
        log = self.private / f"serve_{block.line}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-e", "-c", block.code],
                cwd=self.cwd_of(block),
                env={**self.env, "TOKENIZER_SERVICE_PORT": str(port)},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as a whole at the page's end
            )
        self.served.append(proc)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{block.where}: the server exited {proc.returncode}:\n{log.read_text()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
                    if answer.status == 200:
                        self.address = f"127.0.0.1:{port}"
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        pytest.fail(f"{block.where}: the server was not ready in 90 s:\n{log.read_text()[-3000:]}")

    def compare_output(self, block: Block) -> None:
        assert self.last_stdout is not None, f"{block.where}: an output block follows no block that ran"
        printed = [line.rstrip() for line in self.last_stdout.rstrip("\n").splitlines()]
        shown = [line.rstrip() for line in block.code.rstrip("\n").splitlines()]
        # a package pin (name==version) is compared by name: the install takes each package's newest release
        # in range, which a page written before that release cannot show
        assert [_PIN.sub(r"\1==", line) for line in printed] == [_PIN.sub(r"\1==", line) for line in shown], (
            f"{block.where}: the block before prints\n" + "\n".join(printed)
        )

    def stop(self) -> None:
        for proc in self.served:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # the group this test started for the block
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5)


@pytest.fixture
def launch_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="tsx-", dir="/tmp"))  # short: a socket path holds 107 bytes
    try:
        yield folder
    finally:
        leftover = list(folder.glob("*.sock"))
        shutil.rmtree(folder, ignore_errors=True)
        assert not leftover, f"a launched service outlived its example: {leftover}"


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("page", runnable_pages(), ids=str)
def test_page_examples_run_as_written(page, tmp_path, launch_dir, servers):
    before = clone_status()
    run = PageRun(page, tmp_path, launch_dir, servers)
    try:
        for block in blocks(page):
            if block.kind in ("skip", "text"):
                continue
            run.run(block)
    finally:
        run.stop()
    print(f"{page}: start methods per block {run.start_methods}")
    assert clone_status() - before == set(), f"{page}: what its examples wrote shows in the clone's git status"


# -- the rules every page keeps ----------------------------------------------------------------------------
def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def test_every_directive_is_known():
    problems = [f"{b.where}: {problem}" for b in all_blocks() if (problem := check_directive(b))]
    assert not problems, "\n".join(problems)


def test_skipped_examples_are_few_and_say_why():
    skipped = [b for b in all_blocks() if b.kind == "skip"]
    listing = "\n".join(f"{b.where}: {b.skip_reason}" for b in skipped)
    print(f"examples not run ({len(skipped)}):\n{listing}")
    assert all(b.skip_reason for b in skipped)
    assert len(skipped) <= MOST_SKIPPED, f"{len(skipped)} examples are not run:\n{listing}"


def test_blocks_that_need_the_clone_are_few_and_say_so():
    """Every block runs from any folder but the set-up and the clone's own examples, whose first line says
    they run from the clone's root (defect: `AutoTokenizer.from_pretrained("service/default_tokenizer")`,
    `--like service/default_tokenizer` and `python -m examples...` worked only there, and said nothing)."""
    in_clone = [b for b in all_blocks() if b.in_clone and b.kind != "skip"]
    print("blocks run in the clone's root:\n" + "\n".join(f"{b.where}: {b.code.splitlines()[0]}" for b in in_clone))
    assert len(in_clone) <= MOST_IN_CLONE, [b.where for b in in_clone]
    for block in all_blocks():
        if block.kind in ("run", "serve", "continues") and not block.in_clone:
            assert "default_tokenizer" not in block.code, f"{block.where}: the embedded default by a clone's path"


def test_one_way_to_run_commands():
    """Every example runs commands the same way: in the activated venv (``source .venv/bin/activate``, said
    once), never ``.venv/bin/...``; and every python or bash block is one the tests run or skip by name."""
    for block in all_blocks():
        if block.language in ("python", "bash"):
            assert ".venv/bin/" not in block.code.replace("source .venv/bin/activate", ""), (
                f"{block.where}: run commands in the activated venv, without .venv/bin/"
            )
        assert block.language not in ("sh", "shell", "console", "py", "python3"), (
            f"{block.where}: write ```bash or ```python, so the tests find and run it"
        )


def test_workers_examples_run_under_spawn_too():
    """Some page shows a DataLoader with workers: the harness must see it (else its spawn run is silently off)."""
    assert any(WORKERS.search(b.code) for b in all_blocks() if b.kind in ("run", "continues"))


#: A test, script or deploy file a skip's reason names (``tests/jobs/test_corpus.py``, ``deploy/check.sh``).
NAMED_CHECK = re.compile(r"\b(?:tests|deploy|scripts|benchmarks)/[\w/.-]*\w")


def section_prose(block: Block) -> str:
    """The text a reader sees in ``block``'s section of its page (from the heading before it to the next
    heading): its prose without the code blocks, and without HTML comments, which neither GitHub nor the
    site shows."""
    lines = (REPO / block.page).read_text().splitlines()
    in_code: set[int] = set()  # 0-based lines of every fenced block, fences included
    for found in blocks(block.page):
        in_code.update(range(found.line - 1, found.line + found.code.count("\n") + 1))
    headings = [i for i, line in enumerate(lines) if line.startswith("#") and i not in in_code]
    start = max([i for i in headings if i < block.line - 1], default=0)
    stop = min([i for i in headings if i > block.line - 1], default=len(lines))
    prose = "\n".join(line for i, line in enumerate(lines[start:stop], start) if i not in in_code)
    return re.sub(r"<!--.*?-->", "", prose, flags=re.S)


def test_a_skipped_example_says_in_its_section_what_tests_it_instead():
    """Defect: Slurm's "not tested here" (and what tests its worker index instead) was only in the skip's
    HTML comment, which neither GitHub nor the site shows. Whatever a skip's reason names as tested instead
    is named in the prose of the block's section too, where a reader sees it."""
    unsaid = []
    for block in all_blocks():
        if block.kind != "skip":
            continue
        prose = section_prose(block)
        unsaid += [f"{block.where}: {name}" for name in NAMED_CHECK.findall(block.skip_reason) if name not in prose]
    assert not unsaid, "skips whose reason names a check the page does not show beside the block:\n" + "\n".join(unsaid)
