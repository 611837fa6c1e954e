"""Every install we offer, made in a clean venv exactly as the docs say (getting-started.md, "Installing
elsewhere"; the jobs' guides), each running what that install promises -- the development venv proves nothing of
them: it has every extra, and torch brings packages the server extra must declare itself (jinja2).

- **The server** (``pip install '.[server]'``, no torch): serves a tokenizer whose chat templates have
  ``{% generation %}`` markers; ``deploy/smoke.py routes`` checks every route of the app's route table against
  transformers in this process; a package of the extra missing is refused at start-up in one line.
- **The client alone** (``pip install .``, then torch for tensors): none of the server's stack installed; the
  client encodes, ``serve`` and ``train`` name the extra they need, the flat pre-tokenization runs; the README's
  DataLoader example in forked workers, against the server venv's server (spawned workers run the same example
  in tests/shipping/test_docs_examples.py).
- **The jobs** (``.[pipeline,s3]`` for ``pretokenize``, ``.[server,s3]`` for ``train``): both against a real
  S3-protocol server on 127.0.0.1 (moto's server mode), their outputs read back here.

The image is the last install: ``deploy/check.sh`` builds it and runs the same route checks in it. Each venv
(``testkit.venvs.CleanVenv``) first upgrades its pip, as the docs ask (Python 3.11's own pip 23.2 took ~3 minutes
backtracking through boto3's releases over the s3 extra); the venvs share pip's cache (a wheel downloaded once
serves every venv); torch comes from the machine's wheel; nothing is compiled to bytecode at install time (Python
does it on first import).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts.doc_examples import EXAMPLE_ADDRESS, blocks
from service.extras import install_command
from testkit import corpora
from testkit.servers import REPO, ServerProcess
from testkit.venvs import CLEAN_ENV, CleanVenv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: The server's stack: none of it may be in a client-only install.
SERVER_STACK = ("tokenizers", "transformers", "jinja2", "fastapi", "pydantic", "uvicorn")
TORCH = "torch==2.13.0"  # the machine's CPU wheel: any looser spec downloads CUDA builds (see the Makefile)


@pytest.fixture(scope="module")
def server_venv(tmp_path_factory: pytest.TempPathFactory) -> CleanVenv:
    venv = CleanVenv(tmp_path_factory.mktemp("installs") / "server")
    venv.pip("install", ".[server]")
    return venv


@pytest.fixture(scope="module")
def venv_server(
    server_venv: CleanVenv, chat_tokenizer_dirs: dict[str, Path], tmp_path_factory
) -> Iterator[ServerProcess]:
    """The server venv's ``tokenizer-service serve`` of a tokenizer with generation markers, run from a folder of
    its own (so it imports the installed package, not the clone's)."""
    cwd = tmp_path_factory.mktemp("server-cwd")
    model = str(chat_tokenizer_dirs["wordpiece_default"])
    log = cwd / "serve.log"
    server = ServerProcess("--model", model, python=server_venv.python, repo=cwd, log_path=log, env=CLEAN_ENV)
    server.start(timeout=120)
    try:
        yield server
    finally:
        server.stop()


def test_the_server_install_serves_every_route_as_transformers_does(server_venv, venv_server, chat_tokenizer_dirs):
    installed = server_venv.installed()
    assert "torch" not in installed, "the server extra pulled in torch"
    smoke = subprocess.run(
        [sys.executable, "deploy/smoke.py", "routes", venv_server.url, "--model", venv_server.args[1]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert smoke.stdout.startswith("routes: all "), smoke.stdout


def test_the_server_install_starts_without_a_word_about_torch(venv_server):
    """Defect: the server-only install (no torch, on purpose: tokenizers need none) logged transformers'
    "[transformers] PyTorch was not found. Models won't be available..." at every start. That line alone is
    dropped: its start-up log is what serve itself says, and uvicorn's lines."""
    assert venv_server.log_path is not None
    log = venv_server.log_path.read_text()
    assert "serving on http://127.0.0.1:" in log, log
    assert "PyTorch was not found" not in log and "[transformers]" not in log, log


def test_the_server_install_refuses_to_start_without_a_package_of_its_extra(server_venv, tmp_path):
    jinja2 = server_venv.installed()["jinja2"]
    server_venv.pip("uninstall", "--yes", "jinja2")
    try:
        serve = server_venv.run(server_venv.bin("tokenizer-service"), "serve", cwd=tmp_path, timeout=60)
    finally:
        server_venv.pip("install", "--no-deps", f"jinja2=={jinja2}")
    assert serve.returncode == 2
    assert serve.stderr == (
        "tokenizer-service serve: jinja2 is not installed: the server extra brings it, "
        "pip install 'tokenizer-service[server]'\n"
    )


def readme_dataloader_example(url: str) -> str:
    """The README's DataLoader example, with the deployed-service form its own comment gives for the client."""
    readme = blocks(Path("README.md"))
    (example,) = [b for b in readme if "TokenizerClient.launch()" in b.code and "DataLoader" in b.code]
    assert '# or TokenizerClient("http://127.0.0.1:8000")' in example.code
    return example.code.replace("TokenizerClient.launch()", f'TokenizerClient("http://{EXAMPLE_ADDRESS}")').replace(
        f"http://{EXAMPLE_ADDRESS}", url
    )


def test_the_client_install_alone_encodes_and_runs_the_readme_dataloader(tmp_path, venv_server):
    venv = CleanVenv(tmp_path / "client")
    venv.pip("install", ".")
    installed = venv.installed()
    for package in (*SERVER_STACK, "torch"):
        assert package not in installed, f"a client-only install pulled in {package}"

    script = (
        "from service.client import TokenizerClient\n"
        f"client = TokenizerClient({venv_server.url!r})\n"
        "batch = client(['你好', 'hello world'], padding=True, return_tensors='np')\n"
        "print(batch['input_ids'].shape)\n"
    )
    result = venv.run(venv.python, "-c", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(2, 4)"

    serve = venv.run(venv.bin("tokenizer-service"), "serve", cwd=tmp_path)
    assert serve.returncode == 2 and len(serve.stderr.splitlines()) == 1, serve.stderr
    assert serve.stderr.startswith("tokenizer-service serve: ") and "tokenizer-service[server]" in serve.stderr
    train = venv.run(  # training runs the tokenizers trainers: server side too
        venv.bin("tokenizer-service"), "train", str(tmp_path), "--out", str(tmp_path / "t"), "--model", "bpe",
        "--vocab-size", "100", cwd=tmp_path,
    )  # fmt: skip
    assert train.returncode == 2 and "tokenizer-service[server]" in train.stderr, train.stderr

    # Pre-tokenization is client side: the flat format runs on this install; Parquet names its extra.
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "你好"}\n{"text": "hello world"}\n', encoding="utf-8")
    command = [venv.bin("tokenizer-service"), "pretokenize", str(corpus), "--url", venv_server.url]
    flat = venv.run(*command, "--out", str(tmp_path / "flat"), "--format", "flat", cwd=tmp_path)
    assert flat.returncode == 0, flat.stderr
    assert (tmp_path / "flat" / "manifest.json").exists() and (tmp_path / "flat" / "corpus.jsonl.00000.ds").exists()
    parquet = venv.run(*command, "--out", str(tmp_path / "parquet"), cwd=tmp_path)
    assert parquet.returncode == 1 and "tokenizer-service[pipeline]" in parquet.stderr

    # Without torch, what needs it says so, and what to install, when it is asked for (defect: a bare
    # "ModuleNotFoundError: No module named 'torch'" from the first batch).
    asked = {
        'return_tensors="pt"': "client(['你好'], return_tensors='pt')",
        "a collator (client.collator())": "client.collator()",
        "a chat collator (client.chat_collator())": "client.chat_collator()",
        "service.data.TokenizedStream": "__import__('service.data', fromlist=['_']).TokenizedStream",
        "service.pretokenize.TokenBlocks": "__import__('service.pretokenize', fromlist=['_']).TokenBlocks",
    }
    attempts = "".join(
        f"try:\n    {call}\nexcept ModuleNotFoundError as exc:\n    print(exc)\nelse:\n    print('no error')\n"
        for call in asked.values()
    )
    script = f"from service.client import TokenizerClient\nclient = TokenizerClient({venv_server.url!r})\n{attempts}"
    result = venv.run(venv.python, "-c", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{what} needs torch, which is not installed: the torch extra brings it, {install_command('torch')}"
        for what in asked
    ]

    # The embedded default tokenizer is in this install too: its folder, by Python and by the command.
    folder = venv.run(venv.python, "-c", "import service; print(service.DEFAULT_TOKENIZER_DIR)", cwd=tmp_path)
    printed = venv.run(venv.bin("tokenizer-service"), "default-tokenizer", cwd=tmp_path)
    assert folder.returncode == 0 and printed.returncode == 0, folder.stderr + printed.stderr
    assert folder.stdout == printed.stdout and printed.stdout.startswith(str(venv.root)), printed.stdout
    assert (Path(printed.stdout.strip()) / "tokenizer.json").is_file()

    # The DataLoader needs torch: the training image has it (here the machine's wheel).
    venv.pip("install", TORCH)
    example = tmp_path / "example.py"
    example.write_text(readme_dataloader_example(venv_server.url), "utf-8")
    # Forked workers, named (Python 3.14 makes forkserver Linux's default). A package this install lacks shows
    # here: the workers run the collator. What spawn adds does not depend on the install -- the entry point
    # guarded, the collator pickled, each worker importing torch again (~4 CPU-s apiece) -- and is run elsewhere:
    # this very example under spawn by tests/shipping/test_docs_examples.py, two epochs by
    # tests/data/test_client_dataloader.py.
    starts = tmp_path / "starts"
    starts.mkdir()
    (starts / "sitecustomize.py").write_text("import multiprocessing\nmultiprocessing.set_start_method('fork')\n")
    run = venv.run(venv.python, str(example), cwd=tmp_path, timeout=180, PYTHONPATH=str(starts))
    assert run.returncode == 0, run.stderr[-3000:]
    (line,) = run.stdout.splitlines()  # the example prints one batch's shapes
    assert line.startswith("torch.Size([32, ") and line.endswith("torch.Size([32])"), line
    installed = venv.installed()
    for package in SERVER_STACK:
        if package != "jinja2":  # torch's own dependency
            assert package not in installed, f"installing torch beside the client pulled in {package}"


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    from testkit.objectstore import LoopbackS3

    with LoopbackS3() as store:
        for bucket in ("corpus", "tokens", "models"):
            store.filesystem().mkdir(bucket)
        yield store


def test_the_jobs_installs_pretokenize_and_train_on_s3_as_the_development_venv_does(
    tmp_path, s3, server_venv, venv_server
):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    corpora.write_jsonl(corpus / "news.jsonl", 60_000, seed=1)
    s3.filesystem().put_file(str(corpus / "news.jsonl"), "corpus/data/news.jsonl")
    env = s3.client_env()
    store = ["--storage-options", s3.options_json, "--progress", "none"]
    pretokenize = ["pretokenize", "--url", venv_server.url, "--format", "megatron", "--append-eos", "--eos-id", "3"]
    train = ["train", "--model", "byte-level-bpe", "--vocab-size", "600", "--processes", "1"]

    # The same runs by the development venv, on local files: what the installed jobs must write, byte for byte.
    def reference(command: list[str], out: Path) -> dict[str, bytes]:
        done = subprocess.run(
            [sys.executable, "-m", "service", *command, str(corpus), "--out", str(out), "--progress", "none"],
            cwd=REPO, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    jobs = CleanVenv(tmp_path / "jobs")
    jobs.pip("install", ".[pipeline,s3]")  # docs/guides/pretokenize.md
    installed = jobs.installed()
    for package in SERVER_STACK:
        assert package not in installed, f"the pipeline and s3 extras pulled in {package}"
    done = jobs.run(
        jobs.bin("tokenizer-service"), *pretokenize, "s3://corpus/data/", "--out", "s3://tokens/run", *store,
        cwd=tmp_path, timeout=240, **env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    written, expected = s3.tree("tokens/run"), reference(pretokenize, tmp_path / "tokens")
    args = "megatron-data-args.txt"  # the shards' paths, for megatron's --data-path: where each run wrote them
    assert written.pop(args) == expected.pop(args).replace(str(tmp_path / "tokens").encode(), b"s3://tokens/run")
    assert written == expected

    server_venv.pip("install", ".[server,s3]")  # docs/guides/train.md: the server's venv, with the s3 extra
    done = server_venv.run(
        server_venv.bin("tokenizer-service"), *train, "s3://corpus/data/", "--out", "s3://models/bpe", *store,
        cwd=tmp_path, timeout=240, **env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    trained = s3.tree("models/bpe")
    assert trained["tokenizer.json"] == reference(train, tmp_path / "bpe")["tokenizer.json"]
