"""Tier 2: the app in-process (TestClient, lifespan running). Contract, errors, limits, auth, metrics."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load as load_safetensors

from service.engine.errors import ErrorKind, ServiceError
from service.engine.loading import fingerprint, load_tokenizer
from service.http.app import create_app
from service.http.errors import HttpErrorKind
from service.http.models import EncodeRequest, LengthsRequest, TokenizeRequest, parse_body, validate_body
from service.http.responses import STATUS_BY_KIND
from service.http.settings import Settings
from service.wire import FINGERPRINT_HEADER, PADDING_VALUES, SAFETENSORS_MEDIA_TYPE, TRUNCATION_VALUES, EncodeOptions
from testkit.parity import TRICKY_TEXTS, assert_same, reference_call

BINARY = {"Accept": SAFETENSORS_MEDIA_TYPE}


def make_client(**settings) -> TestClient:
    return TestClient(create_app(Settings(**settings)))


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client(max_texts_per_request=8, max_text_chars=150_000, max_body_bytes=2_000_000) as c:
        yield c


@pytest.fixture(scope="module")
def reference(reference_tokenizers):
    return reference_tokenizers["wordpiece_default"]


def assert_error(response, status: int, kind: ErrorKind | HttpErrorKind, *words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"}, body
    assert body["error_type"] == kind.value
    for word in words:
        assert word in body["error"], body["error"]


def test_encode_json_matches_transformers(client, reference, corpus):
    texts = corpus["zh"][:4] + corpus["en"][:4]
    options = {
        "padding": "longest",
        "truncation": True,
        "max_length": 32,
        "return_special_tokens_mask": True,
        "return_length": True,
        "return_offsets_mapping": True,
    }
    response = client.post("/encode", json={"texts": texts, **options})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert_same(response.json(), reference_call(reference, texts, None, options))


def test_encode_binary_is_safetensors_of_the_same_arrays(client, reference, corpus):
    """Pairs whose second text is longer than max_length: only_second truncates it and overflows with a
    stride, every row padded to max_length (a multiple of 8); the binary answer has transformers' arrays."""
    texts, pairs = [t[:12] for t in corpus["zh"][:5]], [p for p in corpus["en"] if len(p) > 600][:5]
    options = {
        "padding": "max_length",
        "truncation": "only_second",
        "max_length": 64,
        "pad_to_multiple_of": 8,
        "return_overflowing_tokens": True,
        "stride": 4,
        "return_offsets_mapping": True,
    }
    response = client.post("/encode", json={"texts": texts, "text_pairs": pairs, **options}, headers=BINARY)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == SAFETENSORS_MEDIA_TYPE
    arrays = load_safetensors(response.content)
    expected = reference(texts, pairs, return_tensors="np", **options)
    assert len(expected["overflow_to_sample_mapping"]) > len(texts)  # the case overflows, as it says
    assert set(arrays) == set(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(arrays[key], value.astype(np.int64), err_msg=key, strict=True)
    assert arrays["offset_mapping"].shape == (len(expected["input_ids"]), 64, 2)


def test_ragged_binary_is_406_saying_to_pad(client):
    response = client.post("/encode", json={"texts": ["a", "a b c d"]}, headers=BINARY)
    assert_error(response, 406, HttpErrorKind.NOT_ACCEPTABLE, "padding")
    # equal lengths are a tensor without padding, as transformers' return_tensors allows
    assert client.post("/encode", json={"texts": ["a", "b"]}, headers=BINARY).status_code == 200


@pytest.mark.parametrize("text", [*TRICKY_TEXTS, "x" * 100000, "中" * 100000], ids=lambda t: repr(t[:12]))
def test_any_text_encodes_exactly_or_is_refused_by_a_limit(client, reference, text):
    for binary in (False, True):
        response = client.post(
            "/encode",
            json={"texts": [text, "pad me"], "padding": True, "return_offsets_mapping": True},
            headers=BINARY if binary else {},
        )
        assert response.status_code == 200, response.text
        expected = reference(
            [text, "pad me"], padding=True, return_offsets_mapping=True, return_tensors="np" if binary else None
        )
        if binary:
            arrays = load_safetensors(response.content)
            assert set(arrays) == set(expected)
            for key in expected:
                np.testing.assert_array_equal(arrays[key], expected[key].astype(np.int64), err_msg=key, strict=True)
        else:
            assert_same(
                response.json(),
                reference_call(reference, [text, "pad me"], None, {"padding": True, "return_offsets_mapping": True}),
            )


@pytest.mark.parametrize(
    "body, field",
    [
        ({"texts": ["a"], "bogus": 1}, "bogus"),
        ({"texts": "not a list"}, "texts"),
        ({"texts": [1, 2]}, "texts.0"),
        ({"texts": ["a"], "padding": "sideways"}, "padding"),
        ({"texts": ["a"], "truncation": "yes"}, "truncation"),
        ({"texts": ["a"], "max_length": -1}, "max_length"),
        ({"texts": ["a"], "pad_to_multiple_of": 0}, "pad_to_multiple_of"),
        ({"texts": ["a"], "padding_side": "middle"}, "padding_side"),
        ({"texts": ["a"], "return_length": "yes"}, "return_length"),
        ({}, "texts"),
    ],
)
def test_bad_fields_are_422_naming_the_field(client, body, field):
    assert_error(client.post("/encode", json=body), 422, ErrorKind.INVALID_REQUEST, field)


def test_malformed_json_and_empty_or_mismatched_texts_are_422(client):
    assert_error(
        client.post("/encode", content=b'{"texts": ["a"', headers={"content-type": "application/json"}),
        422,
        ErrorKind.INVALID_REQUEST,
        "JSON",
    )
    assert_error(client.post("/encode", json={"texts": []}), 422, ErrorKind.INVALID_REQUEST, "at least one")
    assert_error(
        client.post("/encode", json={"texts": ["a", "b"], "text_pairs": ["c"]}),
        422,
        ErrorKind.INVALID_REQUEST,
        "text_pairs",
    )


def test_refusals_of_transformers_are_4xx_with_its_reason(client):
    # transformers: max_length must be a multiple of pad_to_multiple_of when both truncate and pad
    response = client.post(
        "/encode", json={"texts": ["a"], "padding": True, "truncation": True, "max_length": 10, "pad_to_multiple_of": 8}
    )
    assert_error(response, 422, ErrorKind.TOKENIZER, "multiple of pad_to_multiple_of")
    # Rust panics on a stride too large for the room truncation leaves
    response = client.post(
        "/encode",
        json={
            "texts": ["一二三四五六七八九十" * 3],
            "truncation": True,
            "max_length": 6,
            "stride": 5,
            "return_overflowing_tokens": True,
        },
    )
    assert_error(response, 422, ErrorKind.TOKENIZER, "stride", "send a smaller stride or a larger max_length")
    assert "), ;" not in response.json()["error"] and "tokens), " not in response.json()["error"]
    assert client.get("/readyz").status_code == 200  # and the server carries on


@pytest.mark.parametrize(
    "path, body, words",
    [
        ("/encode", {"texts": ["a"], "paddding": True}, "paddding: unknown field; did you mean `padding`?"),
        ("/encode", {"texts": ["a"], "return_offset_mapping": True}, "did you mean `return_offsets_mapping`?"),
        ("/tokenize", {"texts": ["a"], "max_lenght": 3}, "max_lenght: unknown field; did you mean `max_length`?"),
        ("/lengths", {"texts": ["a"], "add_special_token": False}, "did you mean `add_special_tokens`?"),
        ("/decode", {"ids": [[5]], "skip_special_token": True}, "did you mean `skip_special_tokens`?"),
        ("/lengths", {"texts": ["a"], "padding": True}, "padding: not an option of this route"),
        ("/encode", {"texts": ["a"], "zzz": 1}, "zzz: unknown field; the fields are texts, text_pairs,"),
    ],
)
def test_a_misspelt_or_unknown_field_is_422_naming_the_closest_known_one(client, path, body, words):
    assert_error(client.post(path, json=body), 422, ErrorKind.INVALID_REQUEST, words)


def test_a_value_outside_an_options_values_is_422_listing_them_once(client):
    response = client.post("/encode", json={"texts": ["a"], "padding": "sideways", "padding_side": 1})
    assert response.json()["error"] == (
        'padding: must be one of false, true, "longest", "max_length", "do_not_pad", not "sideways"; '
        'padding_side: must be one of "left", "right", null, not 1'
    )


def test_tokenize_pairs_and_truncation_give_one_token_per_encoded_id(client, reference):
    texts, pairs = ["今天天气很好", "hello world, again"], ["The weather is nice.", "短"]
    options = {"add_special_tokens": True, "truncation": "longest_first", "max_length": 9}
    response = client.post(
        "/tokenize", json={"texts": texts, "text_pairs": pairs, **options, "return_sequence_ids": True}
    )
    assert response.status_code == 200, response.text
    expected = reference(texts, pairs, **options)
    assert response.json() == {
        "tokens": [expected.tokens(i) for i in range(2)],
        "sequence_ids": [expected.sequence_ids(i) for i in range(2)],
    }
    encoded = client.post("/encode", json={"texts": texts, "text_pairs": pairs, **options}).json()
    assert [len(row) for row in response.json()["tokens"]] == [len(row) for row in encoded["input_ids"]]
    assert set(client.post("/tokenize", json={"texts": texts}).json()) == {"tokens"}  # sequence_ids when asked
    assert_error(
        client.post("/tokenize", json={"texts": texts, "text_pairs": ["one"]}),
        422,
        ErrorKind.INVALID_REQUEST,
        "text_pairs",
    )
    assert_error(
        client.post("/tokenize", json={"texts": texts, "truncation": "sideways"}),
        422,
        ErrorKind.INVALID_REQUEST,
        "truncation",
    )
    assert_error(
        client.post("/tokenize", json={"texts": texts, "max_lenght": 3}), 422, ErrorKind.INVALID_REQUEST, "max_lenght"
    )


def test_padding_without_a_pad_token_is_refused_like_transformers(tokenizer_dirs):
    bare_json = Path(tokenizer_dirs["bytelevel_bpe"]) / "tokenizer.json"
    with make_client(model=str(bare_json)) as c:
        response = c.post("/encode", json={"texts": ["a", "bb"], "padding": True})
        assert_error(response, 422, ErrorKind.TOKENIZER, "padding token")
        assert c.post("/encode", json={"texts": ["a", "bb"]}).status_code == 200


def test_limits_are_413_naming_the_limit(client):
    assert_error(client.post("/encode", json={"texts": ["a"] * 9}), 413, ErrorKind.TOO_LARGE, "max_texts_per_request")
    assert_error(client.post("/encode", json={"texts": ["a" * 150_001]}), 413, ErrorKind.TOO_LARGE, "max_text_chars")
    assert_error(client.post("/encode", content=b"x" * 2_000_001), 413, ErrorKind.TOO_LARGE, "max_body_bytes")
    response = client.post("/encode", json={"texts": ["a"], "padding": "max_length", "max_length": 1 << 30})
    assert_error(response, 413, ErrorKind.TOO_LARGE, "max_response_tokens")


def test_tokenize_and_decode(client, reference, corpus):
    texts = corpus["zh"][:2] + TRICKY_TEXTS[:4]
    response = client.post("/tokenize", json={"texts": texts})
    assert response.json() == {"tokens": [reference.tokenize(t) for t in texts]}
    ids = reference(texts)["input_ids"]
    response = client.post("/decode", json={"ids": ids, "skip_special_tokens": True})
    assert response.json() == {"texts": reference.batch_decode(ids, skip_special_tokens=True)}
    assert response.headers[FINGERPRINT_HEADER].startswith("sha256:")
    # ids the vocabulary lacks decode as in-process; only what no tokenizer can take is refused
    beyond = [[10**6, 5, 2**31]]
    assert client.post("/decode", json={"ids": beyond}).json() == {"texts": reference.batch_decode(beyond)}
    assert_error(client.post("/decode", json={"ids": [[-1]]}), 422, ErrorKind.INVALID_REQUEST, "ids.0.0")
    assert_error(client.post("/decode", json={"ids": [[2**32]]}), 422, ErrorKind.INVALID_REQUEST, "ids.0.0")


def test_info_reports_tokenizer_limits_parallelism_and_versions(client, reference):
    info = client.get("/info").json()
    assert info["source"] == "embedded:default"
    assert info["vocab_size"] == len(reference)
    assert info["model_max_length"] == 512 and info["padding_side"] == "right"
    assert info["model_input_names"] == ["input_ids", "token_type_ids", "attention_mask"]
    assert info["special_tokens"]["pad_token"] == "[PAD]"
    assert info["limits"]["max_texts_per_request"] == 8
    assert info["max_body_bytes"] == 2_000_000
    assert set(info["parallelism"]) == {"tokenizers_parallelism", "rust_threads", "forks_after_load"}
    assert set(info["versions"]) == {"service", "tokenizers", "transformers"}
    assert info["batching"]["enabled"] is True


def test_fingerprint_is_stable_and_tracks_what_changes_output(client, tokenizer_dirs):
    served = client.post("/encode", json={"texts": ["a"]}).headers[FINGERPRINT_HEADER]
    assert served == client.get("/info").json()["fingerprint"]
    assert served == fingerprint(load_tokenizer(None).tokenizer)  # a fresh load: same fingerprint
    other = load_tokenizer(str(tokenizer_dirs["bytelevel_bpe"])).fingerprint
    assert other != served
    changed = load_tokenizer(None).tokenizer
    changed.padding_side = "left"
    assert fingerprint(changed) != served


def test_metrics_count_requests_texts_and_batches(client):
    client.post("/encode", json={"texts": ["计数", "count"]})
    text = client.get("/metrics").text
    assert 'tokenizer_requests_total{route="/encode",status="200"}' in text
    assert "tokenizer_texts_encoded_total" in text and "tokenizer_tokens_encoded_total" in text
    assert "tokenizer_batch_texts_bucket" in text and "tokenizer_queue_requests" in text
    assert "tokenizer_request_seconds_bucket" in text


def test_every_error_has_one_shape(client):
    assert_error(client.get("/nope"), 404, HttpErrorKind.NOT_FOUND, "/nope")
    assert_error(client.get("/encode"), 405, HttpErrorKind.METHOD_NOT_ALLOWED, "GET")
    assert set(STATUS_BY_KIND) == set(ErrorKind) | set(HttpErrorKind)  # one table for every kind
    assert not {kind.value for kind in ErrorKind} & {kind.value for kind in HttpErrorKind}


def test_api_key_guards_every_route_but_probes_and_metrics():
    with make_client(api_key="s3cret") as c:
        for path in ("/healthz", "/readyz", "/metrics"):
            assert c.get(path).status_code == 200
        assert_error(c.post("/encode", json={"texts": ["a"]}), 401, HttpErrorKind.UNAUTHORIZED, "Bearer")
        assert_error(c.get("/info", headers={"Authorization": "Bearer wrong"}), 401, HttpErrorKind.UNAUTHORIZED)
        assert c.get("/docs").status_code == 200  # open: the calls it makes need the key
        ok = c.post("/encode", json={"texts": ["a"]}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


def test_openapi_documents_the_request_bodies(client):
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/encode"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "texts" in body["properties"] and "padding" in body["properties"]
    assert client.get("/docs").status_code == 200


def test_not_ready_before_lifespan_and_ready_during():
    app = create_app(Settings())
    client = TestClient(app)  # outside `with`: requests are answered, the lifespan has not started
    before = client.get("/readyz")
    assert before.status_code == 503 and "not loaded" in before.json()["error"], before.text
    assert_error(client.post("/encode", json={"texts": ["a"]}), 503, ErrorKind.UNAVAILABLE, "not loaded")
    with client:
        assert client.get("/readyz").json() == {"status": "ready"}
    after = client.get("/readyz")  # the lifespan has ended: the engine is stopped
    assert after.status_code == 503 and "stopped" in after.json()["error"], after.text


def test_settings_reject_inconsistent_values():
    with pytest.raises(ValueError, match="revision"):
        Settings(revision="main")
    with pytest.raises(ValueError):
        Settings(max_texts_per_request=0)


def test_kubernetes_service_link_in_the_port_variable_is_ignored(monkeypatch):
    monkeypatch.setenv("TOKENIZER_SERVICE_PORT", "tcp://10.96.0.12:8000")
    assert Settings().port == 8000
    monkeypatch.setenv("TOKENIZER_SERVICE_PORT", "9001")
    assert Settings().port == 9001


def test_a_baked_tokenizer_reports_its_hub_origin(tmp_path):
    """deploy/bake_tokenizer.py writes source.json next to the files it bakes into an image."""
    import json
    import shutil

    from service.engine.loading import DEFAULT_TOKENIZER_DIR

    baked = tmp_path / "tokenizer"
    shutil.copytree(DEFAULT_TOKENIZER_DIR, baked)
    (baked / "source.json").write_text(json.dumps({"model": "org/name", "revision": "main", "commit": "0" * 40}))
    with make_client(model=str(baked)) as c:
        info = c.get("/info").json()
    assert info["source"] == "org/name" and info["revision"] == "0" * 40


def test_a_lone_surrogate_is_refused_as_the_tokenizer_refuses_it(client, reference):
    body = b'{"texts": ["ok", "\\ud800"]}'  # valid JSON for Python, not for pydantic-core
    response = client.post("/encode", content=body, headers={"content-type": "application/json"})
    assert isinstance(reference_call(reference, ["ok", "\ud800"], None, {}), BaseException)
    assert_error(response, 422, ErrorKind.TOKENIZER)


def test_a_client_that_leaves_mid_body_gets_499_and_no_error_log(client, caplog):
    """Straight through ASGI: the body stops half-way and the client disconnects."""
    messages = iter(
        [
            {"type": "http.request", "body": b'{"texts": ["a', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )
    sent: list = []

    async def receive():
        return next(messages)

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/encode",
        "raw_path": b"/encode",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5),
        "root_path": "",
    }
    with caplog.at_level("ERROR"):
        client.portal.call(client.app, scope, receive, send)
    assert sent[0]["status"] == 499
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


# -- what the headers say (defects found by a fuzzer and by hand) ------------------------------------------


@pytest.mark.parametrize(
    "accept, binary",
    [
        (SAFETENSORS_MEDIA_TYPE, True),
        ("APPLICATION/VND.SAFETENSORS", True),  # media types are case-insensitive
        (f"{SAFETENSORS_MEDIA_TYPE};q=0", False),  # q=0: not acceptable
        (f"{SAFETENSORS_MEDIA_TYPE};q=0.5, application/json", False),  # JSON preferred
        (f"application/json;q=0.2, {SAFETENSORS_MEDIA_TYPE}", True),
        ("application/*;q=0.1, application/json;q=0", True),
        ("text/html, */*;q=0.8", False),
        ("application/json", False),
    ],
)
def test_accept_is_read_as_rfc_9110_says(client, accept, binary):
    response = client.post("/encode", json={"texts": ["a b"]}, headers={"Accept": accept})
    assert response.status_code == 200, response.text
    expected = SAFETENSORS_MEDIA_TYPE if binary else "application/json"
    assert response.headers["content-type"] == expected


@pytest.mark.parametrize(
    "headers, accepted",
    [
        ({}, True),  # no Content-Type: taken as JSON
        ({"Content-Type": "application/json"}, True),
        ({"Content-Type": "Application/JSON; charset=UTF-8"}, True),
        ({"Content-Type": "application/problem+json"}, True),
        ({"Content-Type": "text/plain"}, False),
        ({"Content-Type": "application/x-www-form-urlencoded"}, False),
        ({"Content-Type": "multipart/form-data; boundary=x"}, False),
        ({"Content-Type": "application/json; charset=utf-16"}, False),
        ({"Content-Encoding": "gzip"}, False),
    ],
)
def test_only_uncompressed_utf8_json_bodies_are_parsed(client, headers, accepted):
    """Defect: text/plain, form and multipart bodies were parsed as JSON, UTF-16 accepted, gzip a 422."""
    for path, body in (
        ("/encode", b'{"texts": ["a"]}'),
        ("/tokenize", b'{"texts": ["a"]}'),
        ("/decode", b'{"ids": [[5]]}'),
    ):
        response = client.post(path, content=body, headers=headers)
        if accepted:
            assert response.status_code == 200, response.text
        else:
            assert_error(response, 415, HttpErrorKind.UNSUPPORTED_MEDIA_TYPE)


def test_head_answers_on_every_get_route(client):
    """Defect: HEAD was 405 on GET routes."""
    for path in ("/healthz", "/readyz", "/info", "/metrics"):
        response = client.head(path)
        assert response.status_code == 200, path
        assert response.content == b""


def test_the_auth_scheme_is_case_insensitive_and_the_key_is_not():
    """Defect: 'bearer KEY' was 401 (RFC 9110 11.1: schemes are case-insensitive)."""
    with make_client(api_key="s3cret") as c:
        for header in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret", "Bearer  s3cret"):
            assert c.get("/info", headers={"Authorization": header}).status_code == 200, header
        for header in ("Bearer S3CRET", "Basic s3cret", "Bearers3cret", "s3cret", "Bearer"):
            assert_error(c.get("/info", headers={"Authorization": header}), 401, HttpErrorKind.UNAUTHORIZED)


@pytest.mark.parametrize("path", ["/encode", "/tokenize", "/decode"])
def test_deeply_nested_json_is_a_422_not_a_500(client, path, caplog):
    """Defect: '[' x 1000 was a 500 with the body's head and tail in the logged traceback."""
    for body in (b"[" * 1000 + b"\n", b'{"texts": ' + b"[" * 100_000 + b'"SECRET"'):
        response = client.post(path, content=body, headers={"Content-Type": "application/json"})
        assert_error(response, 422, ErrorKind.INVALID_REQUEST)
    assert "SECRET" not in caplog.text and "[[[[" not in caplog.text


def test_an_unexpected_error_is_500_and_logged_without_the_request(client, caplog, monkeypatch):
    """The last line: whatever breaks, the answer is the one error shape and the log holds no content."""
    from service.http import routes

    def broken(body, model):
        raise ValueError(f"an exception message quoting the request: {bytes(body)!r}")

    monkeypatch.setattr(routes, "parse_body", broken)
    for path in ("/encode", "/tokenize"):
        response = client.post(path, json={"texts": ["SECRET request text"]})
        assert_error(response, 500, ErrorKind.INTERNAL, "ValueError")
    assert "internal error (ValueError)" in caplog.text
    assert "SECRET" not in caplog.text


def test_openapi_documents_every_error_an_operation_can_answer(client):
    """Defect: the schema listed no error responses, so a schema-driven client saw every 4xx as undocumented."""
    schema = client.get("/openapi.json").json()
    error = schema["components"]["schemas"]["ErrorBody"]
    assert set(error["required"]) == {"error", "error_type"}
    for path in ("/encode", "/tokenize", "/decode"):
        responses = schema["paths"][path]["post"]["responses"]
        assert {"200", "400", "401", "408", "413", "415", "422", "429", "431", "503", "504"} <= set(responses)
        assert "Retry-After" in responses["429"]["headers"] and "Retry-After" in responses["503"]["headers"]
        assert responses["413"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    assert "406" in schema["paths"]["/encode"]["post"]["responses"]
    assert "head" not in schema["paths"]["/info"]


# -- the fast path of bodies of texts: the model's own validation is the oracle -------------------------------
_TEXTS_MODELS = (EncodeRequest, LengthsRequest, TokenizeRequest)
_SCALARS = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(min_value=-3, max_value=2**33),
    st.sampled_from([2**64, 3.0, 1e2, -0.0, "", "longest", "max_length", "do_not_pad", "left", "right", "only_first"]),
    st.sampled_from(list(PADDING_VALUES) + list(TRUNCATION_VALUES)),
    st.text(max_size=5),
)
_VALUES = st.one_of(
    _SCALARS, st.lists(_SCALARS, max_size=2), st.dictionaries(st.text(max_size=3), _SCALARS, max_size=1)
)
_NAMES = st.sampled_from([f.name for f in fields(EncodeOptions)] + ["text_pair", "max_lenght", "bogus", ""])
_STRINGS = st.lists(st.text(max_size=8), max_size=3)
_BODIES = st.fixed_dictionaries(
    {},
    optional={
        "texts": st.one_of(_STRINGS, _STRINGS.map(lambda t: [*t, 1]), st.text(max_size=3), st.none()),
        "text_pairs": st.one_of(_STRINGS, st.none(), st.just([None])),
    },
).flatmap(lambda inputs: st.dictionaries(_NAMES, _VALUES, max_size=4).map(lambda options: {**inputs, **options}))
_RAW = st.sampled_from(
    [
        b"",
        b"[]",
        b'"texts"',
        b'{"texts": ["a"], "texts": ["b", 1]}',
        b'{"texts": ["a", 1], "texts": ["b"]}',
        b'{"texts": ["\\ud800"]}',
        b'{"texts": ["a"], "padding": true, "padding": "sideways"}',
        b'\xef\xbb\xbf{"texts": ["a"]}',
        b'{"texts": ["\xff"]}',
        b'{"texts": ["a"], "max_length": NaN}',
        b'{"texts": ["a"], "max_length": 1' + b"0" * 30 + b"}",
        b'{"texts": ["a"]} x',
    ]
)


def _outcome(parse, body: bytes, model):
    try:
        parsed = parse(body, model)
    except ServiceError as exc:
        return ("refused", exc.kind, exc.message)
    return ("parsed", parsed.model_dump(), parsed.options())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=st.one_of(
        _BODIES.flatmap(
            lambda b: st.sampled_from([json.dumps(b).encode(), json.dumps(b, ensure_ascii=False).encode()])
        ),
        _RAW,
    ),
    model=st.sampled_from(_TEXTS_MODELS),
)
def test_the_fast_path_parses_and_refuses_every_body_as_the_model_does(body, model):
    """Defect this guards against: a body of texts read by orjson with a hand check of its fields accepting what
    the model refuses (an int among the texts, a misspelt option, a bool for an int), reading a value otherwise
    (True for 1), or refusing with another message than the model's own validation. Bodies are read twice,
    so the remembered option sets are exercised too."""
    expected = _outcome(validate_body, body, model)
    assert _outcome(parse_body, body, model) == expected
    assert _outcome(parse_body, body, model) == expected


def test_the_fast_path_is_taken_and_remembers_each_option_set_once():
    """The fast path is the one a plain body takes (else the property test above proves nothing), and it
    validates a set of option values once, not per body."""
    model = EncodeRequest
    model.validated_options.clear()
    body = {"texts": ["a", "b"], "padding": "longest", "truncation": True, "max_length": 8}
    for texts in (["a", "b"], ["c"]):
        parsed = parse_body(json.dumps({**body, "texts": texts}).encode(), model)
        assert parsed.texts == texts and parsed.options().max_length == 8
    assert len(model.validated_options) == 1
    parse_body(json.dumps({**body, "max_length": 9}).encode(), model)
    assert len(model.validated_options) == 2
    # equal as Python values, not as JSON: a remembered `1` must not let `true` through, nor `true` a `1`
    for accepted, refused in (({"stride": 1}, {"stride": True}), ({"return_length": True}, {"return_length": 1})):
        parse_body(json.dumps({"texts": ["a"], **accepted}).encode(), model)
        with pytest.raises(ServiceError, match=next(iter(refused))):
            parse_body(json.dumps({"texts": ["a"], **refused}).encode(), model)


@pytest.mark.parametrize(
    "arrays",
    [
        {"input_ids": np.arange(12, dtype=np.int64).reshape(3, 4), "attention_mask": np.ones((3, 4), dtype=np.int64)},
        {"offset_mapping": np.arange(24, dtype=np.int64).reshape(3, 4, 2)[:, ::2], "length": np.array([4, 4, 4])},
        {"input_ids": np.zeros((2, 0), dtype=np.int64), "row_lengths": np.zeros(0, dtype=np.int64)},
        {"assistant_masks": np.array([[True, False]]), "x": np.array(7, dtype=np.int32)},
    ],
    ids=["rows", "views", "empty", "other dtypes"],
)
def test_safetensors_blobs_read_back_as_safetensors_own(arrays):
    """The answer's blob, written in one copy, is read by safetensors itself (and by the client's own reader)
    as the arrays and metadata ``safetensors.numpy.save`` would carry, every array 8-byte aligned."""
    from safetensors import safe_open

    from service.client.results import arrays_from_safetensors
    from service.http.responses import safetensors_parts

    metadata = {"fingerprint": "sha256:" + "ab" * 32}
    blob = b"".join(safetensors_parts(arrays, metadata))
    read = load_safetensors(blob)
    assert set(read) == set(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(read[name], array, strict=True)
    assert (8 + int.from_bytes(blob[:8], "little")) % 8 == 0
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as file:
        file.write(blob)
        file.flush()
        with safe_open(file.name, framework="np") as opened:
            assert opened.metadata() == metadata
    ours = arrays_from_safetensors(blob, "test")
    for name, array in arrays.items():
        np.testing.assert_array_equal(ours[name], array, strict=True)
