"""The token shards in the trainers' own formats, read back by the trainers' own readers: datatrove's
``DatatroveFileDataset``/``DatatroveFolderDataset`` (and its merger, which reads ``.ds.metadata``) for the flat
format, megatron-core's ``IndexedDataset`` for ``--format megatron`` -- whose files must also be byte for byte
what megatron-core's ``IndexedDatasetBuilder`` writes for the same ids, as ``tools/preprocess_data.py`` drives
it. Both token sizes: the real tokenizer's vocabulary (uint16), and the same ids declared in a vocabulary of
70,000 (uint32 for datatrove, int32 for Megatron). The runner is driven by an in-process encoder here (the
service path is tested in test_pretokenize.py and test_object_storage.py)."""

from __future__ import annotations

import asyncio
import json
from itertools import chain, pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.pretokenize import PretokenizeConfig, ServedTokenizer, pretokenize
from testkit import corpora

pytestmark = pytest.mark.slow  # whole training jobs read back by datatrove and megatron-core

FAMILY = "bytelevel_bpe"


class InProcessEncoder:
    """The runner's Encoder protocol over a transformers tokenizer in this process."""

    def __init__(self, tokenizer: Any, vocab_size: int, add_special_tokens: bool) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.add_special_tokens = add_special_tokens

    async def facts(self) -> ServedTokenizer:
        eos = self.tokenizer.eos_token_id
        return ServedTokenizer(
            "sha256:test", self.vocab_size, "test|tokenizer", special_token_ids=(("eos_token", eos),)
        )

    async def encode(self, texts: Any) -> tuple[np.ndarray, np.ndarray]:
        rows = self.tokenizer(list(texts), add_special_tokens=self.add_special_tokens)["input_ids"]
        lengths = np.array([len(row) for row in rows], dtype=np.int64)
        return np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum())), lengths

    async def aclose(self) -> None:
        pass

    def describe(self) -> str:
        return "in-process"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("corpus")
    corpora.write_jsonl(root / "a.jsonl", 60_000, seed=5, fields=False)
    lines = [json.loads(line)["text"] for line in (root / "a.jsonl").read_text("utf-8").splitlines()]
    (root / "b.txt").write_text("first\n\nthird, after an empty document\n", encoding="utf-8")
    return root, [*lines, "first", "", "third, after an empty document"]


def run(corpus: Path, out: Path, encoder: InProcessEncoder, output_format: str, append_eos: bool) -> Any:
    config = PretokenizeConfig(
        inputs=(str(corpus),),
        out=out,
        output_format=output_format,
        unit_bytes=16 * 1024,
        append_eos=append_eos,
        add_special_tokens=encoder.add_special_tokens,
        progress="none",
    )
    return asyncio.run(pretokenize(config, encoder=encoder, log=lambda message: None))


def expected_ids(reference: Any, texts: list[str], add_special_tokens: bool, append_eos: bool) -> list[list[int]]:
    rows = reference(texts, add_special_tokens=add_special_tokens)["input_ids"]
    return [[*row, reference.eos_token_id] if append_eos else row for row in rows]


@pytest.mark.parametrize("vocab_size", [65000, 70000], ids=["uint16", "uint32"])
def test_datatrove_reads_every_document_back(reference_tokenizers, corpus, tmp_path, vocab_size):
    from datatrove.pipeline.tokens.merger import DocumentTokenizerMerger
    from datatrove.utils.dataset import DatatroveFileDataset, DatatroveFolderDataset

    reference = reference_tokenizers[FAMILY]
    out = tmp_path / "flat"
    summary = run(corpus[0], out, InProcessEncoder(reference, vocab_size, True), "flat", append_eos=True)
    assert summary.written > 3
    expected = expected_ids(reference, corpus[1], True, True)
    token_size = 2 if vocab_size <= 65536 else 4

    documents: list[list[int]] = []  # each shard whole, split where datatrove's positions restart
    for shard in sorted(out.glob("*.ds")):
        tokens = shard.stat().st_size // token_size
        whole = DatatroveFileDataset(str(shard), seq_len=tokens - 1, token_size=token_size, return_positions=True)
        item = whole[0]
        ids, positions = item["input_ids"].tolist(), item["positions"].tolist()
        starts = [i for i, position in enumerate(positions) if position == 0] + [len(ids)]
        documents.extend(ids[a:b] for a, b in pairwise(starts))
    assert documents == expected

    stream = [token for ids in expected for token in ids]
    folder = DatatroveFolderDataset(str(out), seq_len=0, token_size=token_size)  # one token per item
    assert len(folder) == len(stream)
    assert [folder[i]["input_ids"].item() for i in range(len(folder))] == stream

    merged = tmp_path / "merged"  # datatrove's merger takes the token size from the .ds.metadata files
    DocumentTokenizerMerger(str(out), str(merged), save_filename="all", shuffle=False, progress=False).run(None, 0, 1)
    [merged_file] = sorted(merged.glob("*.ds"))
    assert merged_file.read_bytes() == np.array(stream, dtype=f"<u{token_size}").tobytes()


@pytest.mark.parametrize("vocab_size", [65000, 70000], ids=["uint16", "int32"])
def test_megatron_reads_every_document_back_from_the_files_its_builder_writes(
    reference_tokenizers, corpus, tmp_path, vocab_size
):
    import torch
    from megatron.core.datasets.indexed_dataset import DType, IndexedDataset, IndexedDatasetBuilder

    reference = reference_tokenizers[FAMILY]
    out = tmp_path / "megatron"
    run(corpus[0], out, InProcessEncoder(reference, vocab_size, False), "megatron", append_eos=False)
    expected = expected_ids(reference, corpus[1], False, False)
    assert [] in expected  # an empty document: a document with no sequence, as preprocess_data.py writes it
    manifest = json.loads((out / "manifest.json").read_text())
    prefixes = (out / "megatron-data-args.txt").read_text().split()
    assert prefixes == [str(out / shard["name"]) for shard in manifest["shards"]]

    documents: list[list[int]] = []
    for prefix, shard in zip(prefixes, manifest["shards"], strict=True):
        dataset = IndexedDataset(prefix)
        assert dataset.index.dtype == DType.optimal_dtype(vocab_size)
        sequences = [dataset[i].tolist() for i in range(len(dataset))]
        bounds = dataset.document_indices.tolist()
        documents.extend(chain.from_iterable(sequences[a:b]) for a, b in pairwise(bounds))
        mine = expected[len(documents) - shard["documents"] : len(documents)]
        builder = IndexedDatasetBuilder(str(tmp_path / "built.bin"), dtype=DType.optimal_dtype(vocab_size))
        for ids in mine:  # what tools/preprocess_data.py does with each document's ids
            builder.add_document(torch.tensor(ids, dtype=torch.int64), [len(ids)] if ids else [])
        builder.finalize(str(tmp_path / "built.idx"))
        assert Path(prefix + ".bin").read_bytes() == (tmp_path / "built.bin").read_bytes()
        assert Path(prefix + ".idx").read_bytes() == (tmp_path / "built.idx").read_bytes()
    assert [list(document) for document in documents] == expected
