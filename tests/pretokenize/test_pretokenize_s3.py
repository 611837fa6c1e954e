"""The torch datasets over a run on object storage (a real S3-protocol server on 127.0.0.1: moto's server mode, as
s3fs's own tests run it): a conversations run written to ``s3://`` by the job itself, in every format, reads back
item for item as the same objects copied to a local disk (ids, loss masks, labels, kept fields; documents and
blocks, in order and at random, with blocks so small that values straddle them); two DataLoader workers, forked and
spawned, read it too; a run 4x the block cache reads in bounded memory; an outage mid-read is ridden out."""

from __future__ import annotations

import json
import logging
import pickle
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_pretokenize_chat import FAMILY, chat_corpus, config, run  # noqa: F401 -- chat_corpus: a fixture

from service.pretokenize import TokenBlocks, TokenizedDocuments, torch_datasets
from testkit.objectstore import LoopbackS3
from testkit.scripts import run_json_script

pytestmark = pytest.mark.slow  # whole pre-tokenization jobs against an S3-protocol server

FORMATS = ["parquet", "flat", "megatron"]
#: Storage options with a secret in them: it goes to the filesystem, never into a log line or a message.
SECRET = "not-for-any-log-8c1f"


@pytest.fixture(scope="module")
def s3() -> Any:
    with LoopbackS3() as store:
        store.filesystem().mkdir("runs")
        yield store


def options(s3: LoopbackS3) -> dict[str, Any]:
    return {**s3.storage_options, "key": "testing", "secret": SECRET}


@pytest.fixture(scope="module")
def s3_runs(s3, chat_servers, chat_corpus, tmp_path_factory) -> Callable[[str], tuple[str, Path]]:  # noqa: F811
    """format -> (the URL of a run the job wrote to s3://, a local copy of its objects), made on first use (the
    Parquet run keeps the "id" field)."""
    made: dict[str, tuple[str, Path]] = {}

    def made_in(output_format: str) -> tuple[str, Path]:
        if output_format not in made:
            url = f"s3://runs/chat-{output_format}"
            kept = ("id",) if output_format == "parquet" else ()
            server = chat_servers[FAMILY].url
            options = {"output_format": output_format, "keep_fields": kept, "storage_options": s3.storage_options}
            run(config(server, chat_corpus[0], url, **options))
            local = tmp_path_factory.mktemp(f"copy-{output_format}")
            for name, content in s3.tree(f"runs/chat-{output_format}").items():
                (local / name).parent.mkdir(parents=True, exist_ok=True)
                (local / name).write_bytes(content)
            made[output_format] = url, local
        return made[output_format]

    return made_in


def plain(item: Any) -> Any:
    """A dataset item as lists and values (tensors' dtypes checked: int64)."""
    if isinstance(item, dict):
        return {name: plain(value) for name, value in item.items()}
    if hasattr(item, "tolist"):
        assert str(item.dtype) == "torch.int64"
        return item.tolist()
    return item


def in_order_then_at_random(length: int) -> list[int]:
    """Every index in order (as a sequential reader: each block read once), then 30 at random (a shuffling one:
    blocks dropped long ago read again)."""
    return [*range(length), *random.Random(length).choices(range(length), k=30)]


def read_all(dataset: Any, order: list[int]) -> list[Any]:
    return [plain(dataset[i]) for i in order]


@pytest.mark.parametrize("output_format", FORMATS)
def test_a_run_on_s3_reads_back_item_for_item_as_its_local_copy(output_format, s3, s3_runs, monkeypatch):
    """Blocks of 8191 bytes (a prime: ids, mask bytes and index entries straddle them) and a cache of 4, read in
    order, then at random: every document (ids, masks, labels, the kept field; the ids alone) and every block of tokens
    equals the local copy's, and the pickled dataset carries neither a connection nor a cache."""
    monkeypatch.setattr(torch_datasets, "REMOTE_BLOCK_BYTES", 8191)
    monkeypatch.setattr(torch_datasets, "REMOTE_CACHE_BYTES", 4 * 8191)
    url, local = s3_runs(output_format)
    fields = ["id"] if output_format == "parquet" else []
    remote = TokenizedDocuments(url, loss_masks=True, fields=fields, storage_options=options(s3))
    here = TokenizedDocuments(local, loss_masks=True, fields=fields)
    assert remote.manifest.shards and len(remote.manifest.shards) >= 4 and len(remote) == len(here)
    order = in_order_then_at_random(len(here))
    theirs = read_all(here, order)
    assert read_all(remote, order) == theirs
    assert any(0 in item["assistant_masks"] and 1 in item["assistant_masks"] for item in theirs)
    if fields:
        assert all(isinstance(item["id"], int) for item in theirs)
    if output_format != "parquet":
        read = sum(path.stat().st_size for path in local.iterdir() if path.suffix in (".ds", ".loss", ".bin", ".idx"))
        assert read > 2 * 4 * 8191  # blocks were dropped and read again
        assert remote._files is not None and remote._files.cache.held <= 4 * 8191  # bounded, not the run
        ids_only = TokenizedDocuments(url, storage_options=options(s3))
        assert read_all(ids_only, order[-30:]) == read_all(TokenizedDocuments(local), order[-30:])
    if output_format == "flat":
        blocks, local_blocks = (
            TokenBlocks(where, block_size=97, loss_masks=True, **extra)
            for where, extra in ((url, {"storage_options": options(s3)}), (local, {}))
        )
        order = in_order_then_at_random(len(local_blocks))
        assert len(blocks) == len(local_blocks) > 20
        assert read_all(blocks, order) == read_all(local_blocks, order)
    state = pickle.dumps(remote)
    assert len(state) < 100_000 and b"S3FileSystem" not in state and b"_BlockCache" not in state


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_two_dataloader_workers_read_the_run_on_s3(context, s3, s3_runs):
    """One DataLoader with two workers (forked or spawned) over documents with masks (Parquet with a field,
    Megatron) and mask-carrying blocks (flat) on s3:// gives what the parent reads from the local copy; the
    parent read the remote datasets first (its connections and cache open) before the workers started."""
    from torch.utils.data import ConcatDataset, DataLoader

    def datasets(where: Callable[[str], str | Path], **extra: Any) -> ConcatDataset:
        return ConcatDataset(
            [
                TokenizedDocuments(where("parquet"), fields=["id"], loss_masks=True, **extra),
                TokenizedDocuments(where("megatron"), loss_masks=True, **extra),
                TokenBlocks(where("flat"), block_size=257, loss_masks=True, **extra),
            ]
        )

    remote = datasets(lambda name: s3_runs(name)[0], storage_options=options(s3))
    here = datasets(lambda name: s3_runs(name)[1])
    expected = read_all(here, list(range(len(here))))
    assert [plain(remote[i]) for i in (0, len(remote) - 1)] == [expected[0], expected[-1]]
    loader = DataLoader(remote, batch_size=None, num_workers=2, multiprocessing_context=context)
    assert [plain(item) for item in loader] == expected


