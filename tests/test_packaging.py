"""A client-only install (`pip install tokenizer-service`, no extras) is what the training image gets:
numpy and the client, never tokenizers, transformers, fastapi or pydantic."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testkit.servers import REPO

pytestmark = pytest.mark.slow  # builds a venv and installs the package into it: `make test-fast` leaves it to CI


@pytest.mark.timeout(600)
def test_client_only_install_encodes_and_pulls_in_nothing_heavy(tmp_path, servers):
    venv = tmp_path / "client-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, str(REPO)], check=True, timeout=480, capture_output=True)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    for heavy in ("tokenizers", "transformers", "fastapi", "pydantic", "torch", "uvicorn"):
        assert f"\n{heavy}==" not in "\n" + installed, f"a client-only install pulled in {heavy}"

    script = (
        "from service.client import TokenizerClient\n"
        f"client = TokenizerClient({servers['wordpiece_default'].url!r})\n"
        "batch = client(['你好', 'hello world'], padding=True, return_tensors='np')\n"
        "print(batch['input_ids'].shape)\n"
    )
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(2, 4)"

    serve = subprocess.run(
        [str(venv / "bin" / "tokenizer-service"), "serve"], capture_output=True, text=True, timeout=60
    )
    assert serve.returncode == 2 and "tokenizer-service[server]" in serve.stderr
    train = subprocess.run(  # training runs the tokenizers trainers: server side too
        [
            str(venv / "bin" / "tokenizer-service"),
            "train",
            str(tmp_path),
            "--out",
            str(tmp_path / "t"),
            "--model",
            "bpe",
            "--vocab-size",
            "100",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert train.returncode == 2 and "tokenizer-service[server]" in train.stderr

    # Pre-tokenization is client side: the flat format runs on this install; Parquet names its extra.
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "你好"}\n{"text": "hello world"}\n', encoding="utf-8")
    command = [
        str(venv / "bin" / "tokenizer-service"),
        "pretokenize",
        str(corpus),
        "--url",
        servers["wordpiece_default"].url,
    ]
    flat = subprocess.run(
        [*command, "--out", str(tmp_path / "flat"), "--format", "flat"], capture_output=True, text=True, timeout=120
    )
    assert flat.returncode == 0, flat.stderr
    assert (tmp_path / "flat" / "manifest.json").exists() and (tmp_path / "flat" / "corpus.jsonl.00000.ds").exists()
    parquet = subprocess.run(
        [*command, "--out", str(tmp_path / "parquet")], capture_output=True, text=True, timeout=120
    )
    assert parquet.returncode == 1 and "tokenizer-service[pipeline]" in parquet.stderr
