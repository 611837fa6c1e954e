"""Tier 3: a real uvicorn server process on 127.0.0.1. Parity over HTTP, never forking, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from safetensors.numpy import load as load_safetensors

from service.wire import (
    FINGERPRINT_HEADER,
    PER_ROW_KEYS,
    RAGGED_MEDIA_TYPE,
    RAGGED_ROW_LENGTHS,
    SAFETENSORS_MEDIA_TYPE,
)
from testkit.families import FAMILIES
from testkit.parity import assert_same, draw_calls, reaches_every_region, reference_call, regions_reached
from testkit.servers import REPO, ServerProcess

# One keep-alive client for the module: a fresh httpx.Client per request costs more than the request.
HTTP = httpx.Client(timeout=60)


def post_encode(url: str, texts, pairs, options, binary: bool = False, accept: str | None = None) -> httpx.Response:
    headers = {"Accept": accept or SAFETENSORS_MEDIA_TYPE} if binary or accept else {}
    body = {"texts": texts, **({"text_pairs": pairs} if pairs is not None else {}), **options}
    return HTTP.post(url + "/encode", json=body, headers=headers)


def check_http_parity(url, reference, texts, pairs, options):
    """JSON and safetensors answers equal transformers' (same keys, order, shapes, values) or both refuse;
    returns transformers' answer."""
    theirs = reference_call(reference, texts, pairs, options)
    response = post_encode(url, texts, pairs, options)
    if isinstance(theirs, BaseException):
        assert 400 <= response.status_code < 500, (theirs, response.text)
        assert response.json()["error_type"] in ("tokenizer", "invalid_request")
        return theirs
    assert response.status_code == 200, (options, response.text)
    assert_same(response.json(), theirs, (texts, pairs, options))
    check_ragged_answer(post_encode(url, texts, pairs, options, accept=RAGGED_MEDIA_TYPE), theirs)
    binary = post_encode(url, texts, pairs, options, binary=True)
    lengths = {len(row) for row in theirs["input_ids"]}
    if len(lengths) > 1:
        assert binary.status_code == 406, binary.text
        return theirs
    assert binary.status_code == 200, binary.text
    arrays = load_safetensors(binary.content)
    assert set(arrays) == set(theirs)
    for key, value in theirs.items():  # strict: the same shape and dtype, not just the same values
        np.testing.assert_array_equal(arrays[key], np.asarray(value, dtype=np.int64), err_msg=key, strict=True)
    return theirs


