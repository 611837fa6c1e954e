"""Tier 3, the SDK against real servers: parity with in-process transformers (lists, numpy, torch),
decode/tokenize/info, fingerprint pinning, API keys, pickling, fork safety, the async twin, and a fresh
interpreter proving the client never imports the tokenizer stack."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import textwrap
import warnings

import numpy as np
import pytest
import torch

import service.client as client_module
from service import wire
from service.client import (
    AsyncHTTPTransport,
    AsyncHTTPXTransport,
    AsyncTokenizerClient,
    EncodeResult,
    FingerprintMismatch,
    HTTPTransport,
    InvalidRequest,
    MockTransport,
    NotAcceptable,
    Request,
    RequestRejected,
    Response,
    TokenizerClient,
    Unauthorized,
)
from service.client.answers import rejection
from service.client.results import arrays_from_safetensors
from testkit.families import FAMILIES
from testkit.parity import TRICKY_TEXTS
from testkit.scripts import run_json_script
from testkit.servers import ServerProcess
from testkit.stack import FORBIDDEN

OPTION_CASES = [
    {},
    {"padding": "longest", "truncation": True, "max_length": 32},
    {
        "padding": "max_length",
        "max_length": 24,
        "truncation": True,
        "padding_side": "left",
        "return_special_tokens_mask": True,
        "return_length": True,
    },
    {
        "truncation": "longest_first",
        "max_length": 12,
        "stride": 3,
        "return_overflowing_tokens": True,
        "padding": True,
        "return_offsets_mapping": True,
    },
    {
        "padding": True,
        "pad_to_multiple_of": 8,
        "add_special_tokens": False,
        "return_token_type_ids": True,
        "return_attention_mask": False,
    },
]
TENSOR_CASES = [case for case in OPTION_CASES if case.get("padding")]


def case_id(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items()) or "defaults"


@pytest.fixture(scope="module")
def texts(corpus):
    return corpus["zh"][:6] + corpus["en"][:6] + TRICKY_TEXTS


@pytest.fixture(scope="module")
def clients(servers):
    made = {family: TokenizerClient(server.url) for family, server in servers.items()}
    yield made
    for client in made.values():
        client.close()


def assert_same_lists(ours: EncodeResult, theirs) -> None:
    """Exactly what BatchEncoding holds: same key order, same values (offsets as tuples included)."""
    assert isinstance(ours, EncodeResult)
    assert list(ours) == list(theirs)
    for key in theirs:
        assert ours[key] == theirs[key], key


def assert_same_tensors(ours: EncodeResult, theirs, kind: type) -> None:
    assert list(ours) == list(theirs)
    for key in theirs:
        value = ours[key]
        assert isinstance(value, kind), key
        if kind is torch.Tensor:
            assert value.dtype == torch.int64 and torch.equal(value, theirs[key]), key
        else:
            assert value.dtype == np.int64 and np.array_equal(value, theirs[key]), key
            assert value.flags.writeable


def test_exported_members():
    """The public surface, pinned: a change here is an API change."""
    assert sorted(client_module.__all__) == sorted(
        [
            "TokenizerClient",
            "AsyncTokenizerClient",
            "EncodeResult",
            "RaggedResult",
            "RetryPolicy",
            "RetryLog",
            "Timeout",
            "URL_ENV",
            "API_KEY_ENV",
            "Request",
            "Response",
            "HTTPTransport",
            "HTTPXTransport",
            "AsyncHTTPTransport",
            "AsyncHTTPXTransport",
            "MockTransport",
            "SyncTransport",
            "AsyncTransport",
            "TokenizerServiceError",
            "TransportError",
            "ConnectError",
            "TransportTimeout",
            "ProtocolError",
            "RequestRejected",
            "InvalidRequest",
            "Unauthorized",
            "PayloadTooLarge",
            "NotAcceptable",
            "ServerBusy",
            "RequestTimeout",
            "FingerprintMismatch",
            "RetriesExhausted",
            "ServiceUnreachable",
            "LaunchError",
        ]
    )
    for name in client_module.__all__:
        assert getattr(client_module, name) is not None
    for name in client_module.__all__:
        member = getattr(client_module, name)
        if isinstance(member, type) and issubclass(member, Exception):
            assert issubclass(member, client_module.TokenizerServiceError), name
    import service.data
    import service.launch

    # the data tools and the launcher export their own, the SDK none of theirs
    assert sorted(service.data.__all__) == sorted(
        [
            "TokenizerLike",
            "TokenizeFunction",
            "ChatTokenizeFunction",
            "MapInputError",
            "TokenizedStream",
            "Collator",
            "ChatCollator",
            "TokenBudgetBatchSampler",
        ]
    )
    assert sorted(service.launch.__all__) == sorted(
        ["launch", "Launch", "LaunchedService", "LaunchedTransport", "AsyncLaunchedTransport"]
    )
    for module in (service.data, service.launch):
        for name in module.__all__:
            assert getattr(module, name) is not None, name


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("options", OPTION_CASES, ids=case_id)
def test_batch_lists_match_transformers(clients, reference_tokenizers, texts, family, options):
    reference = reference_tokenizers[family]
    assert_same_lists(clients[family](texts, **options), reference(texts, **options))
    pairs = texts[::-1]
    assert_same_lists(clients[family](texts, pairs, **options), reference(texts, pairs, **options))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("options", TENSOR_CASES, ids=case_id)
def test_batch_tensors_match_transformers(clients, reference_tokenizers, texts, family, options):
    reference = reference_tokenizers[family]
    assert_same_tensors(
        clients[family](texts, return_tensors="pt", **options),
        reference(texts, return_tensors="pt", **options),
        torch.Tensor,
    )
    assert_same_tensors(
        clients[family].encode(texts, texts[::-1], return_tensors="np", **options),
        reference(texts, texts[::-1], return_tensors="np", **options),
        np.ndarray,
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_single_text_and_pair_forms_match_transformers(clients, reference_tokenizers, corpus, family):
    client, reference = clients[family], reference_tokenizers[family]
    text, pair = corpus["zh"][0], corpus["en"][0]
    assert_same_lists(client(text), reference(text))  # no batch dimension
    assert_same_lists(
        client(text, pair, return_offsets_mapping=True), reference(text, pair, return_offsets_mapping=True)
    )
    assert_same_lists(client(text, ""), reference(text, ""))  # transformers: an empty pair is no pair
    overflow = {"max_length": 8, "truncation": True, "return_overflowing_tokens": True, "return_length": True}
    assert_same_lists(client(text, **overflow), reference(text, **overflow))  # keeps the batch dimension
    assert_same_tensors(client(text, return_tensors="pt"), reference(text, return_tensors="pt"), torch.Tensor)
    batch_of_pairs = [(text, pair), (pair, text)]
    assert_same_lists(client(batch_of_pairs, padding=True), reference(batch_of_pairs, padding=True))


def test_tensors_are_zero_copy_views_of_the_body(clients, texts):
    """Every array views the received bytearray (no copy), and is writable like transformers' tensors."""
    from safetensors.numpy import save

    blob = bytearray(
        save(
            {
                "input_ids": np.arange(12, dtype=np.int64).reshape(3, 4),
                "attention_mask": np.ones((3, 4), dtype=np.int64),
            }
        )
    )
    arrays = arrays_from_safetensors(blob, "test")
    raw = np.frombuffer(blob, dtype=np.uint8)
    for array in arrays.values():
        assert np.shares_memory(array, raw) and array.flags.writeable
    tensor = torch.from_numpy(arrays["input_ids"])
    tensor[0, 0] = 99  # writes land in the body itself
    assert arrays["input_ids"][0, 0] == 99
    assert list(arrays) == ["input_ids", "attention_mask"]  # transformers' order, not the blob's sorted order

    # As with the in-process tokenizer, results are writable: torch warns when it wraps a read-only array
    # (numpy over the bytes of a body), and writing there would change an immutable object.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = clients["wordpiece_default"](texts, padding=True, return_tensors="pt")
        arrays = clients["wordpiece_default"](texts, padding=True, return_tensors="np")
    assert not [w for w in caught if "writable" in str(w.message)], [str(w.message) for w in caught]
    result["input_ids"][0, 0] = 7
    assert result["input_ids"][0, 0] == 7
    assert all(array.flags.writeable for array in arrays.values())


