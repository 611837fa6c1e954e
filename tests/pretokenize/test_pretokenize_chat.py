"""Pre-tokenizing conversations (``pretokenize --messages-field``) through real servers: each document's ids and
loss mask equal in-process ``apply_chat_template(..., return_assistant_tokens_mask=True)`` in every format, read
back by the trainers' own readers (pyarrow; datatrove's merger of ``.ds``/``.ds.loss``; megatron-core's
``IndexedDataset`` of the ids and of the mask sidecar); the refusals (a template without generation markers up
front, a bad record or a conversation the template refuses named by file and line, options that do not apply);
and a rerun that skips what is done."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.jobs import BadRecord, CorpusError
from service.pretokenize import PretokenizeConfig, pretokenize, read_manifest
from testkit.chat import fixed_conversations
from testkit.servers import REPO

FAMILY = "sentencepiece"


def variants(count: int) -> list[list[dict[str, Any]]]:
    """``count`` conversations: the fixed ones, their first message numbered so that each differs."""
    fixed = fixed_conversations()
    made = []
    for i in range(count):
        first, *rest = fixed[i % len(fixed)]
        made.append([{**first, "content": f"[{i}] {first.get('content') or ''}"}, *rest])
    return made


def plain(conversation: list[dict[str, Any]]) -> bool:
    """Messages of a role and a string content only: what one Parquet list-of-structs column can hold for all."""
    return all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in conversation)


@pytest.fixture(scope="module")
def chat_corpus(tmp_path_factory) -> tuple[Path, list[list[dict[str, Any]]]]:
    """A JSON Lines file of 150 conversations (tool calls, reasoning, parts, empty contents) and a Parquet file of
    plain ones, in the order the shards hold them (a.jsonl, then b.parquet)."""
    root = tmp_path_factory.mktemp("chat-corpus")
    jsonl = variants(150)
    with open(root / "a.jsonl", "w", encoding="utf-8") as f:
        for i, conversation in enumerate(jsonl):
            f.write(json.dumps({"id": i, "messages": conversation}, ensure_ascii=False) + "\n")
    table = [conversation for conversation in variants(120) if plain(conversation)]
    pq.write_table(
        pa.Table.from_pylist([{"id": i, "messages": c} for i, c in enumerate(table)]),
        root / "b.parquet",
        row_group_size=16,
    )
    return root, jsonl + table


def run(config: PretokenizeConfig) -> Any:
    return asyncio.run(pretokenize(config, log=lambda message: None))


def config(url: str, inputs: Path, out: Path, **options: Any) -> PretokenizeConfig:
    return PretokenizeConfig(
        inputs=(str(inputs),),
        out=out,
        url=url,
        messages_field="messages",
        unit_bytes=16 * 1024,
        progress="none",
        **options,
    )


def expected(tokenizer: Any, conversations: list, **options: Any) -> list[tuple[list[int], list[int]]]:
    """(ids, assistant mask) of each conversation, in-process."""
    rows = []
    for conversation in conversations:
        out = tokenizer.apply_chat_template(conversation, return_assistant_tokens_mask=True, **options)
        rows.append((list(out["input_ids"]), list(out["assistant_masks"])))
    return rows


def read_back(out: Path) -> list[tuple[list[int], list[int]]]:
    """(ids, mask) of every document of a finished run, in manifest order, read as each trainer reads its format."""
    manifest = json.loads((out / "manifest.json").read_text())
    documents: list[tuple[list[int], list[int]]] = []
    for shard in manifest["shards"]:
        files = [out / name for name in shard["files"]]
        if manifest["format"] == "parquet":
            table = pq.read_table(files[0])
            assert table.column_names[:2] == ["input_ids", "assistant_masks"]
            assert str(table.schema.field("assistant_masks").type) == "list<element: uint8>"
            documents.extend(zip(table["input_ids"].to_pylist(), table["assistant_masks"].to_pylist(), strict=True))
        elif manifest["format"] == "flat":  # datatrove's reader of a shard's documents (its merger's)
            from datatrove.pipeline.tokens.merger import get_data_reader, load_doc_ends

            tokens, index, _, loss = files
            dtype = np.dtype(manifest["dtype"])
            assert loss.stat().st_size * dtype.itemsize == tokens.stat().st_size  # one byte per token
            ends = load_doc_ends(open(index, "rb"))
            ids = [np.frombuffer(b, dtype).tolist() for b in get_data_reader(open(tokens, "rb"), ends, dtype.itemsize)]
            masks = [list(b) for b in get_data_reader(open(loss, "rb"), ends, 1)]
            documents.extend(zip(ids, masks, strict=True))
        else:
            from megatron.core.datasets.indexed_dataset import IndexedDataset

            prefix = str(out / shard["name"])
            ids_dataset, masks_dataset = IndexedDataset(prefix), IndexedDataset(prefix + ".loss")
            assert ids_dataset.document_indices.tolist() == masks_dataset.document_indices.tolist()
            bounds = ids_dataset.document_indices.tolist()
            for a, b in pairwise(bounds):
                ids = [t for i in range(a, b) for t in ids_dataset[i].tolist()]
                masks = [t for i in range(a, b) for t in masks_dataset[i].tolist()]
                documents.append((ids, masks))
    return documents


@pytest.fixture(scope="module")
def chat_runs(chat_servers, chat_corpus, tmp_path_factory) -> Callable[[str], Path]:
    """format -> the output folder of a run over the chat corpus in that format, made on first use (the Parquet
    run keeps the "id" field)."""
    made: dict[str, Path] = {}

    def made_in(output_format: str) -> Path:
        if output_format not in made:
            out = tmp_path_factory.mktemp(f"chat-{output_format}") / "out"
            kept = ("id",) if output_format == "parquet" else ()
            url = chat_servers[FAMILY].url
            run(config(url, chat_corpus[0], out, output_format=output_format, keep_fields=kept))
            made[output_format] = out
        return made[output_format]

    return made_in


@pytest.mark.parametrize("output_format", ["parquet", "flat", "megatron"])
def test_ids_and_loss_masks_equal_apply_chat_template_in_every_format(
    output_format, chat_runs, named_chat_tokenizers, chat_corpus
):
    _, conversations = chat_corpus
    out = chat_runs(output_format)
    manifest = read_manifest(out)
    assert manifest.data["totals"]["shards"] >= 4 and manifest.data["totals"]["skipped"] == 0
    theirs = expected(named_chat_tokenizers[FAMILY], conversations)
    assert read_back(out) == theirs
    assert any(1 in masks for _, masks in theirs) and any(0 in masks for _, masks in theirs)
    assert manifest.data["settings"]["chat"]["messages_field"] == "messages"
    assert manifest.tokens == sum(len(ids) for ids, _ in theirs)


def test_datatroves_merger_carries_the_loss_masks_with_the_tokens(
    chat_servers, named_chat_tokenizers, chat_corpus, tmp_path
):
    """datatrove's own reader of .ds.loss files: DocumentTokenizerMerger(save_loss_metadata=True) merges the
    shards' tokens and masks into one file each, byte for byte the in-process ones."""
    from datatrove.pipeline.tokens.merger import DocumentTokenizerMerger

    root, conversations = chat_corpus
    out = tmp_path / "flat"
    run(config(chat_servers[FAMILY].url, root, out, output_format="flat", truncation=True, max_length=40))
    theirs = expected(named_chat_tokenizers[FAMILY], conversations, truncation=True, max_length=40)
    merged = tmp_path / "merged"
    DocumentTokenizerMerger(
        str(out), str(merged), save_filename="all", shuffle=False, save_loss_metadata=True, progress=False
    ).run(None, 0, 1)
    [tokens] = sorted(merged.glob("*.ds"))
    [loss] = sorted(merged.glob("*.ds.loss"))
    dtype = json.loads((out / "manifest.json").read_text())["dtype"]
    assert tokens.read_bytes() == np.array([t for ids, _ in theirs for t in ids], dtype=dtype).tobytes()
    assert loss.read_bytes() == bytes(bit for _, masks in theirs for bit in masks)

    # TokenBlocks(loss_masks=True) over the shards: datatrove's windows of the merged tokens (DatatroveFileDataset,
    # seq_len + 1 tokens each), and the merged loss file cut at the same places -- across shard boundaries too.
    from datatrove.utils.dataset import DatatroveFileDataset

    from service.pretokenize import TokenBlocks

    windows = DatatroveFileDataset(str(tokens), seq_len=96, token_size=np.dtype(dtype).itemsize)
    blocks = TokenBlocks(out, block_size=97, loss_masks=True)
    assert len(blocks) == len(windows)
    shard_ends = np.cumsum([shard.tokens for shard in read_manifest(out).shards])
    assert any(end % 97 for end in shard_ends if end < len(blocks) * 97)  # some block holds two shards' tokens
    merged_masks = np.frombuffer(loss.read_bytes(), np.uint8)
    for i in range(len(blocks)):
        block = blocks[i]
        assert block["input_ids"].tolist() == windows[i]["input_ids"].tolist()
        assert block["assistant_masks"].tolist() == merged_masks[i * 97 : (i + 1) * 97].tolist()
        assert block["labels"].tolist() == labelled(block["input_ids"].tolist(), block["assistant_masks"].tolist())