def check_ragged_answer(response: httpx.Response, theirs: dict) -> None:
    """The ragged binary layout, read with the safetensors library (not the client): every key's rows are
    the flat array cut at row_lengths, equal to the in-process lists, ragged or not."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == RAGGED_MEDIA_TYPE
    arrays = load_safetensors(response.content)
    lengths = arrays.pop(RAGGED_ROW_LENGTHS).tolist()
    assert set(arrays) == set(theirs)
    assert lengths == [len(row) for row in theirs["input_ids"]]
    cuts = np.cumsum(lengths)[:-1]
    for key, value in theirs.items():
        assert arrays[key].dtype == np.int64, key
        if key in PER_ROW_KEYS:
            assert arrays[key].tolist() == value, key
        else:
            rows = [row.tolist() for row in np.split(arrays[key], cuts)]
            assert rows == value, key


@pytest.mark.parametrize("family", FAMILIES)
@reaches_every_region
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=(Phase.explicit, Phase.reuse, Phase.generate),  # no shrinking over HTTP: minutes per failure
)
@given(data=st.data())
def test_property_parity_over_http_json_and_binary(servers, reference_tokenizers, family, region_tally, data):
    """Each example: one call aimed at every option region (parity.REGIONS) and one with any options.
    A failure names its call (texts, pairs, options); the engine tier shrinks the same calls quickly."""
    reference = reference_tokenizers[family]
    region_tally.example()
    for call in draw_calls(data, reference):
        theirs = check_http_parity(servers[family].url, reference, call.texts, call.pairs, call.options)
        region_tally.record(regions_reached(reference, call, theirs))


@pytest.mark.parametrize("family", FAMILIES)
def test_real_corpus_parity_over_http(servers, reference_tokenizers, corpus, family):
    texts = corpus["zh"][:128] + corpus["en"][:128]
    for options in (
        {},  # ragged: JSON and the ragged binary answer
        {"truncation": True, "max_length": 64, "return_offsets_mapping": True, "add_special_tokens": False},
        {"padding": "longest", "truncation": True, "max_length": 128},
        {
            "padding": "max_length",
            "truncation": True,
            "max_length": 64,
            "padding_side": "left",
            "return_special_tokens_mask": True,
            "return_length": True,
        },
    ):
        check_http_parity(servers[family].url, reference_tokenizers[family], texts, None, options)


def test_concurrent_mixed_requests_match_in_process(servers, reference_tokenizers, corpus):
    """Concurrent requests with mixed options are micro-batched; each answer is still exactly its own."""
    url, reference = servers["wordpiece_default"].url, reference_tokenizers["wordpiece_default"]
    option_sets = [
        {},
        {"add_special_tokens": False},  # the same Rust call but for special tokens: must never share one
        {"padding": True},
        {"padding": True, "add_special_tokens": False},
        {"padding": "max_length", "max_length": 40, "truncation": True},
        {"truncation": True, "max_length": 12, "stride": 3, "return_overflowing_tokens": True, "padding": True},
        {"padding": True, "pad_to_multiple_of": 8, "padding_side": "left", "return_offsets_mapping": True},
    ]
    jobs = [(corpus["zh"][i : i + 1 + i % 5], option_sets[i % len(option_sets)]) for i in range(120)]
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=32)) as http:

        def run(job):
            texts, options = job
            return http.post(url + "/encode", json={"texts": texts, **options})

        with ThreadPoolExecutor(32) as pool:
            responses = list(pool.map(run, jobs))
    for (texts, options), response in zip(jobs, responses, strict=True):
        assert response.status_code == 200, response.text
        assert_same(response.json(), reference_call(reference, texts, None, options), options)
    metrics = httpx.get(url + "/metrics").text
    batched = [line for line in metrics.splitlines() if line.startswith("tokenizer_batch_requests_sum")]
    count = [line for line in metrics.splitlines() if line.startswith("tokenizer_batch_requests_count")]
    assert float(batched[0].split()[-1]) > float(count[0].split()[-1]), "no batch ever held two requests"


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_server_never_forks_and_runs_rust_parallelism(servers, corpus):
    server = servers["wordpiece_default"]
    texts = corpus["en"][:512]
    for _ in range(3):
        assert post_encode(server.url, texts, None, {"padding": True, "truncation": True}).status_code == 200
    info = httpx.get(server.url + "/info").json()
    assert info["parallelism"]["tokenizers_parallelism"] is True
    assert info["parallelism"]["forks_after_load"] == 0
    threads = info["parallelism"]["rust_threads"]
    assert threads == len(os.sched_getaffinity(0))
    # the rayon pool exists: the process runs more threads than the event loop + the engine thread
    assert int(_proc_status(server.pid)["Threads"]) >= threads + 2
    # one process: no children, ever
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split()
    assert children == []
    assert "tokenizer_forks_after_load 0.0" in httpx.get(server.url + "/metrics").text


@pytest.mark.slow
def test_fingerprint_header_is_the_same_across_restarts(servers, tokenizer_dirs):
    """Another process loading the same tokenizer (the shared server, with other limits) says the same."""
    shared = post_encode(servers["sentencepiece"].url, ["a"], None, {}).headers[FINGERPRINT_HEADER]
    with ServerProcess("--model", str(tokenizer_dirs["sentencepiece"])) as server:
        assert post_encode(server.url, ["a"], None, {}).headers[FINGERPRINT_HEADER] == shared


def run_cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    if args[:1] == ("serve",) and "--port" not in args:  # serve binds its port first: never the shared 8000
        args = (*args, "--port", "0")
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--workers", "--reload"])
def test_multi_process_flags_are_refused_with_a_reason(flag):
    result = run_cli("serve", flag, "2")
    assert result.returncode == 2
    assert "one process" in result.stderr or "forks" in result.stderr, result.stderr


@pytest.mark.slow
def test_unreachable_hub_id_fails_in_one_readable_line():
    result = run_cli("serve", "--model", "some-org/some-model", "--revision", "main", env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    # the log's line first (what serve is loading, said at once), then the error: one line
    assert len(lines) == 2 and " INFO " in lines[0] and "loading hub id some-org/some-model" in lines[0], lines
    assert "some-org/some-model" in lines[1] and "Traceback" not in result.stderr


@pytest.mark.slow
def test_invalid_settings_are_named(tmp_path):
    result = run_cli("serve", "--max-texts-per-request", "0")
    assert result.returncode == 2 and "max_texts_per_request" in result.stderr
    result = run_cli("serve", "--model", str(tmp_path / "missing.json"), env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1 and "missing.json" in result.stderr


@pytest.mark.slow
def test_settings_come_from_env_and_flags_win():
    env = {
        "TOKENIZER_SERVICE_MAX_TEXTS_PER_REQUEST": "7",
        "TOKENIZER_SERVICE_THREADS": "1",
        "TOKENIZER_SERVICE_MAX_TEXT_CHARS": "99",
    }
    with ServerProcess("--max-text-chars", "123", env=env) as server:
        info = httpx.get(server.url + "/info").json()
    assert info["limits"]["max_texts_per_request"] == 7
    assert info["limits"]["max_text_chars"] == 123
    assert info["parallelism"]["rust_threads"] == 1


@pytest.mark.slow
def test_python_dash_m_and_console_script_agree():
    module = run_cli("--version")
    script = subprocess.run(
        [str(Path(sys.executable).parent / "tokenizer-service"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert module.returncode == script.returncode == 0
    assert module.stdout == script.stdout and "tokenizer-service" in module.stdout


@pytest.mark.slow
def test_slow_only_tokenizer_without_converter_is_refused_clearly(tmp_path, tokenizer_dirs):
    """transformers 5 converts every tokenizer it has a converter for on load (the SentencePiece family
    above arrives fast); one it cannot convert is refused at start with a line saying what to provide."""
    import shutil

    shutil.copy(tokenizer_dirs["sentencepiece"] / "tokenizer.model", tmp_path / "tokenizer.model")
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "BertGenerationTokenizer"}')
    result = run_cli("serve", "--model", str(tmp_path))
    assert result.returncode == 1
    assert "no fast (Rust) version" in result.stderr and "tokenizer.json" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_setting_with_choices_is_a_flag_with_choices():
    result = run_cli("serve", "--http-protocol", "spdy")
    assert result.returncode == 2 and "guarded" in result.stderr and "h11" in result.stderr