# What a real server refuses, one request per kind: through the client's methods, and as raw requests
ERRORS_OF_CALLS = {
    "invalid_request": lambda client: client(["a"], padding="sideways"),
    # transformers refuses it: "truncation length (10) is not a multiple of pad_to_multiple_of (8)"
    "tokenizer": lambda client: client(["a"], padding=True, truncation=True, max_length=10, pad_to_multiple_of=8),
    "too_large": lambda client: client.lengths(["a"] * 4097, batch_size=4097),
    "not_acceptable": lambda client: client(["a", "a b c d"], return_tensors="pt"),
}
ERRORS_OF_REQUESTS = {
    "not_found": ("GET", "/no-such-route", {}, None),
    "method_not_allowed": ("GET", wire.ENCODE_PATH, {}, None),
    "unsupported_media_type": ("POST", wire.ENCODE_PATH, {"Content-Type": "text/plain"}, b'{"texts": ["a"]}'),
}


def test_a_real_servers_errors_become_the_status_tables_exceptions_by_their_error_type(servers):
    """Each error a real server sends is raised as the exception the one status table gives its error_type, with
    the table's status; and still is when a proxy on the way changes the status (here rewritten to 500, whose own
    exception is the plain RequestRejected): the client reads the error_type, not the status."""
    url = servers["wordpiece_default"].url
    transport = HTTPTransport()

    def status_rewritten(request: Request) -> Response:
        response = transport.handle_request(request)
        return Response(500, response.headers, response.body) if response.status >= 400 else response

    plain, proxied = (
        TokenizerClient(url, transport=transport),
        TokenizerClient(url, transport=MockTransport(status_rewritten)),
    )
    for error_type, call in ERRORS_OF_CALLS.items():
        expected = wire.ERROR_TYPES[error_type]
        for client, status in ((plain, expected.status), (proxied, 500)):
            with pytest.raises(RequestRejected) as info:
                call(client)
            assert (type(info.value).__name__, info.value.error_type, info.value.status) == (
                expected.exception,
                error_type,
                status,
            ), info.value
    for error_type, (method, path, headers, body) in ERRORS_OF_REQUESTS.items():
        expected = wire.ERROR_TYPES[error_type]
        response = transport.handle_request(Request(method, url + path, headers, body))
        assert response.status == expected.status, response
        for answer in (response, Response(500, response.headers, response.body)):
            error = rejection(answer, url + path, method)
            assert (type(error).__name__, error.error_type) == (expected.exception, error_type), error


