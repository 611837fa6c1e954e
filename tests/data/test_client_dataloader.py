"""The collator in real torch DataLoaders with worker processes, against real servers.

The fork/spawn runs happen in a fresh interpreter (this pytest process imports tokenizers through
conftest, the training process must not): TOKENIZERS_PARALLELISM=true, the client used in the parent
before the workers start, two epochs to the end, every batch compared with the in-process tokenizer.
"""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest
import torch
from torch.utils.data import DataLoader

from service.client import RetryPolicy, TokenizerClient
from testkit.scripts import run_json_script
from testkit.servers import ServerProcess

pytestmark = pytest.mark.slow  # DataLoader workers (fork and spawn) in fresh interpreters, a server restarted

LOADER_OPTIONS = {"padding": "longest", "truncation": True, "max_length": 64}

TRAINING_SCRIPT = textwrap.dedent("""
    import json, os, sys

    import torch
    from torch.utils.data import DataLoader

    from service.client import TokenizerClient
    from testkit.datasets import IndexedTexts


    def main():
        url, context, texts_path, out_path = sys.argv[1:5]
        with open(texts_path, encoding="utf-8") as f:
            texts = json.load(f)
        client = TokenizerClient(url)
        warm = client(texts[:4], padding=True, return_tensors="pt")  # used in the parent before any worker
        generator = torch.Generator().manual_seed(1234)
        loader = DataLoader(IndexedTexts(texts, labels=3), batch_size=16, shuffle=True, generator=generator,
                            num_workers=2, multiprocessing_context=context,
                            collate_fn=client.collator(padding="longest", truncation=True, max_length=64))
        epochs = [[batch for batch in loader] for _ in range(2)]
        torch.save({"warm": dict(warm), "epochs": epochs}, out_path)
        print(json.dumps({
            "parent_pid": os.getpid(),
            "parallelism": os.environ.get("TOKENIZERS_PARALLELISM"),
            "start_method": context,
            "imported": sorted({m.split(".")[0] for m in sys.modules}
                               & {"tokenizers", "transformers", "fastapi", "pydantic", "sentencepiece"}),
        }))


    if __name__ == "__main__":
        main()
""")


@pytest.fixture(scope="module")
def loader_texts(corpus) -> list[str]:
    return corpus["zh"][:90] + corpus["zh"][-40:] + corpus["en"][:30]  # neg and pos reviews, English prose


def reference_batch(tokenizer, texts: list[str], **options) -> dict[str, torch.Tensor]:
    return dict(tokenizer(texts, return_tensors="pt", **{**LOADER_OPTIONS, **options}))


def assert_batch_matches(batch: dict, tokenizer, texts: list[str], **options) -> None:
    idx = batch["idx"].tolist()
    expected = reference_batch(tokenizer, [texts[i] for i in idx], **options)
    token_keys = [k for k in batch if k in expected]
    assert token_keys == list(expected)  # same keys, same order, first in the dict
    for key, value in expected.items():
        assert batch[key].dtype == torch.int64 and torch.equal(batch[key], value), key
    assert torch.equal(batch["label"], torch.tensor([i % 3 for i in idx]))


