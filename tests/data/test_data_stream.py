"""``service.data.TokenizedStream`` in real DataLoader workers (fork and spawn) over simulated ranks: every document
exactly once across ranks x workers, in the documented order, tokenized as the in-process tokenizer does, and resumed
from the state dicts torchdata's ``StatefulDataLoader`` takes from each worker."""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader

from service.client import TokenizerClient
from service.data import TokenizedStream

OPTIONS = {"truncation": True, "max_length": 40}


class Rereadable:
    """A source with no length: each iteration reads the documents again, as a file reader would."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.documents = documents

    def __iter__(self) -> Any:
        return iter(list(self.documents))


@pytest.fixture(scope="module")
def documents(corpus: dict[str, list[str]]) -> list[dict[str, Any]]:
    texts = corpus["en"][:70] + corpus["zh"][:67]  # 137: no layout below divides it
    return [{"text": text, "doc": i} for i, text in enumerate(texts)]


def unbatched(rows: list[Any]) -> Any:
    return rows[0]


@pytest.mark.parametrize(
    ("source", "context", "world_size", "workers"),
    [(list, "fork", 2, 2), (list, "spawn", 1, 2), (Rereadable, None, 3, 0)],  # 0 workers: the main process reads
)
def test_every_document_once_across_ranks_and_workers_in_order(
    servers, reference_tokenizers, documents, source, context, world_size, workers
):
    client = TokenizerClient(servers["bytelevel_bpe"].url)
    reference = reference_tokenizers["bytelevel_bpe"]
    seen: list[dict[str, Any]] = []
    for rank in range(world_size):
        stream = TokenizedStream(
            source(documents), client.tokenize_function(**OPTIONS), batch_size=16, rank=rank, world_size=world_size
        )
        loader = DataLoader(
            stream, batch_size=1, collate_fn=unbatched, num_workers=workers, multiprocessing_context=context
        )
        got = list(loader)
        shards = world_size * max(workers, 1)
        for worker in range(max(workers, 1)):  # DataLoader takes the workers in turn: worker w's, every w-th
            mine = [example["doc"] for example in got[worker :: max(workers, 1)]]
            shard = rank * max(workers, 1) + worker
            assert mine == list(range(shard, len(documents), shards)), (rank, worker)
        seen += got
    assert sorted(example["doc"] for example in seen) == list(range(len(documents)))
    for example in seen:
        expected = reference(documents[example["doc"]]["text"], **OPTIONS)
        assert {key: example[key] for key in expected} == dict(expected)
        assert example["text"] == documents[example["doc"]]["text"]  # the other fields travel along


@pytest.mark.parametrize("source", [list, Rereadable])
def test_resumes_from_a_state_dict(servers, documents, source):
    client = TokenizerClient(servers["wordpiece_default"].url)
    whole = [
        example["doc"]
        for example in TokenizedStream(source(documents), client.tokenize_function(), rank=1, world_size=3)
    ]
    assert whole == list(range(1, len(documents), 3))
    stream = TokenizedStream(source(documents), client.tokenize_function(), batch_size=4, rank=1, world_size=3)
    iterator = iter(stream)
    head = [next(iterator)["doc"] for _ in range(7)]
    state = stream.state_dict()
    resumed = TokenizedStream(source(documents), client.tokenize_function(), batch_size=4, rank=1, world_size=3)
    resumed.load_state_dict(state)
    assert head + [example["doc"] for example in resumed] == whole
    with pytest.raises(ValueError, match="resume with the same ranks and num_workers"):
        TokenizedStream(source(documents), rank=0, world_size=2).load_state_dict(state)


def test_stateful_dataloader_resumes_its_workers(servers, documents):
    """torchdata's StatefulDataLoader (the convention's owner) snapshots each worker's state and resumes it."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    client = TokenizerClient(servers["wordpiece_default"].url)

    def loader() -> Any:
        stream = TokenizedStream(documents, client.tokenize_function(**OPTIONS), batch_size=8, rank=0, world_size=1)
        return stateful.StatefulDataLoader(
            stream,
            batch_size=1,
            collate_fn=unbatched,
            num_workers=2,
            snapshot_every_n_steps=1,
        )

    first = loader()
    iterator = iter(first)
    head = [next(iterator)["doc"] for _ in range(25)]
    state = first.state_dict()
    del iterator
    second = loader()
    second.load_state_dict(state)
    tail = [example["doc"] for example in second]
    assert sorted(head + tail) == list(range(len(documents)))
    assert len(head + tail) == len(documents)