@pytest.mark.parametrize("family", FAMILIES)
def test_refusals_are_invalid_request(clients, reference_tokenizers, texts, family):
    client, reference = clients[family], reference_tokenizers[family]
    with pytest.raises(Exception, match="Second sequence not provided"):
        reference(texts, truncation="only_second", max_length=4)  # no pairs to truncate
    with pytest.raises(InvalidRequest) as info:
        client(texts, truncation="only_second", max_length=4)
    assert info.value.status == 422 and info.value.error_type in ("tokenizer", "invalid_request")
    assert isinstance(info.value, ValueError)  # code catching transformers' ValueError still works
    with pytest.raises(InvalidRequest, match="padding"):
        client(texts, padding="sideways")
    with pytest.raises(NotAcceptable, match="padding"):
        client(texts, return_tensors="pt")  # ragged rows cannot be a tensor, as in transformers
    with pytest.raises(ValueError, match="return_tensors"):
        client(texts, return_tensors="tf")
    with pytest.raises(TypeError):
        client(texts, "one pair for a batch")
    with pytest.raises(TypeError, match="pre-tokenized"):
        client([["already", "split"], ["words", "here", "x"]])


@pytest.mark.parametrize("family", FAMILIES)
def test_decode_and_tokenize_match_transformers(clients, reference_tokenizers, texts, family):
    client, reference = clients[family], reference_tokenizers[family]
    ids = reference(texts)["input_ids"]
    assert client.batch_decode(ids) == reference.batch_decode(ids)
    assert client.batch_decode(ids, skip_special_tokens=True) == reference.batch_decode(ids, skip_special_tokens=True)
    assert client.decode(ids[0]) == reference.decode(ids[0])
    padded = reference(texts[:4], padding=True, return_tensors="pt")["input_ids"]
    assert client.batch_decode(padded, skip_special_tokens=True) == reference.batch_decode(
        padded, skip_special_tokens=True
    )
    assert client.decode(padded[1]) == reference.decode(padded[1])
    assert client.decode([np.int64(i) for i in ids[0]]) == reference.decode(ids[0])
    assert client.tokenize(texts[0]) == reference.tokenize(texts[0])
    assert client.tokenize(texts[:5]) == [reference.tokenize(t) for t in texts[:5]]


