"""The memory budget: bounds that never undershoot, slices that change nothing, refusals before any work,
and a real server whose peak RSS (VmHWM from /proc) stays within its budget whatever it is sent."""

from __future__ import annotations

import json
import os
import pickle
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_engine import FIXED_CASES

from service.engine import EncodeOptions, EngineLimits
from service.engine import bounds as bounds_module
from service.engine.bounds import utf8_bounds, utf8_lengths
from service.engine.encoding import plan_encode
from service.engine.errors import ErrorKind, ServiceError
from service.engine.loading import load_tokenizer
from service.engine.memory import MIB, cgroup_memory_limit, default_memory_budget
from testkit.engine import EngineRunner, encode_bound, memory_limit_for_budget, to_lists, tokenizer_facts
from testkit.families import FAMILIES
from testkit.gates import HOLD, Gate, wait_until
from testkit.parity import assert_same, encode_calls, reference_call
from testkit.servers import ServerProcess

pytestmark = pytest.mark.slow  # budgets filled, peak RSS read: servers and engines of their own

# -- the bounds -----------------------------------------------------------------------------------------
WIDTHS = ["hello", "今天天气很好", "naïve café", "“quoted” — English", "😀😀", "an emoji 😀 in English", "ÿþ", ""]


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.text(), min_size=1, max_size=4))
@example(texts=WIDTHS)
@example(texts=["a lone surrogate \ud800 here", "\udfff"])
def test_the_bytes_bound_holds_every_texts_utf8_bytes(texts):
    """The bound of a text's UTF-8 bytes, read from its length and storage without encoding it, is never below
    them (lone surrogates count 3, as the exact count does), and is exact for ASCII and one-script text."""
    exact = utf8_lengths(texts)
    for _ in range(2):  # as parsed, then holding the UTF-8 copy CPython keeps once a C extension asked for it
        bounds = utf8_bounds(texts)
        assert all(b >= e for b, e in zip(bounds, exact, strict=True)), (texts, bounds, exact)
        pickle.dumps(texts)  # (pickle asks for it)


def test_the_bytes_bound_is_exact_for_one_script_and_counts_exactly_without_cpythons_layout(monkeypatch):
    texts = [text.encode().decode() for text in WIDTHS]  # as parsed: no UTF-8 copy held (another test pickles them)
    bounds, exact = utf8_bounds(texts), utf8_lengths(texts)
    assert [b == e for b, e in zip(bounds, exact, strict=True)] == [True, True, False, False, True, False, True, True]
    monkeypatch.setattr(bounds_module, "_WIDE_STR_HEADER", None)
    assert utf8_bounds(texts) == exact


def test_a_costly_requests_bound_is_counted_from_its_exact_bytes(sliced, reference_tokenizers, corpus):
    """The loose bytes bound sizes a request's reservation and may cut it into finer slices (the result is the
    same); a request it makes costly (over a quarter of the budget) is bounded from its exact bytes, so whether
    it fits at all never depends on the looser bound."""
    runner, _ = sliced
    engine = runner.engine
    quoted = [f"“{text[:150]}”" for text in corpus["en"]][:1400]  # curly quotes: stored 2 bytes wide, UTF-8 ~1
    truncated = EncodeOptions(truncation=True, max_length=16)
    plan = plan_encode(tokenizer_facts(engine), truncated)
    loose = engine._bounds._encode(quoted, None, plan, True, utf8_bounds)
    exact = engine._bounds._encode(quoted, None, plan, True, utf8_lengths)
    assert loose.cost <= BUDGET // 4 and len(loose.slices) > len(exact.slices) >= 2
    assert encode_bound(engine, quoted, None, truncated) == loose
    result = runner.result(engine.submit_encode, quoted, None, truncated)
    expected = reference_call(
        reference_tokenizers["wordpiece_default"], quoted, None, {"truncation": True, "max_length": 16}
    )
    assert_same(to_lists(result), expected, "finer slices")
    padded = EncodeOptions(padding=True)
    plan = plan_encode(tokenizer_facts(engine), padded)
    assert engine._bounds._encode(quoted, None, plan, True, utf8_bounds).cost > BUDGET // 4
    assert encode_bound(engine, quoted, None, padded) == engine._bounds._encode(quoted, None, plan, True, utf8_lengths)


