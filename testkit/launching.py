"""Launched services in tests: a private launch directory of their own, and their servers judged and ended by PID
(read from /proc, not with the code under test)."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testkit.scripts import run_json_script
from testkit.servers import alive


def serves(pid: int, socket_path: Path | str) -> bool:
    """Whether ``pid`` is a server on ``socket_path`` (its command line names it)."""
    try:
        return str(socket_path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def wait_gone(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started and that still run (Linux: /proc/PID/task/PID/children)."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@contextlib.contextmanager
def private_launch_directory() -> Iterator[Path]:
    """A launch directory of its own (short, under /tmp: a socket path holds at most 107 bytes); at the end, any
    server a record there names is killed -- only if it serves that record's socket -- and the directory removed."""
    from service.launch import ownership
    from service.launch.rendezvous import Record

    folder = Path(tempfile.mkdtemp(prefix="tsl-", dir="/tmp"))
    try:
        yield folder
    finally:
        ownership.let_go_of_everything()  # a failed test must not leave this process owning a service
        for record in folder.glob("*.json"):
            data = Record.read(str(record))
            if data is not None and data.pid != os.getpid() and serves(data.pid, record.with_suffix(".sock")):
                kill(data.pid)
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()


def texts_encoded(url: str) -> float:
    """How many texts the server at ``url`` (one replica: its own socket) has encoded, from its /metrics."""
    import re

    from service.transport import HTTPTransport, Request, Timeout

    transport = HTTPTransport()
    try:
        answer = transport.handle_request(Request("GET", url + "/metrics", {}, timeout=Timeout(2.0, 10.0)))
    finally:
        transport.close()
    found = re.search(rb"^tokenizer_texts_encoded_total (\S+)$", bytes(answer.body), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def replica_sockets(parent: int) -> dict[int, str]:
    """pid -> the private socket (``--uds``) of each replica a ``serve --replicas`` parent runs now."""
    sockets = {}
    for child in children(parent):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--uds" in argv:
            sockets[child] = argv[argv.index(b"--uds") + 1].decode()
    return sockets


#: A training script (argv: model or "default", start method, replicas, texts.json, batches.pt): a Rust tokenizer
#: used in the parent first with parallelism on (the very situation that freezes forked workers), then a launched
#: service feeding a DataLoader's two workers for two epochs; the batches saved, a JSON report printed.
DATALOADER_SCRIPT = """
import json, os, sys

import torch
from torch.utils.data import DataLoader
from transformers import AutoTokenizer

from service.client import TokenizerClient
from testkit.datasets import IndexedTexts
from testkit.launching import texts_encoded


def main():
    model, context, replicas, texts_path, out_path = sys.argv[1:6]
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    local = AutoTokenizer.from_pretrained(model if model != "default" else "service/default_tokenizer")
    warm = local(texts[:64], padding=True)
    client = TokenizerClient.launch(None if model == "default" else model, replicas=int(replicas))
    generator = torch.Generator().manual_seed(1234)
    loader = DataLoader(IndexedTexts(texts, labels=3), batch_size=8, shuffle=True, generator=generator,
                        num_workers=2, multiprocessing_context=context,
                        collate_fn=client.collator(padding="longest", truncation=True, max_length=64))
    epochs = [[batch for batch in loader] for _ in range(2)]
    torch.save({"epochs": epochs}, out_path)
    print(json.dumps({"parallelism": os.environ.get("TOKENIZERS_PARALLELISM"), "pids": client.service.pids,
                      "warm": len(warm["input_ids"]), "encoded": [texts_encoded(url) for url in client.service.urls]}))


if __name__ == "__main__":
    main()
"""


def check_a_launched_dataloader(
    model: str, start_method: str, replicas: int, texts: list[str], tokenizer: Any, folder: Path
) -> None:
    """Run :data:`DATALOADER_SCRIPT` in ``folder`` (the launch directory from the environment, as the tests set
    it) and check it: each batch as ``tokenizer`` (in-process transformers) makes it, both workers used in each
    epoch, every replica called, none left running after the script's exit."""
    import json

    import torch

    script, texts_path, batches = folder / "train.py", folder / "texts.json", folder / "batches.pt"
    script.write_text(DATALOADER_SCRIPT)
    texts_path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    report = run_json_script(
        script,
        model,
        start_method,
        str(replicas),
        str(texts_path),
        str(batches),
        timeout=220,
        TOKENIZERS_PARALLELISM="true",
        RUST_BACKTRACE="0",
    )
    assert report["parallelism"] == "true"
    assert len(set(report["pids"])) == replicas
    assert all(encoded > 0 for encoded in report["encoded"]), f"a replica was never called: {report['encoded']}"
    for pid in report["pids"]:
        assert wait_gone(pid), "a server outlived the training script (stopped at its exit)"
    seen = []
    for epoch in torch.load(batches)["epochs"]:
        workers = set()
        for batch in epoch:
            idx = batch["idx"].tolist()
            expected = tokenizer(
                [texts[i] for i in idx], padding="longest", truncation=True, max_length=64, return_tensors="pt"
            )
            for key, value in expected.items():
                assert torch.equal(batch[key], value), key
            workers.update(batch["worker_pid"].tolist())
            seen.extend(idx)
        assert len(workers) == 2
    assert sorted(seen) == sorted(list(range(len(texts))) * 2)