@pytest.mark.parametrize("family", FAMILIES)
def test_tokenize_with_pairs_truncation_and_sequence_ids_matches_transformers(
    clients, reference_tokenizers, texts, family
):
    client, reference = clients[family], reference_tokenizers[family]
    first, second = texts[:4], texts[4:8]
    assert client.tokenize(first[0], second[0]) == reference.tokenize(first[0], second[0])
    specials = client.tokenize(first[0], second[0], add_special_tokens=True)
    assert specials == reference.tokenize(first[0], second[0], add_special_tokens=True)
    assert client.tokenize(list(zip(first, second, strict=True))) == [
        reference.tokenize(a, b) for a, b in zip(first, second, strict=True)
    ]
    # truncated: the tokens of the encoding encode makes, one per id, and which sequence each came from
    options = {"add_special_tokens": True, "truncation": "longest_first", "max_length": 12}
    expected = reference(first, second, **options)
    answer = client.tokenize(first, second, return_sequence_ids=True, **options)
    assert answer == {
        "tokens": [expected.tokens(i) for i in range(len(first))],
        "sequence_ids": [expected.sequence_ids(i) for i in range(len(first))],
    }
    assert [len(row) for row in answer["tokens"]] == [
        len(row) for row in client.encode(first, second, **options)["input_ids"]
    ]
    one = reference(first[1], truncation=True, max_length=5)
    assert client.tokenize(
        first[1], truncation=True, max_length=5, add_special_tokens=True, return_sequence_ids=True
    ) == {
        "tokens": one.tokens(),
        "sequence_ids": one.sequence_ids(),
    }
    with pytest.raises(InvalidRequest, match="truncation"):
        client.tokenize(first, truncation="sideways")
    with pytest.raises(TypeError, match="text_pair"):
        client.tokenize(first, second[0])


def test_info_and_fingerprint_pinning(servers, clients):
    info = clients["wordpiece_default"].info()
    assert info["fingerprint"].startswith("sha256:") and info["vocab_size"] > 1000
    other = clients["bytelevel_bpe"].info()["fingerprint"]
    assert other != info["fingerprint"]

    pinned = TokenizerClient(servers["wordpiece_default"].url, expected_fingerprint=info["fingerprint"])
    assert pinned(["pinned and right"], padding=True)["input_ids"]
    assert pinned.info()["fingerprint"] == info["fingerprint"]

    # The same pin against a server with another tokenizer: every call fails, at once, naming both.
    wrong = TokenizerClient(servers["bytelevel_bpe"].url, expected_fingerprint=info["fingerprint"])
    for call in (
        lambda: wrong(["x"]),
        lambda: wrong.decode([1, 2]),
        lambda: wrong.tokenize("x"),
        wrong.info,
        lambda: wrong(["x"], padding=True, return_tensors="pt"),
    ):
        with pytest.raises(FingerprintMismatch) as exc_info:
            call()
        assert exc_info.value.expected == info["fingerprint"] and exc_info.value.actual == other
        assert servers["bytelevel_bpe"].url in str(exc_info.value) and other in str(exc_info.value)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_api_key_is_sent_as_bearer(tmp_path, monkeypatch):
    with ServerProcess("--api-key", "s3cret", log_path=tmp_path / "auth.log") as server:
        with pytest.raises(Unauthorized) as info:
            TokenizerClient(server.url).tokenize("x")
        assert info.value.status == 401
        assert TokenizerClient(server.url, api_key="s3cret").tokenize("hello") == ["hello"]
        monkeypatch.setenv("TOKENIZER_SERVICE_API_KEY", "s3cret")
        monkeypatch.setenv("TOKENIZER_SERVICE_URL", f" {server.url}/ ")
        from_env = TokenizerClient()
        assert from_env.urls == (server.url,)
        assert from_env.tokenize("hello") == ["hello"]
        assert "s3cret" not in repr(from_env) and "s3cret" not in repr(from_env.collator())


