"""The ragged binary answer through the SDK: ``encode_ragged`` (sync and async) against the JSON answer and
in-process transformers on three tokenizer families, the RaggedResult API, and the fallback to JSON when a
server predates the ragged media type."""

from __future__ import annotations

import asyncio
import json
import pickle

import numpy as np
import pytest

from service.client import (
    AsyncTokenizerClient,
    MockTransport,
    ProtocolError,
    RaggedResult,
    Response,
    TokenizerClient,
)
from service.wire import JSON_MEDIA_TYPE, RAGGED_MEDIA_TYPE
from testkit.families import FAMILIES
from testkit.parity import TRICKY_TEXTS, normalise

CASES = [
    {},
    {"add_special_tokens": False, "truncation": True, "max_length": 16},
    {"return_offsets_mapping": True, "return_special_tokens_mask": True, "return_length": True},
    {"truncation": True, "max_length": 10, "stride": 2, "return_overflowing_tokens": True},
    {"padding": "longest", "return_token_type_ids": True},  # rectangular results come the same way
]


def case_id(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items()) or "defaults"


@pytest.fixture(scope="module")
def texts(corpus):
    return corpus["zh"][:20] + corpus["en"][:20] + TRICKY_TEXTS


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("options", CASES, ids=case_id)
def test_ragged_binary_equals_json_and_in_process(servers, reference_tokenizers, texts, family, options):
    client = TokenizerClient(servers[family].url)
    reference = reference_tokenizers[family]
    theirs = {key: normalise(value) for key, value in reference(texts, **options).items()}
    ragged = client.encode_ragged(texts, **options)
    assert isinstance(ragged, RaggedResult)
    assert normalise(ragged.tolist()) == theirs
    assert list(ragged.tolist()) == list(theirs)  # BatchEncoding's key order
    assert normalise(dict(client(texts, **options))) == theirs  # the JSON answer says the same
    for key, flat in ragged.items():
        assert flat.dtype == np.int64, key
    assert ragged.row_lengths.tolist() == [len(row) for row in theirs["input_ids"]]
    pairs = texts[::-1]
    assert normalise(client.encode_ragged(texts, pairs, **options).tolist()) == normalise(
        dict(reference(texts, pairs, **options))
    )


def test_ragged_result_rows_are_views_and_pickle(servers, reference_tokenizers, texts):
    client = TokenizerClient(servers["sentencepiece"].url)
    ragged = client.encode_ragged(texts, return_offsets_mapping=True)
    expected = reference_tokenizers["sentencepiece"](texts)["input_ids"]
    rows = ragged.rows()
    assert [row.tolist() for row in rows] == expected
    assert all(np.shares_memory(row, ragged["input_ids"]) for row in rows if len(row))
    assert ragged.num_rows == len(texts) and ragged.row_offsets[-1] == len(ragged["input_ids"])
    assert ragged["offset_mapping"].shape == (len(ragged["input_ids"]), 2)
    clone = pickle.loads(pickle.dumps(ragged))
    assert clone.tolist() == ragged.tolist() and clone.row_offsets.tolist() == ragged.row_offsets.tolist()
    single = client.encode_ragged(texts[0])  # a single text is a batch of one row
    assert single.num_rows == 1 and single.tolist()["input_ids"] == [expected[0]]


def test_async_ragged_equals_in_process(servers, reference_tokenizers, texts):
    reference = reference_tokenizers["bytelevel_bpe"]

    async def main():
        async with AsyncTokenizerClient(servers["bytelevel_bpe"].url) as client:
            chunks = [texts[i : i + 7] for i in range(0, len(texts), 7)]
            return chunks, await asyncio.gather(*(client.encode_ragged(chunk, max_length=24) for chunk in chunks))

    chunks, results = asyncio.run(main())
    for chunk, result in zip(chunks, results, strict=True):
        assert normalise(result.tolist()) == normalise(dict(reference(chunk, max_length=24)))


def test_a_server_that_answers_json_is_read_too():
    """A server predating the ragged type does not name it in its Accept check, so it answers JSON: the
    client reads that into the same RaggedResult."""
    seen = []

    def handler(request):
        seen.append(request.headers["Accept"])
        body = {"input_ids": [[1, 2, 3], [], [4]], "offset_mapping": [[[0, 1], [1, 2], [2, 3]], [], [[0, 2]]]}
        return Response(200, {"content-type": JSON_MEDIA_TYPE}, json.dumps(body).encode())

    result = TokenizerClient("http://old", transport=MockTransport(handler)).encode_ragged(["a", "b", "c"])
    assert seen == [RAGGED_MEDIA_TYPE]
    assert result.row_lengths.tolist() == [3, 0, 1] and result["input_ids"].tolist() == [1, 2, 3, 4]
    assert result.tolist() == {
        "input_ids": [[1, 2, 3], [], [4]],
        "offset_mapping": [[(0, 1), (1, 2), (2, 3)], [], [(0, 2)]],
    }


def test_a_broken_ragged_answer_is_a_protocol_error():
    from safetensors.numpy import save

    def handler(request):
        blob = save({"input_ids": np.arange(5, dtype=np.int64), "row_lengths": np.array([2, 2], dtype=np.int64)})
        return Response(200, {"content-type": RAGGED_MEDIA_TYPE}, blob)

    with pytest.raises(ProtocolError, match="5 values, not 4"):
        TokenizerClient("http://broken", transport=MockTransport(handler)).encode_ragged(["a", "b"])


@pytest.mark.parametrize(
    ("accept", "ragged"),
    [
        (RAGGED_MEDIA_TYPE, True),
        (f"{RAGGED_MEDIA_TYPE}, application/json;q=0.5", True),
        (f"application/json, {RAGGED_MEDIA_TYPE}", True),  # as high as JSON and named: the opt-in wins
        (f"application/json, {RAGGED_MEDIA_TYPE};q=0.5", False),
        (f"{RAGGED_MEDIA_TYPE};q=0", False),
        ("*/*", False),  # never through a wildcard
        ("application/*", False),
        (None, False),
    ],
)
def test_the_ragged_answer_is_an_opt_in_by_name(accept, ragged):
    from service.http.negotiation import wants_ragged

    assert wants_ragged(accept) is ragged