def test_masks_from_turns_and_the_refusals(chat_servers, named_chat_tokenizers, chat_corpus, tmp_path):
    """A template without generation markers is refused before any work, naming the remedy; with "turns" its
    masks are each assistant message's turn; a conversation the template refuses, or a record that is not one,
    stops the run naming file and line, or is counted with --on-bad-record skip."""
    root, conversations = chat_corpus
    url = chat_servers[FAMILY].url
    with pytest.raises(CorpusError, match=r"has no \{% generation %\} markers.*assistant_masks_from"):
        run(config(url, root / "a.jsonl", tmp_path / "no-markers", chat_template="llama3"))
    assert not (tmp_path / "no-markers" / "manifest.json").exists()

    run(config(url, root / "a.jsonl", tmp_path / "turns", chat_template="llama3", assistant_masks_from="turns"))
    llama3 = named_chat_tokenizers[FAMILY]
    ours = read_back(tmp_path / "turns")
    for (ids, masks), conversation in zip(ours, conversations[:150], strict=True):
        assert ids == llama3.apply_chat_template(conversation, chat_template="llama3")["input_ids"]
        assert (1 in masks) == any(m["role"] == "assistant" for m in conversation)

    bad = tmp_path / "bad.jsonl"
    lines = [json.dumps({"messages": c}) for c in conversations[:5]]
    lines.insert(2, json.dumps({"messages": [{"content": "no role"}]}))
    lines.insert(4, json.dumps({"messages": [{"role": "narrator", "content": "llama3 refuses this role"}]}))
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(BadRecord, match=r"bad\.jsonl:3: field 'messages' message 0 has no role"):
        run(config(url, bad, tmp_path / "stop", chat_template="llama3", assistant_masks_from="turns"))
    skipped = run(
        config(url, bad, tmp_path / "skip", chat_template="llama3", assistant_masks_from="turns", on_bad_record="skip")
    )
    assert skipped.skipped == 2 and skipped.documents == 5
    examples = read_manifest(tmp_path / "skip").data["shards"][0]
    assert examples["skipped"] == 2
    record = json.loads(next((tmp_path / "skip").rglob("*.done")).read_text())
    text = json.dumps(record)
    assert "bad.jsonl:3" in text and "bad.jsonl:5: refused by the service: the chat template refused" in text