def test_construction_opens_nothing(servers):
    """No socket, thread or event loop at construction: safe to build before a fork, at import time."""
    import gc
    import os
    import threading

    url = servers["wordpiece_default"].url
    gc.collect()  # an earlier test's unreachable client, collected mid-count, would close its sockets
    gc.disable()
    try:
        fds, threads = len(os.listdir("/proc/self/fd")), threading.active_count()
        made = [TokenizerClient([url, url + "/"]), AsyncTokenizerClient(url)]
        made.append(made[0].collator())
        made.append(made[1].collator())
        assert len(os.listdir("/proc/self/fd")) == fds and threading.active_count() == threads
    finally:
        gc.enable()
    assert made[0]._transport._pools is None and made[1]._transport._pools is None


def test_client_and_collator_pickle_after_use(clients, reference_tokenizers, texts):
    client = clients["sentencepiece"]
    expected = reference_tokenizers["sentencepiece"](texts, padding=True, return_tensors="pt")
    assert_same_tensors(client(texts, padding=True, return_tensors="pt"), expected, torch.Tensor)  # pool now open
    clone = pickle.loads(pickle.dumps(client))
    assert clone._transport._pools is None  # no connection travels
    assert_same_tensors(clone(texts, padding=True, return_tensors="pt"), expected, torch.Tensor)
    collate = pickle.loads(pickle.dumps(client.collator(max_length=64, truncation=True)))
    batch = collate(texts)
    assert torch.equal(
        batch["input_ids"],
        reference_tokenizers["sentencepiece"](texts, padding=True, truncation=True, max_length=64, return_tensors="pt")[
            "input_ids"
        ],
    )
    result = pickle.loads(pickle.dumps(client(texts[:2])))
    assert isinstance(result, EncodeResult) and result.input_ids == result["input_ids"]


def _encode_in_child(client, texts, queue):
    result = client(texts, padding=True, return_tensors="pt")
    queue.put((client._transport._pools.pid, result["input_ids"].tolist()))


@pytest.mark.timeout(60)
def test_forked_child_opens_its_own_connections(clients, reference_tokenizers, texts):
    """A client used in the parent, then used in a forked child: the child never touches the parent's
    socket (its pool is its own), both get exact results, and the parent's connection stays usable."""
    import os

    client = TokenizerClient(clients["wordpiece_default"].urls)
    expected = reference_tokenizers["wordpiece_default"](texts, padding=True)["input_ids"]
    assert client(texts, padding=True)["input_ids"] == expected
    parent_pools = client._transport._pools
    ((parent_conn, _),) = next(iter(parent_pools.idle.values()))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    children = [context.Process(target=_encode_in_child, args=(client, texts, queue)) for _ in range(2)]
    for child in children:
        child.start()
    results = [queue.get(timeout=30) for _ in children]
    for child in children:
        child.join(10)
        assert child.exitcode == 0
    assert {pid for pid, _ in results} == {child.pid for child in children}
    assert all(ids == expected for _, ids in results)
    assert client(texts, padding=True)["input_ids"] == expected
    assert client._transport._pools is parent_pools and parent_pools.pid == os.getpid()
    assert next(iter(parent_pools.idle.values()))[0][0] is parent_conn  # the parent's connection, reused


