"""Padding-free packed batches (``client.collator(packing=True)``) against transformers' DataCollatorWithFlattening,
and the token-budget sampler with both collators in real DataLoader workers (fork and spawn) through real servers."""

from __future__ import annotations

import inspect
import itertools
import json
import re
import subprocess
import sys
import textwrap

import httpx
import pytest
import torch
from transformers import DataCollatorWithFlattening

from service.client import AsyncTokenizerClient, TokenizerClient
from service.data import TokenBudgetBatchSampler
from service.data.packing import PACKING_OPTIONS
from testkit.scripts import run_json_script
from testkit.servers import script_env

ENCODE = {"truncation": True, "max_length": 96}


def flattening_reference(tokenizer, texts, pairs=None, encode=ENCODE, **packing) -> dict:
    """What transformers' padding-free collator makes of the in-process ids of ``texts``."""
    ids = tokenizer(texts, pairs, **encode)["input_ids"]
    return DataCollatorWithFlattening(**packing)([{"input_ids": row} for row in ids])


def assert_same_packed(ours: dict, theirs: dict) -> None:
    assert list(ours) == list(theirs)  # same keys, same order
    for key, expected in theirs.items():
        if isinstance(expected, torch.Tensor):
            assert ours[key].dtype == expected.dtype and ours[key].shape == expected.shape, key
            assert torch.equal(ours[key], expected), key
        else:  # max_length_q/k: Python ints
            assert type(ours[key]) is type(expected) and ours[key] == expected, key