def test_a_rerun_skips_done_shards_and_writes_the_same_bytes(chat_servers, chat_corpus, tmp_path):
    root, _ = chat_corpus
    out = tmp_path / "out"
    first = run(config(chat_servers[FAMILY].url, root, out, output_format="flat"))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    shard = sorted(out.glob("*.ds.loss"))[0]
    shard.unlink()  # a shard's mask file lost: that unit (only) is redone
    again = run(config(chat_servers[FAMILY].url, root, out, output_format="flat"))
    assert again.already_done == first.written - 1 and again.written == 1
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--append-eos"], "--append-eos does not apply to conversations"),
        (["--no-add-special-tokens"], "--no-add-special-tokens does not apply to conversations"),
        (["--chat-template-kwargs", "[1]"], "must be a JSON object"),
    ],
)
def test_options_that_do_not_apply_to_conversations_are_refused(flags, words, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "pretokenize",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--url",
            "http://127.0.0.1:9",
            "--messages-field",
            "messages",
            *flags,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and words in done.stderr, done.stderr


# -- reading the masks back in training: service.pretokenize's torch datasets ---------------------------------
def labelled(ids: list[int], masks: list[int]) -> list[int]:
    """What a trainer's labels are: the ids, -100 where the token does not count toward the loss."""
    return [token if bit else -100 for token, bit in zip(ids, masks, strict=True)]


@pytest.mark.parametrize("output_format", ["parquet", "flat", "megatron"])
def test_tokenized_documents_give_the_masks_the_trainers_readers_read(output_format, chat_runs):
    """TokenizedDocuments(loss_masks=True): each document's ids, mask and labels equal what pyarrow, datatrove's
    reader and megatron-core's IndexedDataset read of the same run (Parquet with a kept field as well)."""
    from service.pretokenize import TokenizedDocuments

    out = chat_runs(output_format)
    theirs = read_back(out)
    fields = ["id"] if output_format == "parquet" else []
    documents = TokenizedDocuments(out, loss_masks=True, fields=fields)
    ours = [documents[i] for i in range(len(documents))]
    assert [(item["input_ids"].tolist(), item["assistant_masks"].tolist()) for item in ours] == theirs
    assert [item["labels"].tolist() for item in ours] == [labelled(ids, masks) for ids, masks in theirs]
    if fields:
        table = pa.concat_tables(pq.read_table(out / name) for name in sorted(p.name for p in out.glob("*.parquet")))
        assert [item["id"] for item in ours] == table["id"].to_pylist()
    if output_format != "parquet":  # a document's ids alone, as without masks
        assert TokenizedDocuments(out)[-1].tolist() == theirs[-1][0]


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_masks_read_back_in_two_dataloader_workers(chat_runs, context):
    """One DataLoader with two workers (forked or spawned) over documents with their masks (Parquet with a field,
    Megatron) and mask-carrying blocks (flat) gives what the parent reads; the parent's maps were open first."""
    from torch.utils.data import ConcatDataset, DataLoader

    from service.pretokenize import TokenBlocks, TokenizedDocuments

    datasets = ConcatDataset(
        [
            TokenizedDocuments(chat_runs("parquet"), fields=["id"], loss_masks=True),
            TokenizedDocuments(chat_runs("megatron"), loss_masks=True),
            TokenBlocks(chat_runs("flat"), block_size=257, loss_masks=True),
        ]
    )
    in_parent = [datasets[i] for i in range(len(datasets))]
    loader = DataLoader(datasets, batch_size=None, num_workers=2, multiprocessing_context=context)
    in_workers = list(loader)
    assert len(in_workers) == len(in_parent)
    for theirs, ours in zip(in_parent, in_workers, strict=True):
        assert theirs.keys() == ours.keys()
        assert all(v.tolist() == ours[k].tolist() if hasattr(v, "tolist") else v == ours[k] for k, v in theirs.items())


def test_the_masks_asked_of_a_run_without_them_are_refused(chat_servers, chat_corpus, tmp_path):
    from service.pretokenize import TokenBlocks, TokenizedDocuments

    conversations = tmp_path / "few.jsonl"
    conversations.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chat_corpus[1][:5]))
    out = tmp_path / "no-masks"
    run(config(chat_servers[FAMILY].url, conversations, out, output_format="flat", loss_masks=False))
    assert not list(out.glob("*.ds.loss"))
    with pytest.raises(ValueError, match=r"wrote no loss masks.*--no-loss-masks.*loss_masks=False"):
        TokenizedDocuments(out, loss_masks=True)
    with pytest.raises(ValueError, match="wrote no loss masks"):
        TokenBlocks(out, block_size=8, loss_masks=True)
    assert len(TokenizedDocuments(out)) == 5