@pytest.mark.parametrize("transport", [AsyncHTTPTransport, AsyncHTTPXTransport])
def test_async_client_matches_sync_and_transformers(servers, reference_tokenizers, texts, transport):
    reference = reference_tokenizers["bytelevel_bpe"]
    info_fingerprint = TokenizerClient(servers["bytelevel_bpe"].url).info()["fingerprint"]

    async def main():
        async with AsyncTokenizerClient(
            servers["bytelevel_bpe"].url, expected_fingerprint=info_fingerprint, transport=transport()
        ) as client:
            chunks = [texts[i : i + 4] for i in range(0, len(texts), 4)]
            results = await asyncio.gather(*(client(chunk, padding="longest", return_tensors="pt") for chunk in chunks))
            lists = await client.encode(texts, texts[::-1], return_offsets_mapping=True)
            single = await client(texts[0])
            decoded = await client.batch_decode(lists["input_ids"], skip_special_tokens=True)
            one = await client.decode(lists["input_ids"][0])
            tokens = await client.tokenize(texts[:3])
            pair_tokens = await client.tokenize(
                texts[0], texts[1], truncation=True, max_length=7, return_sequence_ids=True
            )
            info = await client.info()
            return chunks, results, lists, single, decoded, one, tokens, pair_tokens, info

    chunks, results, lists, single, decoded, one, tokens, pair_tokens, info = asyncio.run(main())
    for chunk, result in zip(chunks, results, strict=True):
        assert_same_tensors(result, reference(chunk, padding="longest", return_tensors="pt"), torch.Tensor)
    assert_same_lists(lists, reference(texts, texts[::-1], return_offsets_mapping=True))
    assert_same_lists(single, reference(texts[0]))
    assert decoded == reference.batch_decode(lists["input_ids"], skip_special_tokens=True)
    assert one == reference.decode(lists["input_ids"][0])
    assert tokens == [reference.tokenize(t) for t in texts[:3]]
    expected_pair = reference(texts[0], texts[1], truncation=True, max_length=7, add_special_tokens=False)
    assert pair_tokens == {"tokens": expected_pair.tokens(), "sequence_ids": expected_pair.sequence_ids()}
    assert info["fingerprint"] == info_fingerprint

    async def pinned_wrong():
        client = AsyncTokenizerClient(
            servers["wordpiece_default"].url, expected_fingerprint=info_fingerprint, transport=transport()
        )
        try:
            await client(["x"])
        finally:
            await client.aclose()

    with pytest.raises(FingerprintMismatch):
        asyncio.run(pinned_wrong())


@pytest.mark.parametrize("transport", [AsyncHTTPTransport, AsyncHTTPXTransport])
def test_async_client_survives_a_new_event_loop(servers, reference_tokenizers, texts, transport):
    """One client used from two asyncio.run() calls: the pool of the first loop is not reused on the second."""
    client = AsyncTokenizerClient(servers["wordpiece_default"].url, transport=transport())
    expected = reference_tokenizers["wordpiece_default"](texts, padding=True)["input_ids"]
    for _ in range(2):
        assert asyncio.run(client(texts, padding=True))["input_ids"] == expected
    collate = client.collator(truncation=True, max_length=16)  # sync twin, same settings
    assert torch.equal(
        collate(texts)["input_ids"],
        reference_tokenizers["wordpiece_default"](
            texts, padding=True, truncation=True, max_length=16, return_tensors="pt"
        )["input_ids"],
    )