def test_packing_options_are_the_flattening_collators():
    parameters = inspect.signature(DataCollatorWithFlattening.__init__).parameters
    theirs = {name: p.default for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert theirs == dict(PACKING_OPTIONS)


@pytest.fixture(scope="module")
def texts(corpus) -> list[str]:
    return [*corpus["zh"][:20], "", "   ", *corpus["en"][:10], "a", ""]  # empty ones are left out, as there


@pytest.mark.parametrize("family", ["wordpiece_default", "bytelevel_bpe", "sentencepiece"])
def test_every_packing_option_matches_the_flattening_collator(servers, reference_tokenizers, texts, family):
    client, tokenizer = TokenizerClient(servers[family].url), reference_tokenizers[family]
    for positions, flash, seq_idx in itertools.product((True, False), repeat=3):
        options = {"return_position_ids": positions, "return_flash_attn_kwargs": flash, "return_seq_idx": seq_idx}
        collate = client.collator(packing=True, **ENCODE, **options)
        assert_same_packed(collate(texts), flattening_reference(tokenizer, texts, **options))
    odd = {"separator_id": -1, "position_ids_start": 2, "return_flash_attn_kwargs": True}
    encode = {"add_special_tokens": False, "max_length": 16}
    collate = client.collator(packing=True, **encode, **odd)
    assert_same_packed(collate(texts), flattening_reference(tokenizer, texts, encode=encode, **odd))
    # pairs (tuples, or dicts with a pair field) pack as the pair encodings
    pairs = texts[::-1]
    expected = flattening_reference(tokenizer, texts, pairs, encode={"truncation": "longest_first", "max_length": 40})
    collate = client.collator(packing=True, truncation="longest_first", max_length=40)
    assert_same_packed(collate(list(zip(texts, pairs, strict=True))), expected)
    rows = [{"q": t, "a": p, "label": i} for i, (t, p) in enumerate(zip(texts, pairs, strict=True))]
    packed = client.collator(packing=True, text_field="q", pair_field="a", truncation="longest_first", max_length=40)(
        rows
    )
    assert_same_packed({k: v for k, v in packed.items() if k != "label"}, expected)
    assert torch.equal(packed["label"], torch.arange(len(rows)))  # other fields collate as default_collate


def test_packing_refuses_what_does_not_apply(servers):
    client = TokenizerClient(servers["wordpiece_default"].url)
    with pytest.raises(TypeError, match=r"\['padding'\] do not apply"):
        client.collator(packing=True, padding=True)
    with pytest.raises(TypeError, match="return_overflowing_tokens"):
        client.collator(packing=True, truncation=True, max_length=8, return_overflowing_tokens=True)
    with pytest.raises(TypeError, match="apply to packed batches only: pass packing=True"):
        client.collator(return_seq_idx=True)
    with pytest.raises(TypeError, match="separator_id must be an int"):
        client.collator(packing=True, separator_id=None)
    with pytest.raises(ValueError, match="every text of this batch encodes to no tokens"):
        client.collator(packing=True, add_special_tokens=False)(["", " "])
    with pytest.raises(ValueError, match="padding='max_length'"):
        client.collator(padding="max_length", max_length=32).batch_sampler(["a"], max_tokens=64)
    with pytest.raises(TypeError, match="packing follows the collator"):
        client.collator(packing=True).batch_sampler(["a"], max_tokens=64, packing=False)


@pytest.mark.parametrize("packing", [False, True])
def test_batch_sampler_counts_as_the_collator_encodes(servers, reference_tokenizers, corpus, packing):
    """The sampler's counts are the collated rows' lengths, so the budget holds for what the collator makes."""
    client, tokenizer = TokenizerClient(servers["bytelevel_bpe"].url), reference_tokenizers["bytelevel_bpe"]
    rows = [{"text": t, "idx": i} for i, t in enumerate(corpus["en"][:150] + corpus["zh"][:150])]
    options = {"truncation": True, "max_length": 64, "add_special_tokens": False}
    if not packing:
        options["pad_to_multiple_of"] = 8
    collate = client.collator(packing=packing, **options)
    sampler = collate.batch_sampler(rows, max_tokens=512, count_chunk_size=70, seed=5)
    expected = [len(ids) for ids in tokenizer([r["text"] for r in rows], **ENCODE | options)["input_ids"]]
    assert sampler.lengths.tolist() == expected and sampler.packing is packing
    assert sampler.pad_to_multiple_of == (None if packing else 8)
    seen = []
    for indices in sampler:
        batch = collate([rows[i] for i in indices])
        if packing:
            assert batch["input_ids"].shape[0] == 1 and batch["input_ids"].shape[1] <= 512
        else:
            assert batch["input_ids"].numel() <= 512 and batch["input_ids"].shape[1] % 8 == 0
        seen.extend(batch["idx"].tolist())
    assert sorted(seen) == list(range(len(rows)))
    # the same from a client directly, and from an async client
    same = TokenBudgetBatchSampler.from_client(
        client, [r["text"] for r in rows], max_tokens=512, packing=packing, seed=5, **options
    )
    assert same.lengths.tolist() == expected
    from_async = TokenBudgetBatchSampler.from_client(
        AsyncTokenizerClient(servers["bytelevel_bpe"].url), [r["text"] for r in rows], max_tokens=512, **options
    )
    assert from_async.lengths.tolist() == expected


TRAINING_SCRIPT = textwrap.dedent("""
    import json, os, sys

    import torch
    from torch.utils.data import DataLoader

    from service.client import TokenizerClient
    from testkit.datasets import IndexedTexts


    def main():
        url, context, packing, texts_path, out_path = sys.argv[1:6]
        with open(texts_path, encoding="utf-8") as f:
            texts = json.load(f)
        client = TokenizerClient(url)
        options = {"truncation": True, "max_length": 128}
        if packing == "packed":
            collate = client.collator(packing=True, return_flash_attn_kwargs=True, return_seq_idx=True, **options)
        else:
            collate = client.collator(padding="longest", **options)
        dataset = IndexedTexts(texts)
        sampler = collate.batch_sampler(dataset, max_tokens=1024, seed=11)  # counted in the parent, once
        loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=2,
                            multiprocessing_context=context)
        epochs = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            epochs.append([batch for batch in loader])
        torch.save({"epochs": epochs, "lengths": sampler.lengths.tolist()}, out_path)
        print(json.dumps({
            "parent_pid": os.getpid(),
            "imported": sorted({m.split(".")[0] for m in sys.modules}
                               & {"tokenizers", "transformers", "fastapi", "pydantic", "sentencepiece"}),
        }))


    if __name__ == "__main__":
        main()
""")


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize(
    "start_method,family,mode",
    [
        ("fork", "wordpiece_default", "packed"),
        ("spawn", "sentencepiece", "packed"),
        ("fork", "bytelevel_bpe", "padded"),
    ],
)
def test_token_budget_batches_in_worker_processes_match_transformers(
    start_method, family, mode, servers, reference_tokenizers, corpus, tmp_path
):
    texts = corpus["zh"][:200] + corpus["zh"][-60:] + corpus["en"][:40]
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    texts_path, out_path = tmp_path / "texts.json", tmp_path / "batches.pt"
    texts_path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    report = run_json_script(
        script,
        servers[family].url,
        start_method,
        mode,
        str(texts_path),
        str(out_path),
        cwd=tmp_path,
        timeout=180,
        TOKENIZERS_PARALLELISM="true",
        RUST_BACKTRACE="0",
    )
    assert report["imported"] == [], f"the training process imported {report['imported']}"

    saved = torch.load(out_path)
    tokenizer = reference_tokenizers[family]
    options = {"truncation": True, "max_length": 128}
    assert saved["lengths"] == [len(ids) for ids in tokenizer(texts, **options)["input_ids"]]
    orders = []
    for epoch in saved["epochs"]:
        seen, worker_pids = [], set()
        for batch in epoch:
            idx = batch["idx"].tolist()
            chosen = [texts[i] for i in idx]
            if mode == "packed":
                expected = flattening_reference(
                    tokenizer, chosen, encode=options, return_flash_attn_kwargs=True, return_seq_idx=True
                )
                assert_same_packed({k: batch[k] for k in expected}, expected)
                assert batch["input_ids"].shape[1] <= 1024  # packed up to the budget
            else:
                expected = tokenizer(chosen, padding="longest", return_tensors="pt", **options)
                assert all(torch.equal(batch[k], expected[k]) for k in expected)
                assert batch["input_ids"].numel() <= 1024  # rows x longest within the budget
            seen.extend(idx)
            worker_pids.update(batch["worker_pid"].tolist())
        assert sorted(seen) == list(range(len(texts)))  # every text once per epoch
        assert len(worker_pids) == 2 and report["parent_pid"] not in worker_pids
        orders.append(seen)
    assert orders[0] != orders[1]  # set_epoch reshuffles
    if mode == "packed":  # the budget is used: most batches are nearly full
        fills = sorted(batch["input_ids"].shape[1] / 1024 for batch in saved["epochs"][0])
        assert fills[len(fills) // 2] > 0.9


RANK_SCRIPT = textwrap.dedent("""
    import json, sys

    import torch.distributed as dist

    from service.client import TokenizerClient
    from service.data import TokenBudgetBatchSampler

    url, rendezvous, rank, texts_path, out_path = sys.argv[1:6]
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=int(rank), world_size=2)
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    client = TokenizerClient(url)
    rows = [{"text": t, "idx": i} for i, t in enumerate(texts)]
    sampler = client.collator(truncation=True, max_length=64).batch_sampler(rows, max_tokens=512, count_chunk_size=25)
    same = TokenBudgetBatchSampler.from_client(client, texts, max_tokens=512, truncation=True, max_length=64,
                                               count_chunk_size=25)
    dist.barrier()
    with open(out_path, "w") as f:
        json.dump({"lengths": sampler.lengths.tolist(), "from_client": same.lengths.tolist(),
                   "rank": sampler.rank, "replicas": sampler.num_replicas, "batches": list(sampler)}, f)
    dist.destroy_process_group()
""")


def lengths_requests(url: str) -> float:
    metrics = httpx.get(url + "/metrics", timeout=10).text
    found = re.search(r'tokenizer_requests_total\{route="/lengths",status="200"\} ([\d.e+]+)', metrics)
    return float(found.group(1)) if found else 0.0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ranks_of_a_distributed_job_count_each_text_once(servers, reference_tokenizers, corpus, tmp_path):
    """Two gloo ranks build their samplers: each counts half the texts, they exchange the counts, and the
    service is asked for each count once (4 requests of 25 texts per 100 texts, not 8)."""
    server, tokenizer = servers["wordpiece_default"], reference_tokenizers["wordpiece_default"]
    texts = corpus["zh"][300:400]
    (tmp_path / "texts.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "rank.py").write_text(RANK_SCRIPT)
    before = lengths_requests(server.url)
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                str(tmp_path / "rank.py"),
                server.url,
                str(tmp_path / "rendezvous"),
                str(rank),
                str(tmp_path / "texts.json"),
                str(tmp_path / f"rank{rank}.json"),
            ],
            cwd=tmp_path,
            env=script_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    for proc in ranks:
        _, err = proc.communicate(timeout=100)
        assert proc.returncode == 0, err[-3000:]
    assert lengths_requests(server.url) - before == 2 * 2 * 2  # 2 ways of counting x 2 ranks x 50 texts / 25
    expected = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=64)["input_ids"]]
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for rank, result in enumerate(results):
        assert result["lengths"] == result["from_client"] == expected
        assert (result["rank"], result["replicas"]) == (rank, 2)  # taken from torch.distributed
    assert len(results[0]["batches"]) == len(results[1]["batches"])
    assert sorted(i for r in results for batch in r["batches"] for i in batch) == list(range(len(texts)))
