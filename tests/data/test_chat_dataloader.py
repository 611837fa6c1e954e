"""The chat collator in real torch DataLoaders with worker processes, against real servers, equal to TRL's SFT
collation (its dataset preparation, then ``DataCollatorForLanguageModeling``) of the in-process features.

The runs happen in a fresh interpreter, as training does: TOKENIZERS_PARALLELISM=true, a Rust tokenizer used in the
parent before the workers start (a forked worker that touched it would freeze; the collator's never do), the
service client used in the parent too, fork and spawn, padded and padding-free, every batch compared here.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
import torch
from test_chat_collate import assert_same_batch, features, trl_batch

from service.engine.loading import DEFAULT_TOKENIZER_DIR
from testkit.chat import fixed_conversations
from testkit.scripts import run_json_script

pytestmark = pytest.mark.slow  # DataLoader workers (fork and spawn) in fresh interpreters

TRAINING_SCRIPT = textwrap.dedent("""
    import json, os, sys

    import torch
    from tokenizers import Tokenizer
    from torch.utils.data import DataLoader

    from service.client import TokenizerClient
    from testkit.datasets import IndexedConversations


    def main():
        url, context, rows_path, tokenizer_json, options, out_path = sys.argv[1:7]
        with open(rows_path, encoding="utf-8") as f:
            conversations = json.load(f)
        rust = Tokenizer.from_file(tokenizer_json)  # the Rust pool runs in the parent before any worker starts
        rust.encode_batch(["warm the pool"] * 256)
        client = TokenizerClient(url)
        client.apply_chat_template(conversations[:2])  # the service client used in the parent, too
        collate = client.chat_collator(**json.loads(options))
        generator = torch.Generator().manual_seed(4321)
        loader = DataLoader(IndexedConversations(conversations), batch_size=4, shuffle=True, generator=generator,
                            num_workers=2, multiprocessing_context=context, collate_fn=collate, timeout=60)
        torch.save([batch for batch in loader], out_path)
        print(json.dumps({
            "parent_pid": os.getpid(),
            "parallelism": os.environ.get("TOKENIZERS_PARALLELISM"),
            "imported": sorted({m.split(".")[0] for m in sys.modules} & {"transformers", "fastapi", "pydantic", "trl"}),
        }))


    if __name__ == "__main__":
        main()
""")

RUNS = [  # start method, family, collator options (TRL's max_length beside them)
    ("fork", "wordpiece_default", {"truncation": True, "max_length": 96}),
    ("spawn", "sentencepiece", {"padding_free": True}),
    ("fork", "bytelevel_bpe", {"pad_to_multiple_of": 8, "return_position_ids": True}),
]


@pytest.fixture(scope="module")
def trl() -> Any:
    import datasets
    from trl.trainer import sft_trainer

    datasets.disable_progress_bars()
    return sft_trainer


def dataset_conversations(tokenizer: Any, max_length: int | None) -> list[list[dict[str, Any]]]:
    """Conversations that each keep an assistant token within ``max_length`` (TRL's preparation drops one left
    without, which a collator cannot: it gives every row of its batch), in variants so that batches differ."""
    kept = []
    for conversation in fixed_conversations():
        mask = tokenizer.apply_chat_template(conversation, return_assistant_tokens_mask=True)["assistant_masks"]
        if 1 in mask[:max_length]:
            kept.append(conversation)
    variants = []
    for i in range(6):
        for conversation in kept:
            first, *rest = conversation
            variants.append([{**first, "content": f"({i}) {first.get('content') or ''}"}, *rest])
    return variants


@pytest.mark.timeout(240)
@pytest.mark.parametrize("start_method, family, options", RUNS, ids=[f"{m}-{f}" for m, f, _ in RUNS])
def test_chat_collator_in_worker_processes_equals_trls_sft_collation(
    start_method, family, options, trl, chat_servers, named_chat_tokenizers, tmp_path
):
    tokenizer = named_chat_tokenizers[family]
    conversations = dataset_conversations(tokenizer, options.get("max_length"))
    rows_path = tmp_path / "rows.json"
    rows_path.write_text(json.dumps(conversations, ensure_ascii=False), encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(TRAINING_SCRIPT)
    out_path = tmp_path / "batches.pt"
    report = run_json_script(
        script,
        chat_servers[family].url,
        start_method,
        str(rows_path),
        str(DEFAULT_TOKENIZER_DIR / "tokenizer.json"),  # any Rust tokenizer: its pool is what forks
        json.dumps(options),
        str(out_path),
        cwd=tmp_path,
        timeout=200,
        TOKENIZERS_PARALLELISM="true",
        RUST_BACKTRACE="0",
    )
    assert report["parallelism"] == "true"
    assert report["imported"] == [], f"the training process imported {report['imported']}"

    collator_options = {k: v for k, v in options.items() if k not in ("truncation", "max_length")}
    seen: list[int] = []
    workers: set[int] = set()
    for batch in torch.load(out_path):
        idx = batch.pop("idx").tolist()
        workers.update(batch.pop("worker_pid").tolist())
        seen.extend(idx)
        rows = features(tokenizer, [conversations[i] for i in idx], masks=True)
        theirs = trl_batch(
            trl, rows, max_length=options.get("max_length"), pad_token_id=tokenizer.pad_token_id, **collator_options
        )
        assert_same_batch(batch, theirs)
        assert (batch["labels"] != -100).any()  # assistant tokens train
    assert sorted(seen) == list(range(len(conversations)))
    assert len(workers) == 2 and report["parent_pid"] not in workers