FRESH_INTERPRETER = textwrap.dedent("""
    import json, sys
    url = sys.argv[1]
    from service.client import TokenizerClient
    after_import = sorted(sys.modules)
    client = TokenizerClient(url)
    batch = client(["hello world", "你好"], padding=True, return_tensors="pt")
    arrays = client(["hello world", "你好"], padding=True, return_tensors="np")
    lists = client("hello world")
    texts = client.batch_decode(batch["input_ids"].tolist(), skip_special_tokens=True)
    tokens = client.tokenize("hello world")
    info = client.info()
    rows = [{"text": "a b c", "label": 1}, {"text": "d", "label": 0}]
    collated = client.collator(max_length=8, truncation=True)(rows)
    import asyncio
    from service.client import AsyncTokenizerClient
    async def go():
        async with AsyncTokenizerClient(url) as aclient:
            return (await aclient(["x"]))["input_ids"]
    async_ids = asyncio.run(go())
    print(json.dumps({"after_import": after_import, "after_use": sorted(sys.modules),
                      "ids": batch["input_ids"].tolist(), "texts": texts, "tokens": tokens,
                      "labels": collated["label"].tolist(), "collated_keys": list(collated)}))
""")


@pytest.mark.timeout(60)
def test_fresh_interpreter_never_imports_the_tokenizer_stack(servers, tmp_path):
    script = tmp_path / "fresh.py"
    script.write_text(FRESH_INTERPRETER)
    report = run_json_script(script, servers["wordpiece_default"].url, cwd=tmp_path, timeout=50)
    assert report["texts"][0] == "hello world" and report["tokens"] == ["hello", "world"]
    assert report["labels"] == [1, 0]
    assert report["collated_keys"] == ["input_ids", "token_type_ids", "attention_mask", "label"]

    def top(modules):
        return {name.split(".")[0] for name in modules}

    # The SDK alone at import; the data tools (service.data) only once a collator was asked for, and
    # service.extras (standard library: which extra brings a missing torch) once tensors were.
    sdk = ("service.client", "service.transport")
    for stage, allowed in (("after_import", sdk), ("after_use", (*sdk, "service.data", "service.extras"))):
        loaded = top(report[stage])
        assert not loaded & set(FORBIDDEN), (stage, sorted(loaded & set(FORBIDDEN)))
        ours = {m for m in report[stage] if m == "service" or m.startswith("service.")}
        # the contract, where a service is, serve's flags, fingerprint pins, the one misspelling rule
        shared = ("service", "service.wire", "service.addresses", "service.serve_flags", "service.fingerprint_pins")
        shared += ("service.suggestions",)
        assert all(m in shared or m.startswith(allowed) for m in ours), (stage, sorted(ours))
    # Light at import: numpy and torch come only with use; httpx never, with the default transports; asyncio
    # only with the async client (torch imports it too, once tensors are asked for).
    assert not top(report["after_import"]) & {"numpy", "torch", "httpx", "safetensors", "asyncio"}
    assert "torch" in top(report["after_use"]) and not top(report["after_use"]) & {"httpx", "safetensors"}


SDK_ALONE = textwrap.dedent("""
    import importlib.abc, json, sys

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[:2] in (["service", "launch"], ["service", "data"]):
                raise ImportError(f"{name} is not installed here")
            return None

    sys.meta_path.insert(0, Absent())
    import service.client
    from service.client import EncodeResult, MockTransport, Response, TokenizerClient

    def answer(request):
        return Response(200, {"content-type": "application/json"}, json.dumps({"input_ids": [[1, 2]]}).encode())

    client = TokenizerClient("http://sdk.invalid", transport=MockTransport(answer))
    encoded = client(["a b"])
    doors = {}
    for door in ("collator", "launch"):
        try:
            getattr(client, door)()
        except ImportError as exc:
            doors[door] = str(exc)
    print(json.dumps({"ids": encoded["input_ids"], "doors": doors}))
""")


@pytest.mark.timeout(60)
def test_the_sdk_imports_and_works_without_the_launcher_and_the_data_tools(tmp_path):
    """Three products: the HTTP SDK (service.client) needs neither the process supervisor (service.launch)
    nor the data tools (service.data); only their doors on the client (launch, collator) reach them."""
    script = tmp_path / "sdk_alone.py"
    script.write_text(SDK_ALONE)
    report = run_json_script(script, cwd=tmp_path, timeout=50)
    assert report["ids"] == [[1, 2]]
    assert "service.data" in report["doors"]["collator"] and "service.launch" in report["doors"]["launch"]