MEMORY_PROBE = r"""
import json, sys
from service.pretokenize import TokenBlocks
from service.pretokenize.torch_datasets import REMOTE_CACHE_BYTES


def peak():  # VmHWM, bytes
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))

blocks = TokenBlocks(sys.argv[1], block_size=1 << 16, storage_options=json.loads(sys.argv[2]))
blocks[0]  # the filesystem made, its client loaded
before = peak()
total = sum(int(blocks[i][-1]) for i in range(len(blocks)))  # every token, shard after shard
print(json.dumps({"grown": peak() - before, "cache": REMOTE_CACHE_BYTES, "blocks": len(blocks), "total": total}))
"""


def test_a_run_four_times_the_cache_reads_in_bounded_memory(s3):
    """A flat run of 128 MiB of tokens (16 shards) on s3:// read whole in a worker: its peak RSS (VmHWM) grows by
    the block cache and a few blocks, never by the run."""
    fs = s3.filesystem()
    shards, tokens = 16, 4 << 20  # uint16: 8 MiB a shard
    entries = []
    rng = np.random.default_rng(0)
    for n in range(shards):
        name = f"big_{n:05d}"
        fs.pipe_file(f"runs/big/{name}.ds", rng.integers(0, 60_000, tokens, dtype="<u2").tobytes())
        fs.pipe_file(f"runs/big/{name}.ds.index", np.array([tokens], "<u8").tobytes())
        files = [f"{name}.ds", f"{name}.ds.index"]
        entries.append({"name": name, "files": files, "documents": 1, "tokens": tokens, "skipped": 0, "unit": {}})
    manifest = {"format_version": 2, "format": "flat", "dtype": "uint16", "tokenizer": {}, "settings": {}}
    fs.pipe_file("runs/big/manifest.json", json.dumps({**manifest, "shards": entries}).encode())
    probe = run_json_script(
        MEMORY_PROBE, "s3://runs/big", json.dumps(s3.storage_options), timeout=120, **s3.client_env()
    )
    run_bytes = shards * tokens * 2
    assert probe["blocks"] == shards * tokens >> 16 and run_bytes >= 4 * probe["cache"]
    assert probe["grown"] < probe["cache"] + (16 << 20) < run_bytes / 2, probe


def test_a_store_outage_mid_read_is_retried_and_never_logs_a_secret(s3, s3_runs, caplog):
    """The store goes away while a dataset reads (its connection open): the read says which URL failed and that
    it retries (a warning on the module's logger, without the storage options), and returns the right item once
    the store is back on the same port."""
    url, local = s3_runs("megatron")
    documents = TokenizedDocuments(url, loss_masks=True, storage_options=options(s3))
    expected = plain(TokenizedDocuments(local, loss_masks=True)[-1])
    assert plain(documents[0]) == plain(TokenizedDocuments(local, loss_masks=True)[0])  # connected, one block read
    got: list[Any] = []
    s3.stop()
    try:
        with caplog.at_level(logging.WARNING, logger=torch_datasets.__name__):
            reader = threading.Thread(target=lambda: got.append(plain(documents[len(documents) - 1])))
            reader.start()
            reader.join(timeout=2)
            assert reader.is_alive()  # still retrying
            s3.start()
            reader.join(timeout=60)
    finally:
        if not s3.running:
            s3.start()
    assert got == [expected]
    lines = [record.getMessage() for record in caplog.records]
    assert any(line.startswith(f"storage: {url}/") and "retrying" in line for line in lines), lines
    assert not any(SECRET in line for line in lines)