@pytest.mark.timeout(150)
@pytest.mark.parametrize("start_method,family", [("fork", "wordpiece_default"), ("spawn", "sentencepiece")])
def test_two_epochs_in_worker_processes_match_in_process_tokenizer(
    start_method, family, servers, reference_tokenizers, loader_texts, tmp_path
):
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    texts_path = tmp_path / "texts.json"
    texts_path.write_text(json.dumps(loader_texts, ensure_ascii=False), encoding="utf-8")
    out_path = tmp_path / "batches.pt"
    report = run_json_script(
        script,
        servers[family].url,
        start_method,
        str(texts_path),
        str(out_path),
        cwd=tmp_path,
        timeout=120,
        TOKENIZERS_PARALLELISM="true",
        RUST_BACKTRACE="0",
    )
    assert report["parallelism"] == "true" and report["start_method"] == start_method
    assert report["imported"] == [], f"the training process imported {report['imported']}"

    saved = torch.load(out_path)
    tokenizer = reference_tokenizers[family]
    for key, value in reference_batch(
        tokenizer, loader_texts[:4], padding=True, truncation=None, max_length=None
    ).items():
        assert torch.equal(saved["warm"][key], value)
    orders = []
    for epoch in saved["epochs"]:
        assert len(epoch) == -(-len(loader_texts) // 16)
        seen: list[int] = []
        worker_pids = set()
        for batch in epoch:
            assert_batch_matches(batch, tokenizer, loader_texts)
            seen.extend(batch["idx"].tolist())
            worker_pids.update(batch["worker_pid"].tolist())
        assert sorted(seen) == list(range(len(loader_texts)))  # every sample once, to the end of the epoch
        assert len(worker_pids) == 2 and report["parent_pid"] not in worker_pids  # collated in 2 workers
        orders.append(seen)
    assert orders[0] != orders[1]  # shuffled per epoch: the comparison really is per batch


def test_dict_tuple_and_string_batches(servers, reference_tokenizers, corpus):
    tokenizer = reference_tokenizers["bytelevel_bpe"]
    client = TokenizerClient(servers["bytelevel_bpe"].url)
    questions, answers = corpus["en"][:10], corpus["en"][10:20]

    # dicts with a pair field and extra fields of several kinds
    rows = [
        {"question": q, "answer": a, "label": i % 2, "score": float(i), "id": f"row-{i}"}
        for i, (q, a) in enumerate(zip(questions, answers, strict=True))
    ]
    collate = client.collator(text_field="question", pair_field="answer", truncation="longest_first", max_length=48)
    loader = DataLoader(rows, batch_size=4, collate_fn=collate)
    got = list(loader)
    assert len(got) == 3
    for n, batch in enumerate(got):
        chunk = rows[n * 4 : (n + 1) * 4]
        expected = tokenizer(
            [r["question"] for r in chunk],
            [r["answer"] for r in chunk],
            padding=True,
            truncation="longest_first",
            max_length=48,
            return_tensors="pt",
        )
        assert list(batch) == [*expected.keys(), "label", "score", "id"]
        for key in expected:
            assert torch.equal(batch[key], expected[key]), key
        assert torch.equal(batch["label"], torch.tensor([r["label"] for r in chunk]))
        assert batch["score"].dtype == torch.float64 and batch["id"] == [r["id"] for r in chunk]

    # (text, pair) tuples and plain strings
    pairs = list(zip(questions, answers, strict=True))
    tuple_batch = client.collator(padding="max_length", max_length=40, truncation=True)(pairs[:5])
    expected = tokenizer(
        questions[:5], answers[:5], padding="max_length", max_length=40, truncation=True, return_tensors="pt"
    )
    assert all(torch.equal(tuple_batch[k], expected[k]) for k in expected) and tuple_batch["input_ids"].shape == (5, 40)
    string_batch = client.collator()(questions)
    expected = tokenizer(questions, padding=True, return_tensors="pt")
    assert list(string_batch) == list(expected) and all(torch.equal(string_batch[k], expected[k]) for k in expected)

    with pytest.raises(ValueError, match="clash"):
        client.collator()([{"text": "a", "input_ids": 1}])
    with pytest.raises(KeyError, match="text_field"):
        client.collator()([{"body": "a"}])
    with pytest.raises(TypeError, match="return_tensors"):
        client.collator(return_tensors="np")
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_lenght'; did you mean 'max_length'"):
        client.collator(max_lenght=3)


@pytest.fixture
def restartable_server(tmp_path) -> Iterator[ServerProcess]:
    server = ServerProcess(log_path=tmp_path / "server.log").start()
    yield server
    server.stop()


@pytest.mark.timeout(120)
def test_server_restarted_mid_epoch_epoch_completes_exactly(restartable_server, reference_tokenizers, corpus):
    """The server is stopped after a few batches and comes back ~1 s later on the same port: the workers'
    calls retry through the gap and the epoch ends with every batch exact."""
    server = restartable_server
    texts = corpus["zh"][:320]
    rows = [{"text": t, "label": i % 3, "idx": i} for i, t in enumerate(texts)]
    client = TokenizerClient(server.url, retry=RetryPolicy(max_attempts=1000, deadline=60, backoff_max=0.25))
    loader = DataLoader(
        rows, batch_size=16, num_workers=2, multiprocessing_context="fork", collate_fn=client.collator(**LOADER_OPTIONS)
    )

    def restart() -> None:
        time.sleep(1.0)
        server.start()

    batches, restarter, old_pid, stopped_at = [], None, None, 0.0
    for i, batch in enumerate(loader):
        batches.append(batch)
        if i == 2:
            old_pid = server.pid
            server.stop()
            stopped_at = time.monotonic()
            restarter = threading.Thread(target=restart)
            restarter.start()
    finished_at = time.monotonic()
    assert restarter is not None
    restarter.join(60)
    assert server.pid != old_pid and server.proc.poll() is None  # really a new process
    assert finished_at - stopped_at >= 1.0  # the loop did wait for the new server
    assert len(batches) == 20
    tokenizer = reference_tokenizers["wordpiece_default"]
    for batch in batches:
        assert_batch_matches(batch, tokenizer, texts)
    assert sorted(i for b in batches for i in b["idx"].tolist()) == list(range(len(texts)))
