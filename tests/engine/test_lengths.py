"""Token counts without the ids (``POST /lengths``, ``client.lengths``): the engine alone, the app in-process,
and real servers through the sync and async clients. A count is ``len(tokenizer(text, **options)["input_ids"])``
in-process, on three tokenizer families, for texts and pairs, with truncation, stride and overflow."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.client import AsyncTokenizerClient, InvalidRequest, PayloadTooLarge, ProtocolError, TokenizerClient
from service.engine import EncodeOptions, LengthOptions
from service.engine.errors import ErrorKind, ServiceError
from service.engine.loading import load_tokenizer
from service.http.app import create_app
from service.http.settings import Settings
from service.transport import MockTransport, Response
from service.wire import FINGERPRINT_HEADER, LENGTHS_PATH
from testkit.engine import EngineRunner, queued_requests, to_lists
from testkit.families import FAMILIES
from testkit.gates import HOLD, Gate, wait_until
from testkit.parity import TRICKY_TEXTS, reference_lengths, text_strategy

length_options = st.fixed_dictionaries(
    {},
    optional={
        "add_special_tokens": st.booleans(),
        "truncation": st.sampled_from(
            [None, False, True, "longest_first", "only_first", "only_second", "do_not_truncate"]
        ),
        "max_length": st.one_of(st.none(), st.integers(0, 40), st.just(512)),
        "stride": st.sampled_from([0, 1, 2, 5]),
        "return_overflowing_tokens": st.booleans(),
    },
)


@st.composite
def length_calls(draw: Any) -> tuple[list[str], list[str] | None, dict]:
    batch = draw(st.lists(text_strategy, min_size=1, max_size=6))
    pairs = draw(st.one_of(st.none(), st.lists(text_strategy, min_size=len(batch), max_size=len(batch))))
    return batch, pairs, draw(length_options)


def check_engine_parity(runner: EngineRunner, reference: Any, texts, pairs, options) -> None:
    theirs = reference_lengths(reference, texts, pairs, options)
    try:
        ours = runner.result(runner.engine.submit_lengths, texts, pairs, LengthOptions(**options))
    except ServiceError as exc:
        assert isinstance(theirs, BaseException), f"the engine refused what transformers accepts: {exc!r}"
        assert exc.kind in (ErrorKind.TOKENIZER, ErrorKind.INVALID_REQUEST)
        return
    assert not isinstance(theirs, BaseException), f"transformers refused ({theirs!r}) but the engine counted {ours}"
    assert ours == theirs, (texts, pairs, options)


FIXED = [
    {},
    {"add_special_tokens": False},
    {"truncation": True, "max_length": 16},
    {"max_length": 7},  # max_length alone turns truncation on, as in transformers
    {"truncation": True},  # max_length from model_max_length
    {"truncation": "only_second", "max_length": 40},
    {"truncation": True, "max_length": 12, "stride": 3, "return_overflowing_tokens": True},
    {"truncation": "longest_first", "max_length": 10, "stride": 1, "return_overflowing_tokens": True},
    {"add_special_tokens": False, "truncation": True, "max_length": 6, "stride": 2, "return_overflowing_tokens": True},
]


# -- the engine alone ------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("options", FIXED, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
def test_counts_match_transformers_on_real_text(engines, reference_tokenizers, corpus, family, options):
    # with overflow and a small max_length a long text becomes hundreds of rows: fewer texts then
    many = not options.get("return_overflowing_tokens")
    texts = corpus["zh"][: 40 if many else 12] + corpus["en"][: 20 if many else 3] + TRICKY_TEXTS
    pairs = corpus["en"][20 : 20 + len(texts) - len(TRICKY_TEXTS)] + TRICKY_TEXTS[::-1]
    check_engine_parity(engines[family], reference_tokenizers[family], texts, None, options)
    check_engine_parity(engines[family], reference_tokenizers[family], texts, pairs, options)


@pytest.mark.parametrize("family", FAMILIES)
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(call=length_calls())
def test_property_counts_match_transformers(engines, reference_tokenizers, family, call):
    texts, pairs, options = call
    check_engine_parity(engines[family], reference_tokenizers[family], texts, pairs, options)


@pytest.fixture(scope="module")
def gated_engine():
    gate = Gate()
    runner = EngineRunner(gate.gated(load_tokenizer(None)))
    yield runner, gate
    gate.open()
    runner.close()


def test_counts_share_the_rust_call_of_encodes_with_the_same_truncation(gated_engine, reference_tokenizers):
    """Queued behind a busy engine, an encode and a count with the same truncation and special tokens run as
    one Rust call; a count with other truncation, and a tokenize (the full call), run in calls of their own."""
    runner, gate = gated_engine
    engine, reference = runner.engine, reference_tokenizers["wordpiece_default"]
    gate.close()
    gate.calls.clear()

    async def queue_behind_a_busy_engine():
        busy = engine.submit_encode([HOLD])
        await asyncio.to_thread(gate.entered.wait, 30)
        truncated = EncodeOptions(truncation=True, max_length=6, padding=True)
        queued = [
            engine.submit_encode(["一二三四五六七八"], None, truncated),
            engine.submit_lengths(["今天天气很好啊", "abc"], None, LengthOptions(truncation=True, max_length=6)),
            engine.submit_lengths(["今天天气很好啊"], None, LengthOptions()),
            engine.submit_tokenize(["今天"]),
        ]
        return asyncio.gather(busy, *queued)

    everything = runner.run(queue_behind_a_busy_engine())
    wait_until(lambda: queued_requests(engine) == 4, what="four queued jobs")
    gate.open()

    async def results():
        return await everything

    _, encoded, counted, whole, tokens = runner.run(results())
    assert gate.calls[1:] == [["一二三四五六七八", "今天天气很好啊", "abc"], ["今天天气很好啊"], ["今天"]]
    expected = reference(["一二三四五六七八"], truncation=True, max_length=6)
    assert to_lists(encoded)["input_ids"] == expected["input_ids"]
    assert counted == reference_lengths(reference, ["今天天气很好啊", "abc"], None, {"max_length": 6}) == [6, 3]
    assert whole == [9] and tokens.tokens == [["今", "天"]]


def test_repeated_texts_are_tokenized_once(gated_engine, reference_tokenizers, corpus):
    runner, gate = gated_engine
    reference = reference_tokenizers["wordpiece_default"]
    gate.open()
    gate.calls.clear()
    texts = [corpus["zh"][0], corpus["en"][0], corpus["zh"][0], "好", corpus["en"][0], "好", "好"]
    pairs = ["x", "y", "x", "z", "y", "z", "w"]
    counts = runner.result(runner.engine.submit_lengths, texts)
    assert gate.calls == [[corpus["zh"][0], corpus["en"][0], "好"]]
    assert counts == reference_lengths(reference, texts, None, {})
    overflow = LengthOptions(truncation=True, max_length=12, stride=2, return_overflowing_tokens=True)
    counts = runner.result(runner.engine.submit_lengths, texts, pairs, overflow)
    assert gate.calls[1] == [(texts[0], "x"), (texts[1], "y"), ("好", "z"), ("好", "w")]  # pairs are distinct as pairs
    assert counts == reference_lengths(reference, texts, pairs, dataclasses.asdict(overflow))


def test_engine_checks_inputs_as_for_encode(engines):
    runner = engines["wordpiece_default"]
    for texts, pairs, kind, words in [
        ([], None, ErrorKind.INVALID_REQUEST, "at least one text"),
        (["a", "b"], ["x"], ErrorKind.INVALID_REQUEST, "text_pairs has 1 entries"),
        (["a"] * 4097, None, ErrorKind.TOO_LARGE, "max_texts_per_request=4096"),
    ]:
        with pytest.raises(ServiceError, match=words) as caught:
            runner.result(runner.engine.submit_lengths, texts, pairs)
        assert caught.value.kind is kind


# -- the app in-process ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app_client():
    with TestClient(create_app(Settings(max_texts_per_request=8, max_text_chars=1000))) as c:
        yield c


def test_route_answers_counts_and_the_fingerprint(app_client, reference_tokenizers):
    reference = reference_tokenizers["wordpiece_default"]
    texts = ["今天天气很好", "The weather is nice today.", ""]
    response = app_client.post(LENGTHS_PATH, json={"texts": texts, "text_pairs": ["好", "b", "c"], "max_length": 9})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"lengths": reference_lengths(reference, texts, ["好", "b", "c"], {"max_length": 9})}
    assert response.headers[FINGERPRINT_HEADER] == app_client.get("/info").json()["fingerprint"]
    assert LENGTHS_PATH in app_client.get("/openapi.json").json()["paths"]


@pytest.mark.parametrize(
    "body,status,kind,words",
    [
        ({"texts": ["a"], "padding": True}, 422, "invalid_request", "padding: not an option of this route"),
        ({"texts": ["a"], "return_tensors": "pt"}, 422, "invalid_request", "return_tensors"),
        ({"texts": []}, 422, "invalid_request", "at least one text"),
        ({"texts": "a"}, 422, "invalid_request", "texts: Input should be a valid array"),
        ({"texts": ["a"], "max_length": -1}, 422, "invalid_request", "max_length"),
        ({"texts": ["a"], "truncation": "sideways"}, 422, "invalid_request", "truncation"),
        ({"texts": ["a", "b"], "text_pairs": ["x"]}, 422, "invalid_request", "text_pairs has 1 entries"),
        ({"texts": ["a"] * 9}, 413, "too_large", "max_texts_per_request=8"),
        ({"texts": ["a" * 1001]}, 413, "too_large", "max_text_chars=1000"),
        (
            {"texts": ["一二三四五六七八九十"], "truncation": True, "max_length": 4, "stride": 3},
            422,
            "tokenizer",
            "stride",
        ),
    ],
)
def test_bad_requests_get_a_4xx_that_names_the_fix(app_client, body, status, kind, words):
    response = app_client.post(LENGTHS_PATH, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error_type"] == kind and words in response.json()["error"], response.json()


# -- real servers, through the clients -------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_client_counts_match_transformers_across_requests(servers, reference_tokenizers, corpus, family):
    """Over several requests (batch_size), for texts, pairs, a single text and overflow, sync and async."""
    reference = reference_tokenizers[family]
    texts = corpus["zh"][:150] + corpus["en"][:50]
    pairs = corpus["en"][50:100] + corpus["zh"][150:300]
    client = TokenizerClient(servers[family].url)
    assert client.lengths(texts, batch_size=64) == reference_lengths(reference, texts, None, {})
    options = {"add_special_tokens": False, "truncation": "longest_first", "max_length": 48}
    assert client.lengths(texts, pairs, batch_size=33, **options) == reference_lengths(reference, texts, pairs, options)
    assert client.lengths(list(zip(texts, pairs, strict=True)), **options) == client.lengths(texts, pairs, **options)
    overflow = {"truncation": True, "max_length": 24, "stride": 4, "return_overflowing_tokens": True}
    assert client.lengths(texts, **overflow) == reference_lengths(reference, texts, None, overflow)
    # a single text gives what len(tokenizer(text, **options)["input_ids"]) gives
    assert client.lengths(texts[0]) == len(reference(texts[0])["input_ids"])
    one_pair = reference(texts[0], pairs[0], max_length=9)
    assert client.lengths(texts[0], pairs[0], max_length=9) == len(one_pair["input_ids"])
    assert client.lengths(texts[-1], **overflow) == [len(row) for row in reference(texts[-1], **overflow)["input_ids"]]
    assert client.lengths([]) == []

    async def async_counts():
        async with AsyncTokenizerClient(servers[family].url) as aclient:
            return await aclient.lengths(texts, pairs, batch_size=50, **options), await aclient.lengths(texts[0])

    expected = (reference_lengths(reference, texts, pairs, options), client.lengths(texts[0]))
    assert asyncio.run(async_counts()) == expected


def test_client_refusals_name_the_fix(servers):
    client = TokenizerClient(servers["wordpiece_default"].url)
    with pytest.raises(TypeError, match="padding"):
        client.lengths(["a"], padding=True)  # not an option of a count
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        client.lengths(["a"], batch_size=0)
    with pytest.raises(PayloadTooLarge, match="max_texts_per_request=4096"):
        client.lengths(["a"] * 4097, batch_size=4097)
    with pytest.raises(InvalidRequest, match="stride"):
        client.lengths(["一二三四五六七八九十"], truncation=True, max_length=4, stride=3)
    with pytest.raises(ValueError, match="batch length of text: 2 does not match"):
        client.lengths(["a", "b"], ["x"])


def test_an_answer_with_the_wrong_count_is_a_protocol_error():
    def handler(request):
        return Response(200, {"content-type": "application/json"}, b'{"lengths": [3]}')

    client = TokenizerClient("http://127.0.0.1:9", transport=MockTransport(handler))
    with pytest.raises(ProtocolError, match="expected 2 ints"):
        client.lengths(["a", "b"])