def test_a_refused_render_gives_its_renderings_back_at_once():
    """A render the budget refuses raises from the render thread: what it rendered is freed when it raises, not
    kept by the error's traceback (its frames hold every rendering) until the garbage collector breaks the cycle.
    The peak-RSS test below sees this only when the collector runs late; this one sees it every time."""
    import asyncio
    import gc
    import weakref

    from service.engine.chat import ChatRenderer

    class Rendering:  # what a render holds in its frame when it is refused
        pass

    made: list[weakref.ref[Rendering]] = []

    def refused_render() -> None:
        rendering = Rendering()
        made.append(weakref.ref(rendering))
        raise ServiceError(ErrorKind.TOO_LARGE, "rendering these conversations would take more than the budget")

    async def run() -> ServiceError:
        renderer = ChatRenderer()
        await renderer.astart()
        try:
            with pytest.raises(ServiceError) as refused:
                await renderer._run(refused_render)
            return refused.value
        finally:
            await renderer.astop()

    gc.disable()  # only reference counting frees it, as on a request path between collections
    try:
        error = asyncio.run(run())
        assert error.kind is ErrorKind.TOO_LARGE
        assert made and made[0]() is None, "the refused render's rendering is still held by its error's traceback"
    finally:
        gc.enable()


@pytest.mark.parametrize("family", FAMILIES)
@settings(
    max_examples=int(os.environ.get("BOUND_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(call=encode_calls())
# max_length=0 truncates nothing; a whitespace text can be more tokens than bytes + specials (Metaspace's ▁)
@example(call=(["\t", " \t\n"], None, {"truncation": True, "max_length": 0}))
# overflow rows: one long text cut into many windows (the bound must count every row, not one per text)
@example(call=(["今天天气很好" * 12], None, {"max_length": 8, "stride": 2, "return_overflowing_tokens": True}))
# a max_length below the special tokens truncates nothing (tokenizers subtracts them, and the subtraction wraps)
@example(call=(["000000"], None, {"max_length": 1}))
def test_the_bound_is_never_below_the_result(engines, family, call):
    """Admission reserves from a bound computed before encoding: it must hold for any text and options."""
    texts, pairs, options = call
    engine = engines[family].engine
    try:
        bound = encode_bound(engine, texts, pairs, EncodeOptions(**options))
        result = engines[family].result(engine.submit_encode, texts, pairs, EncodeOptions(**options))
    except ServiceError:
        return  # refused options: nothing is reserved for them
    rows = result.data["input_ids"]
    positions = sum(len(row) for row in rows) if not result.rectangular else rows.size
    assert positions <= bound.positions, json.dumps([texts, pairs, options])
    assert len(rows) <= bound.rows


@pytest.mark.parametrize("family", FAMILIES)
def test_a_max_length_that_leaves_the_text_no_room_is_bounded_as_tokenizers_reads_it(engines, family):
    """max_length at the special tokens, with overflow: tokenizers cuts each sequence to nothing and keeps it
    whole as an overflow row (a single: 2 rows, a pair: 4); below them it cuts nothing (1 row). The bound counts
    those rows and holds the result -- it once counted a window per byte, and refused with 413 a long pair that
    transformers answers."""
    runner = engines[family]
    engine = runner.engine
    specials = engine._bounds.specials
    texts, pairs = ["hello world " * 200, "短"], ["a long second text " * 300, "b"]
    for inputs, max_length, rows_each in (
        ((texts, None), specials[0], 2),
        ((texts, pairs), specials[1], 4),
        ((texts, pairs), specials[1] - 1, 1),
    ):
        if max_length <= 0:
            continue
        options = EncodeOptions(truncation=True, max_length=max_length, return_overflowing_tokens=True, padding=True)
        bound = encode_bound(engine, *inputs, options)
        result = runner.result(engine.submit_encode, *inputs, options)
        rows = result.data["input_ids"]
        assert bound.rows == rows_each * len(texts) and len(rows) <= bound.rows
        assert sum(map(len, rows)) <= bound.positions


def test_the_default_budget_follows_the_cgroup_limit(tmp_path):
    (tmp_path / "memory.max").write_text("2147483648\n")
    assert cgroup_memory_limit(tmp_path) == 2 * 1024 * MIB
    (tmp_path / "memory.max").write_text("max\n")
    assert cgroup_memory_limit(tmp_path) is None
    assert default_memory_budget(2 * 1024 * MIB) == int((2048 - 256) * MIB * 0.75)
    for budget in (256 * MIB, 1344 * MIB, 3 * 1024 * MIB):
        assert default_memory_budget(memory_limit_for_budget(budget)) >= budget - 1


# -- slices and refusals in the engine ------------------------------------------------------------------
BUDGET = 256 * MIB


@pytest.fixture(scope="module")
def sliced(tokenizer_dirs):
    """An engine with a 256 MiB budget: Rust encodings of ~116k token bounds per slice."""
    gate = Gate()
    limits = EngineLimits(max_text_chars=1_000_000, memory_budget=BUDGET)
    runner = EngineRunner(gate.gated(load_tokenizer(None)), limits=limits)
    yield runner, gate
    gate.open()
    runner.close()


def short_texts(corpus) -> list[str]:
    """1,400 texts of under 200 characters: many slices, and padding to the longest stays in the budget."""
    return [text for text in corpus["zh"] + corpus["en"] if len(text) < 200][:1400]


@pytest.mark.parametrize("options", FIXED_CASES, ids=lambda o: ",".join(o) or "defaults")
def test_a_large_request_is_encoded_in_slices_exactly_as_at_once(sliced, reference_tokenizers, corpus, options):
    runner, gate = sliced
    texts = short_texts(corpus)
    bound = encode_bound(runner.engine, texts, None, EncodeOptions(**options))
    assert len(bound.slices) >= 2
    calls_before = len(gate.calls)
    result = runner.result(runner.engine.submit_encode, texts, None, EncodeOptions(**options))
    assert len(gate.calls) - calls_before == len(bound.slices)  # one Rust call per slice
    assert max(map(len, gate.calls[calls_before:])) < len(texts)
    expected = reference_call(reference_tokenizers["wordpiece_default"], texts, None, options)
    assert_same(to_lists(result), expected, options)


def test_a_large_tokenize_is_sliced_too(sliced, reference_tokenizers, corpus):
    runner, gate = sliced
    texts = short_texts(corpus)
    calls_before = len(gate.calls)
    tokens = runner.result(runner.engine.submit_tokenize, texts).tokens
    assert len(gate.calls) - calls_before >= 2
    reference = reference_tokenizers["wordpiece_default"]
    assert tokens == [reference.tokenize(text) for text in texts]


def test_a_request_that_can_never_fit_is_413_before_any_encoding(sliced):
    runner, gate = sliced
    calls_before = len(gate.calls)
    huge = ["!" * 200_000] * 100  # 20M token bound: ~2 GB of answer
    engine = runner.engine
    for submit, args in (
        (engine.submit_encode, (huge, None, EncodeOptions(padding=True))),
        (engine.submit_tokenize, (huge,)),
        (engine.submit_decode, ([[5] * 200_000] * 100,)),
    ):
        with pytest.raises(ServiceError) as refused:
            runner.result(submit, *args)
        assert refused.value.kind is ErrorKind.TOO_LARGE
        assert "memory budget" in refused.value.message
    assert len(gate.calls) == calls_before, "nothing reached the tokenizer"


def test_a_request_that_must_wait_gets_429_and_fits_once_the_memory_is_free(sliced):
    """The budget is shared by all in-flight work on every route: while a large encode holds most of it,
    another large encode, tokenize or decode is refused at once with Retry-After, then fits."""
    runner, gate = sliced
    engine = runner.engine
    big = [HOLD] + ["!" * 60_000] * 20  # over half the budget
    assert BUDGET // 2 < encode_bound(engine, big, None, EncodeOptions(padding=True)).cost < BUDGET
    gate.close()
    held = runner.run(_submit(engine, big))
    try:
        assert gate.entered.wait(30)
        for submit, args in (
            (engine.submit_encode, (["!" * 60_000] * 20, None, EncodeOptions(padding=True))),
            (engine.submit_tokenize, (["!" * 60_000] * 20,)),
        ):
            with pytest.raises(ServiceError) as refused:
                runner.result(submit, *args)
            assert refused.value.kind is ErrorKind.OVERLOADED and refused.value.retry_after
        assert engine.budget.in_use > BUDGET // 2
    finally:
        gate.open()
    runner.run(_wait(held))
    wait_until(lambda: engine.budget.in_use == 0, 10, "the memory given back")
    assert runner.result(engine.submit_encode, ["!" * 60_000] * 20, None, EncodeOptions(padding=True)).rectangular


async def _submit(engine, texts):
    return engine.submit_encode(texts, None, EncodeOptions(padding=True))


async def _wait(future):
    return await future


# -- a real server: peak RSS within the budget ---------------------------------------------------------

BUDGET_MIB = 256


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid``, in bytes."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


def reserved(url: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("tokenizer_memory_reserved_bytes "):
            return float(line.split()[-1])
    raise AssertionError("no tokenizer_memory_reserved_bytes in /metrics")


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    log = tmp_path_factory.mktemp("memory") / "server.log"
    args = ("--memory-budget-mib", str(BUDGET_MIB), "--queue-timeout-seconds", "120", "--body-timeout-seconds", "60")
    with ServerProcess(*args, log_path=log) as server:
        with httpx.Client(base_url=server.url, timeout=120) as http:  # warm every route once
            for path, body in (("/encode", {"texts": ["warm"] * 64, "padding": True}), ("/tokenize", {"texts": ["a"]})):
                assert http.post(path, json=body).status_code == 200
            assert http.post("/decode", json={"ids": [[5, 6]]}).status_code == 200
        yield server


def test_the_20_mb_request_is_refused_before_encoding_and_rss_stays_in_budget(small_server):
    """Defect: 100 texts of 200,000 "!" (a 20 MB body) were encoded in full, 279 -> 2,906 MB, before a 413;
    /tokenize answered it with 80 MB."""
    pid = small_server.pid
    rest = proc_status(pid)["VmRSS"]
    reset_peak(pid)
    body = json.dumps({"texts": ["!" * 200_000] * 100}).encode()
    with httpx.Client(base_url=small_server.url, timeout=120) as http:
        for path in ("/encode", "/tokenize"):
            response = http.post(path, content=body, headers={"Content-Type": "application/json"})
            assert response.status_code == 413, response.text
            assert "memory budget" in response.json()["error"]
    assert proc_status(pid)["VmHWM"] - rest < BUDGET_MIB * MIB
    assert reserved(small_server.url) == 0
    metrics = dict(
        line.rsplit(" ", 1)
        for line in httpx.get(small_server.url + "/metrics", timeout=30).text.splitlines()
        if not line.startswith("#")
    )
    assert float(metrics["tokenizer_memory_budget_bytes"]) == BUDGET_MIB * MIB
    assert float(metrics['tokenizer_rejected_total{reason="too_large"}']) == 2
    info = httpx.get(small_server.url + "/info", timeout=30).json()
    assert info["memory"] == {"budget_bytes": BUDGET_MIB * MIB, "reserved_bytes": 0}


LARGE = {"texts": ["!" * 40_000] * 24, "padding": "max_length", "max_length": 40_000, "truncation": True}


def test_concurrent_large_answers_and_unread_ones_hold_at_most_the_budget(small_server):
    """Defect: 16 texts padded to a large max_length, 16 at once, peaked at 6.5 GB and kept 3.4 GB; clients
    that never read their answers piled it up further. Here one client never reads its ~9 MB answer: its
    request keeps its reservation while the answer is stuck. Twelve more arrive at once: each fits the
    budget alone, so some are answered and the rest refused with 429 + Retry-After; the peak stays in
    budget and the memory goes back to the system afterwards."""
    pid = small_server.pid
    body = json.dumps(LARGE).encode()
    head = f"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with httpx.Client(base_url=small_server.url, timeout=120) as http:
        assert http.post("/encode", content=body, headers={"Content-Type": "application/json"}).status_code == 200
    rest = proc_status(pid)["VmRSS"]
    reset_peak(pid)
    unread = socket.socket()
    unread.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    unread.connect(("127.0.0.1", small_server.port))
    unread.sendall(head.encode() + body)
    wait_until(lambda: reserved(small_server.url) > BUDGET_MIB * MIB // 4, 60, "the unread answer's reservation")
    statuses: list[tuple[int, str | None]] = []

    def client() -> None:
        with httpx.Client(base_url=small_server.url, timeout=120) as http:
            response = http.post("/encode", content=body, headers={"Content-Type": "application/json"})
            statuses.append((response.status_code, response.headers.get("retry-after")))

    threads = [threading.Thread(target=client) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert {status for status, _ in statuses} == {200, 429}, statuses
    assert all(after == "1" for status, after in statuses if status == 429)
    assert reserved(small_server.url) > BUDGET_MIB * MIB // 4, "the stuck answer still holds its reservation"
    peak = proc_status(pid)["VmHWM"] - rest
    unread.close()
    assert peak < BUDGET_MIB * MIB, f"peak {peak / MIB:.0f} MiB over rest, budget {BUDGET_MIB} MiB"
    wait_until(lambda: reserved(small_server.url) == 0, 30, "every reservation released")
    # nothing of what the requests held stays behind (the allocator's own return: the next test)
    wait_until(lambda: proc_status(pid)["VmRSS"] - rest < BUDGET_MIB * MIB // 4, 10, "memory returned")


TRIM_PROBE = """
import ctypes, gc, os, sys, time
from concurrent.futures import ThreadPoolExecutor
from service.engine.loading import load_tokenizer
from service.engine.memory import MemoryBudget, TRIM_AFTER_BYTES

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

backend = load_tokenizer(None).tokenizer.backend_tokenizer
pool = ThreadPoolExecutor(1)  # Rust's encodings are made and freed off the main thread, as in the engine
texts = [("今天天气很好 hello world " * 5000)[:100_000] for _ in range(20)]
pool.submit(backend.encode_batch_fast, texts[:1]).result()
rest = rss()
for _ in range(2):
    pool.submit(lambda: len(backend.encode_batch_fast(texts))).result()
gc.collect()
kept = rss() - rest
if sys.argv[1] == "trim":
    budget = MemoryBudget(1 << 40)
    budget.reserve(TRIM_AFTER_BYTES, "a large answer").release()  # what releasing a large answer does
    time.sleep(1)
print(kept, rss() - rest)
"""


def test_a_stream_of_large_releases_trims_once_per_interval_and_after_the_last():
    """A trim holds the allocator's locks: a steady stream of large answers gets one trim per interval, not one
    each, and memory freed by the last of them is still trimmed."""
    import itertools
    import time

    from service.engine.memory import _Trimmer

    trims: list[float] = []
    trimmer = _Trimmer(lambda pad: trims.append(time.monotonic()) or 0, interval=0.2)
    started = time.monotonic()
    last_release = started
    for _ in range(40):  # 0.4 s of large releases (longer on a busy machine)
        last_release = time.monotonic()
        trimmer.trim_soon()
        time.sleep(0.01)
    releasing = time.monotonic() - started
    wait_until(lambda: trims and trims[-1] >= last_release, 5, "a trim after the last release")
    assert trims[0] - started < 0.1 + (releasing - 0.4)  # the first one at once
    # one per interval while releases come, and one after the last: never one per release
    assert 2 <= len(trims) <= 2 + releasing / 0.2, (releasing, trims)
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(trims)), trims


@pytest.mark.parametrize("trim", ["trim", "no-trim"])
def test_releasing_a_large_reservation_returns_the_allocators_pages(trim):
    """glibc keeps the pages Rust's encodings were freed from in its arenas (~120 MB after 2M tokens);
    releasing a large reservation trims them back to the system."""
    import subprocess
    import sys

    from testkit.servers import REPO

    out = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE, trim], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    ).stdout.split()
    kept, after = int(out[-2]), int(out[-1])
    assert kept > 50 * MIB, "the probe no longer leaves pages in the arenas: make it allocate more"
    if trim == "trim":
        assert after < kept / 4, f"kept {kept / MIB:.0f} MiB, {after / MIB:.0f} MiB after the trim"
    else:
        assert after > kept / 2  # without the trim the pages stay: the probe can tell the difference


def test_a_large_count_is_sliced_too(sliced, reference_tokenizers, corpus):
    runner, gate = sliced
    texts = short_texts(corpus)
    texts = texts + texts[:100]  # repeats are counted once
    calls_before = len(gate.calls)
    lengths = runner.result(runner.engine.submit_lengths, texts)
    assert len(gate.calls) - calls_before >= 2
    reference = reference_tokenizers["wordpiece_default"]
    assert lengths == [len(ids) for ids in reference(texts)["input_ids"]]


# -- conversations: the parsed body, the renders, the encode of their texts, all within the budget ---------------
def test_conversations_hold_at_most_the_budget(chat_tokenizer_dirs, tmp_path):
    """A real server with a 128 MiB budget: concurrent chat encodes with masks (each fits alone: answered, after
    429s while the others hold the room), and a render bomb that would render 144 MB from a 16 kB body (413 as it
    renders, never rendered in full; 429 while others hold part of the budget): the process's peak over its rest
    stays within the budget, and nothing stays reserved."""
    budget_mib = 128
    args = ("--model", str(chat_tokenizer_dirs["bytelevel_bpe"]), "--memory-budget-mib", str(budget_mib))
    flags = ("--allow-chat-template-bodies", "--max-text-chars", "1000000", "--queue-timeout-seconds", "120")
    conversation = [
        {"role": "user", "content": "今天天气怎么样？ What's the weather like today? " * 8},
        {"role": "assistant", "content": "It is sunny, 21 °C. ☀️ 天气晴朗。" * 12},
    ]
    chats = {"conversations": [conversation] * 256, "return_assistant_tokens_mask": True, "padding": True}
    bomb = {
        "conversations": [[{"role": "user", "content": "y" * 100}]] * 160,
        "chat_template": "{% for i in range(9000) %}{{ messages[0].content }}{% endfor %}",
    }
    with ServerProcess(*args, *flags, log_path=tmp_path / "server.log") as server:
        pid = server.pid
        with httpx.Client(base_url=server.url, timeout=120) as http:
            assert http.post("/chat/encode", json=chats).status_code == 200  # warm
        rest = proc_status(pid)["VmRSS"]
        reset_peak(pid)
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for _ in range(3):  # each refused bomb gives back what it rendered, at once
                refused = http.post("/chat/encode", json=bomb)
                assert refused.status_code == 413 and "rendering these conversations" in refused.json()["error"]
        statuses: list[int] = []

        def client(body: dict) -> None:
            with httpx.Client(base_url=server.url, timeout=120) as http:
                for _ in range(100):  # as the SDK does: a 429 is retried once others have freed their memory
                    status = http.post("/chat/encode", json=body).status_code
                    if status != 429:
                        break
                    time.sleep(0.1)
                statuses.append(status)

        threads = [threading.Thread(target=client, args=(body,)) for body in [chats] * 4 + [bomb]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        peak = proc_status(pid)["VmHWM"] - rest
        assert sorted(statuses) == [200, 200, 200, 200, 413], statuses  # every chat answered, the bomb refused
        assert peak < budget_mib * MIB, f"peak {peak / MIB:.0f} MiB over rest, budget {budget_mib} MiB"
        wait_until(lambda: reserved(server.url) == 0, 30, "every reservation released")
