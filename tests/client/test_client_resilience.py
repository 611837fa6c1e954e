"""The SDK when things go wrong: retries with backoff, Retry-After, deadlines, failover, timeouts, stale
keep-alive connections, error translation. Transport-level behaviour is tested through the injectable
MockTransport; what needs real sockets uses tiny stub servers on 127.0.0.1 or real service processes."""

from __future__ import annotations

import asyncio
import json
import pickle
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
import torch
from torch.utils.data import DataLoader

from service.client import (
    AsyncHTTPTransport,
    AsyncHTTPXTransport,
    AsyncTokenizerClient,
    ConnectError,
    FingerprintMismatch,
    HTTPXTransport,
    InvalidRequest,
    MockTransport,
    NotAcceptable,
    PayloadTooLarge,
    ProtocolError,
    Request,
    RequestRejected,
    Response,
    RetriesExhausted,
    RetryPolicy,
    ServerBusy,
    ServiceUnreachable,
    TokenizerClient,
    TokenizerServiceError,
    TransportTimeout,
    Unauthorized,
)
from service.client.answers import retry_after_seconds
from testkit.servers import ServerProcess, free_port

FAST = RetryPolicy(max_attempts=5, deadline=10, backoff_initial=0.01, backoff_max=0.05)
FINGERPRINT = "sha256:" + "ab" * 32
OK_BODY = json.dumps({"input_ids": [[1, 2]], "attention_mask": [[1, 1]]}).encode()


def ok(body: bytes = OK_BODY, fingerprint: str = FINGERPRINT) -> Response:
    return Response(200, {"content-type": "application/json", "x-tokenizer-fingerprint": fingerprint}, body)


def error(status: int, kind: str, message: str, retry_after: str | None = None) -> Response:
    headers = {"content-type": "application/json"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    return Response(status, headers, json.dumps({"error": message, "error_type": kind}).encode())


class Recorder:
    """A MockTransport handler that replays scripted answers per URL host and records each request."""

    def __init__(self, script: Callable[[Request, int], Response]) -> None:
        self.script = script
        self.requests: list[tuple[float, Request]] = []

    def __call__(self, request: Request) -> Response:
        self.requests.append((time.monotonic(), request))
        return self.script(request, len(self.requests))

    def hosts(self) -> list[str]:
        return [request.url.split("/")[2] for _, request in self.requests]


# -- retries, backoff, Retry-After, deadline ------------------------------------------------------------


def test_connection_errors_are_retried_then_succeed():
    """An outage: the URL answered once, then refuses twice (a restart). A URL that never answered is not
    retried (test_a_url_that_never_answered_is_given_up_at_once)."""

    def script(request: Request, n: int) -> Response:
        if n in (2, 3):
            raise ConnectError("refused", url=request.url)
        return ok()

    recorder = Recorder(script)
    client = TokenizerClient("http://a:1", retry=FAST, transport=MockTransport(recorder))
    assert client(["x"])["input_ids"] == [[1, 2]]
    assert client(["x"])["input_ids"] == [[1, 2]]
    assert len(recorder.requests) == 4


def answers_once_then_refuses(request: Request, n: int) -> Response:
    if n == 1:
        return ok()
    raise ConnectError(f"refused #{n}", url=request.url)


def test_gives_up_with_one_error_naming_urls_and_cause():
    recorder = Recorder(answers_once_then_refuses)
    client = TokenizerClient("http://a:1, http://b:2", retry=FAST, transport=MockTransport(recorder))
    client(["x"])  # first contact: what fails from now on is an outage
    started = time.monotonic()
    with pytest.raises(RetriesExhausted) as info:
        client(["x"])
    assert time.monotonic() - started < 2
    error = info.value
    assert not isinstance(error, ServiceUnreachable)
    assert len(recorder.requests) - 1 == FAST.max_attempts == error.attempts
    assert set(error.urls) == {"http://a:1", "http://b:2"}
    message = str(error)
    assert "http://a:1" in message and "http://b:2" in message and "5 tries" in message
    assert "ConnectError: refused #6" in message  # the last cause
    assert isinstance(error.__cause__, ConnectError) and error.last_error is error.__cause__
    assert isinstance(error, TokenizerServiceError)


def test_a_url_that_never_answered_is_given_up_at_once():
    """Defect: a URL that had never answered (a typo, DNS failure, https against plain HTTP) was retried like
    an outage: 10 tries for the client, 300 s for pretokenize. Each URL is tried once, then one error names
    every URL and why; a URL that never answers beside one that does is failed over, as before."""
    refusing = Recorder(lambda request, n: (_ for _ in ()).throw(ConnectError(f"refused #{n}", url=request.url)))
    client = TokenizerClient("http://a:1, http://b:2", retry=FAST, transport=MockTransport(refusing))
    with pytest.raises(ServiceUnreachable) as info:
        client(["x"])
    assert len(refusing.requests) == info.value.attempts == 2 and set(info.value.urls) == {"http://a:1", "http://b:2"}
    message = str(info.value)
    assert message.startswith("POST /encode: none of http") and "has ever answered, not retried" in message
    assert "ConnectError: refused #1" in message and "ConnectError: refused #2" in message

    half = Recorder(lambda request, n: ok() if "//b:2" in request.url else refuse(request))
    client = TokenizerClient("http://a:1, http://b:2", retry=FAST, transport=MockTransport(half))
    for _ in range(5):
        assert client(["x"])["input_ids"] == [[1, 2]]

    # Once answered, the client (and its copies in DataLoader workers, forked or spawned) meets an outage.
    answered = TokenizerClient("http://a:1", retry=FAST, transport=MockTransport(Recorder(answers_once_then_refuses)))
    answered(["x"])
    assert pickle.loads(pickle.dumps(answered._endpoints)).answered
    with pytest.raises(RetriesExhausted) as info:
        answered(["x"])
    assert not isinstance(info.value, ServiceUnreachable) and info.value.attempts == FAST.max_attempts


def refuse(request: Request) -> Response:
    raise ConnectError("refused", url=request.url)


def test_retry_after_is_honoured():
    def script(request: Request, n: int) -> Response:
        return error(503, "unavailable", "draining", retry_after="0.4") if n == 1 else ok()

    recorder = Recorder(script)
    client = TokenizerClient("http://a:1", retry=FAST, transport=MockTransport(recorder))
    assert client(["x"])["input_ids"] == [[1, 2]]
    (first, _), (second, _) = recorder.requests
    assert second - first >= 0.4


def test_429_and_504_are_retried_but_client_errors_are_not():
    for status, kind in ((429, "overloaded"), (504, "timeout"), (502, "bad_gateway")):
        recorder = Recorder(lambda request, n, s=status, k=kind: error(s, k, "busy", "0") if n == 1 else ok())
        TokenizerClient("http://a:1", retry=FAST, transport=MockTransport(recorder))(["x"])
        assert len(recorder.requests) == 2, status

    cases = [
        (422, "tokenizer", InvalidRequest),
        (401, "unauthorized", Unauthorized),
        (413, "too_large", PayloadTooLarge),
        (406, "not_acceptable", NotAcceptable),
        (500, "internal", RequestRejected),
        (404, "not_found", RequestRejected),
    ]
    for status, kind, cls in cases:
        recorder = Recorder(lambda request, n, s=status, k=kind: error(s, k, f"no, {s}"))
        client = TokenizerClient("http://a:1, http://b:1", retry=FAST, transport=MockTransport(recorder))
        with pytest.raises(cls) as info:
            client(["x"])
        assert len(recorder.requests) == 1, status  # not retried, not tried elsewhere
        assert (info.value.status, info.value.error_type, info.value.error) == (status, kind, f"no, {status}")
        assert f"no, {status}" in str(info.value) and "/encode" in str(info.value)


def test_deadline_gives_up_instead_of_sleeping_past_it():
    recorder = Recorder(lambda request, n: error(429, "overloaded", "queue full", retry_after="30"))
    client = TokenizerClient(
        "http://a:1", retry=RetryPolicy(max_attempts=10, deadline=1.0), transport=MockTransport(recorder)
    )
    started = time.monotonic()
    with pytest.raises(RetriesExhausted, match="deadline") as info:
        client(["x"])
    assert time.monotonic() - started < 0.5 and len(recorder.requests) == 1
    assert isinstance(info.value.last_error, ServerBusy) and info.value.last_error.retry_after == 30


def test_retry_after_forms():
    assert retry_after_seconds("3") == 3.0 and retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert 0 <= retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0  # a date in the past: now
    in_a_minute = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 60))
    assert 55 < retry_after_seconds(in_a_minute) <= 61


def test_backoff_is_jittered_exponential_and_capped():
    policy = RetryPolicy(backoff_initial=0.1, backoff_max=1.0)
    for failures, ceiling in ((1, 0.1), (2, 0.2), (3, 0.4), (5, 1.0), (80, 1.0)):
        draws = [policy.backoff(failures) for _ in range(300)]
        assert all(0 <= d <= ceiling for d in draws)
        assert max(draws) > ceiling * 0.8 and min(draws) < ceiling * 0.2  # full jitter, not a fixed wait
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


# -- several URLs -------------------------------------------------------------------------------------


def test_calls_are_spread_round_robin():
    recorder = Recorder(lambda request, n: ok())
    client = TokenizerClient(["http://a:1", "http://b:1", "http://c:1"], transport=MockTransport(recorder))
    for _ in range(30):
        client(["x"])
    hosts = recorder.hosts()
    assert {host: hosts.count(host) for host in set(hosts)} == {"a:1": 10, "b:1": 10, "c:1": 10}


def test_calls_go_to_the_endpoint_with_the_fewest_outstanding():
    """Least outstanding requests in this process, not round-robin: while one replica is busy with a slow call,
    the calls made meanwhile go to the idle one (round-robin would queue every other one behind the slow call)."""
    slow_started, release = threading.Event(), threading.Event()

    def script(request: Request, n: int) -> Response:
        if "//a:1" in request.url:
            slow_started.set()
            release.wait(2.0)  # a long batch on replica a (bounded: the wrong variant must fail, not hang)
        return ok()

    recorder = Recorder(script)
    client = TokenizerClient(["http://a:1", "http://b:1"], transport=MockTransport(recorder))
    while not slow_started.is_set():  # one call that lands on a (ties go in rotation: at most two calls)
        caller = threading.Thread(target=client, args=(["slow"],), daemon=True)
        caller.start()
        caller.join(0.2)
    before = len(recorder.requests)
    for _ in range(10):
        client(["x"])
    meanwhile = recorder.hosts()[before:]
    release.set()
    caller.join(5)
    assert meanwhile == ["b:1"] * 10, meanwhile
    for _ in range(10):  # a's slow call answered: nothing is counted on it any more, calls spread again
        client(["x"])
    spread = recorder.hosts()[-10:]
    assert sorted({host: spread.count(host) for host in spread}.values()) == [5, 5]


def test_a_call_that_raises_is_no_longer_counted_on_its_endpoint():
    raised = []

    def script(request: Request, n: int) -> Response:
        if "//a:1" in request.url and not raised:
            raised.append(n)
            raise RuntimeError("a bug below the client")  # not a TransportError: the call ends with it
        return ok()

    recorder = Recorder(script)
    client = TokenizerClient(["http://a:1", "http://b:1"], retry=FAST, transport=MockTransport(recorder))
    while not raised:  # (ties go in rotation: at most two calls)
        try:
            client(["x"])
        except RuntimeError:
            pass
    for _ in range(20):
        client(["x"])
    hosts = recorder.hosts()[-20:]
    assert {host: hosts.count(host) for host in set(hosts)} == {"a:1": 10, "b:1": 10}  # no call left counted on a


def test_failover_sets_a_dead_endpoint_aside():
    def script(request: Request, n: int) -> Response:
        if "//a:1" in request.url:
            raise ConnectError("refused", url=request.url)
        return ok()

    recorder = Recorder(script)
    policy = RetryPolicy(max_attempts=3, backoff_initial=5.0, backoff_max=5.0)
    client = TokenizerClient("http://a:1,http://b:1", retry=policy, transport=MockTransport(recorder))
    started = time.monotonic()
    for _ in range(20):
        assert client(["x"])["input_ids"] == [[1, 2]]
    assert time.monotonic() - started < 1  # failover is immediate, no backoff sleep
    assert recorder.hosts().count("a:1") <= 2  # cooling down, not retried on every call
    assert recorder.hosts().count("b:1") == 20


def test_request_shape_headers_and_url_sources(monkeypatch):
    recorder = Recorder(lambda request, n: ok())
    client = TokenizerClient(
        "http://a:1/prefix/", api_key="k", headers={"X-Team": "nlp"}, transport=MockTransport(recorder)
    )
    client(["x", "y"], ["p", "q"], padding="longest", max_length=8, truncation=True)
    _, request = recorder.requests[-1]
    assert request.url == "http://a:1/prefix/encode" and request.method == "POST"
    assert request.headers["Authorization"] == "Bearer k" and request.headers["X-Team"] == "nlp"
    assert request.headers["Accept"] == "application/json"
    # only what differs from transformers' defaults is sent
    assert json.loads(request.body) == {
        "texts": ["x", "y"],
        "text_pairs": ["p", "q"],
        "padding": "longest",
        "max_length": 8,
        "truncation": True,
    }
    with pytest.raises(ProtocolError, match="safetensors"):
        client(["x"], return_tensors="pt")  # the mock answers JSON: the client must notice
    assert recorder.requests[-1][1].headers["Accept"] == "application/vnd.safetensors"

    monkeypatch.setenv("TOKENIZER_SERVICE_URL", "http://a:1, http://b:2/,http://a:1")
    monkeypatch.delenv("TOKENIZER_SERVICE_API_KEY", raising=False)
    from_env = TokenizerClient(transport=MockTransport(recorder))
    assert from_env.urls == ("http://a:1", "http://b:2")
    with pytest.raises(ProtocolError, match="tokens"):
        from_env.tokenize("x")  # an answer that breaks the contract is a ProtocolError, not a KeyError
    assert "Authorization" not in recorder.requests[-1][1].headers
    monkeypatch.delenv("TOKENIZER_SERVICE_URL")
    with pytest.raises(ValueError, match="TOKENIZER_SERVICE_URL") as missing:
        TokenizerClient()
    assert "--url" in str(missing.value) and "url=" in str(missing.value)  # the CLI's words and Python's
    with pytest.raises(ValueError, match="http"):
        TokenizerClient("ftp://a:1")


def test_pinned_fingerprint_fails_closed():
    for answer in (ok(fingerprint="sha256:other"), Response(200, {"content-type": "application/json"}, OK_BODY)):
        recorder = Recorder(lambda request, n, a=answer: a)
        client = TokenizerClient("http://a:1", expected_fingerprint=FINGERPRINT, transport=MockTransport(recorder))
        with pytest.raises(FingerprintMismatch, match="expected_fingerprint"):
            client(["x"])
        assert len(recorder.requests) == 1  # not retried: another try would not change the tokenizer
    recorder = Recorder(lambda request, n: ok())
    assert TokenizerClient("http://a:1", expected_fingerprint=FINGERPRINT, transport=MockTransport(recorder))(["x"])[
        "input_ids"
    ] == [[1, 2]]


def test_errors_pickle_and_rebuild_from_a_message():
    """DataLoader re-raises a worker's error as ``type(exc)(message)``: every class must allow that."""
    from service.transport import exceptions

    for name in exceptions.__all__:
        cls = getattr(exceptions, name)
        assert str(cls("just a message")) == "just a message"
    error = RetriesExhausted("gave up", urls=["http://a:1"], attempts=3, last_error=ConnectError("x", url="http://a:1"))
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.urls, clone.attempts, str(clone.last_error)) == (("http://a:1",), 3, "x")
    rejected = pickle.loads(pickle.dumps(InvalidRequest("bad", status=422, error_type="tokenizer", error="e")))
    assert (rejected.status, rejected.error_type, rejected.error) == (422, "tokenizer", "e")


def test_async_client_retries_and_fails_over():
    calls: list[tuple[float, str]] = []

    async def script(request: Request) -> Response:
        await asyncio.sleep(0)
        host = request.url.split("/")[2]
        calls.append((time.monotonic(), host))
        if host == "a:1":
            raise ConnectError("refused", url=request.url)
        if [h for _, h in calls].count("b:1") == 1:
            return error(503, "unavailable", "draining", retry_after="0.3")
        return ok()

    async def main() -> list[Any]:
        policy = RetryPolicy(max_attempts=50, backoff_initial=0.01, backoff_max=0.05)
        client = AsyncTokenizerClient("http://a:1,http://b:1", retry=policy, transport=MockTransport(script))
        return [await client(["x"]) for _ in range(3)]

    results = asyncio.run(main())
    assert all(r["input_ids"] == [[1, 2]] for r in results)
    b_times = [t for t, host in calls if host == "b:1"]
    assert len(b_times) == 4 and b_times[1] - b_times[0] >= 0.3  # b's Retry-After was honoured

    async def all_down() -> None:
        client = AsyncTokenizerClient("http://a:1", retry=FAST, transport=MockTransport(script))
        await client(["x"])

    with pytest.raises(RetriesExhausted, match="http://a:1"):
        asyncio.run(all_down())


# -- real sockets: stub servers ------------------------------------------------------------------------


class _StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answers: ClassVar[list[tuple[int, dict[str, str], bytes]]] = []
    seen: ClassVar[list[float]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append(time.monotonic())
        status, headers, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stub_server() -> Iterator[tuple[str, type[_StubHandler]]]:
    handler = type("Handler", (_StubHandler,), {"answers": [], "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(30)
def test_503_retry_after_over_real_http(stub_server):
    """A draining server says 503 + Retry-After: 1; sync and async clients wait that long, then succeed."""
    url, handler = stub_server
    busy = (
        503,
        {"Retry-After": "1", "Content-Type": "application/json"},
        json.dumps({"error": "draining", "error_type": "unavailable"}).encode(),
    )
    fine = (200, {"Content-Type": "application/json", "X-Tokenizer-Fingerprint": FINGERPRINT}, OK_BODY)

    handler.answers[:] = [busy, fine]
    assert TokenizerClient(url, retry=FAST)(["x"])["input_ids"] == [[1, 2]]
    assert len(handler.seen) == 2 and handler.seen[1] - handler.seen[0] >= 1.0

    handler.answers[:] = [busy, fine]
    handler.seen.clear()
    assert asyncio.run(AsyncTokenizerClient(url, retry=FAST)(["x"]))["input_ids"] == [[1, 2]]
    assert len(handler.seen) == 2 and handler.seen[1] - handler.seen[0] >= 1.0

    handler.answers[:] = [busy]  # never recovers: bounded by the attempts, then one clear error
    handler.seen.clear()
    with pytest.raises(RetriesExhausted, match="503 unavailable: draining") as info:
        TokenizerClient(url, retry=RetryPolicy(max_attempts=2))(["x"])
    assert isinstance(info.value.last_error, ServerBusy) and info.value.last_error.retry_after == 1
    assert len(handler.seen) == 2


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and reads, never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    listener.close()


@pytest.mark.timeout(30)
def test_read_timeout_is_translated_and_bounded(silent_server):
    client = TokenizerClient(silent_server, timeout=0.3, retry=RetryPolicy(max_attempts=2, backoff_max=0.05))
    started = time.monotonic()
    with pytest.raises(RetriesExhausted) as info:
        client(["x"])
    assert 0.6 <= time.monotonic() - started < 3
    assert isinstance(info.value.last_error, TransportTimeout) and isinstance(info.value.last_error, TimeoutError)
    assert silent_server in str(info.value)

    for transport in (AsyncHTTPTransport, AsyncHTTPXTransport):
        aclient = AsyncTokenizerClient(
            silent_server, timeout=0.3, transport=transport(), retry=RetryPolicy(max_attempts=2, backoff_max=0.05)
        )
        started = time.monotonic()
        with pytest.raises(RetriesExhausted) as info:
            asyncio.run(aclient(["x"]))
        assert 0.6 <= time.monotonic() - started < 3, transport
        assert isinstance(info.value.last_error, TransportTimeout), transport


@pytest.fixture
def one_shot_server() -> Iterator[tuple[str, list[int]]]:
    """Answers one request per connection, then closes it *without* saying ``Connection: close``: the
    client's next request on that keep-alive connection finds it dead."""
    listener = socket.create_server(("127.0.0.1", 0))
    connections: list[int] = []
    stop = threading.Event()
    body = OK_BODY
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Tokenizer-Fingerprint: "
        + FINGERPRINT.encode()
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            connections.append(1)
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                conn.sendall(answer)
            time.sleep(0.05)  # let the close reach the client before it sends again

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", connections
    stop.set()
    thread.join(2)
    listener.close()


@pytest.mark.timeout(30)
def test_stale_keepalive_connection_is_replaced_without_using_a_retry(one_shot_server):
    url, connections = one_shot_server
    client = TokenizerClient(url, retry=RetryPolicy(max_attempts=1))  # no retries allowed at all
    for _ in range(3):
        assert client(["x"])["input_ids"] == [[1, 2]]
        time.sleep(0.1)
    assert len(connections) == 3

    async def three_calls() -> None:
        aclient = AsyncTokenizerClient(url, retry=RetryPolicy(max_attempts=1))
        for _ in range(3):
            assert (await aclient(["x"]))["input_ids"] == [[1, 2]]
            await asyncio.sleep(0.1)
        await aclient.aclose()

    asyncio.run(three_calls())
    assert len(connections) == 6


@pytest.fixture
def chunked_server() -> Iterator[str]:
    """Answers every request on a keep-alive connection with a chunked body (three chunks)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    parts = [OK_BODY[:10], OK_BODY[10:30], OK_BODY[30:]]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Tokenizer-Fingerprint: "
        + FINGERPRINT.encode()
        + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked
    )

    def handle(conn: socket.socket) -> None:
        with conn:
            buffered = b""
            while not stop.is_set():
                while b"\r\n\r\n" not in buffered:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffered += data
                head, _, buffered = buffered.partition(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                while len(buffered) < length:
                    buffered += conn.recv(65536)
                buffered = buffered[length:]
                conn.sendall(answer)

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(2)
    listener.close()


@pytest.mark.timeout(30)
def test_chunked_answers_on_a_kept_alive_connection(chunked_server):
    client = TokenizerClient(chunked_server, retry=RetryPolicy(max_attempts=1))
    for _ in range(3):
        assert client(["x"])["input_ids"] == [[1, 2]]

    async def calls() -> list[Any]:
        async with AsyncTokenizerClient(chunked_server, retry=RetryPolicy(max_attempts=1)) as aclient:
            return [await aclient(["x"]) for _ in range(3)]

    assert all(r["input_ids"] == [[1, 2]] for r in asyncio.run(calls()))


# -- real servers --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spare_server(tmp_path_factory) -> Iterator[ServerProcess]:
    """A default-tokenizer server these tests may stop and start."""
    server = ServerProcess(log_path=tmp_path_factory.mktemp("spare") / "server.log").start()
    yield server
    server.stop()


def texts_encoded(server: ServerProcess) -> float:
    import urllib.request

    with urllib.request.urlopen(server.url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("tokenizer_texts_encoded_total"):
                return float(line.split()[-1])
    return 0.0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_failover_between_two_servers(spare_server, servers, reference_tokenizers, corpus):
    if spare_server.proc.poll() is not None:
        spare_server.start()
    other = servers["wordpiece_default"]
    texts = corpus["zh"][:8]
    expected = reference_tokenizers["wordpiece_default"](texts, padding=True, return_tensors="pt")
    client = TokenizerClient([spare_server.url, other.url], retry=RetryPolicy(max_attempts=4, backoff_max=0.5))
    before = texts_encoded(spare_server), texts_encoded(other)
    for _ in range(10):
        assert torch.equal(client(texts, padding=True, return_tensors="pt")["input_ids"], expected["input_ids"])
    after = texts_encoded(spare_server), texts_encoded(other)
    assert after[0] - before[0] == after[1] - before[1] == 5 * len(texts)  # spread evenly

    spare_server.stop()
    started = time.monotonic()
    for _ in range(20):
        assert torch.equal(client(texts, padding=True, return_tensors="pt")["input_ids"], expected["input_ids"])
    assert time.monotonic() - started < 10
    assert texts_encoded(other) - after[1] == 20 * len(texts)
    spare_server.start()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_server_gone_for_good_fails_clearly_and_in_bounded_time(corpus):
    dead = f"http://127.0.0.1:{free_port()}"
    client = TokenizerClient(dead, retry=RetryPolicy(max_attempts=4, deadline=3, backoff_max=0.2))
    started = time.monotonic()
    with pytest.raises(RetriesExhausted) as info:
        client(["x"])
    assert time.monotonic() - started < 3
    assert dead in str(info.value) and "ConnectError" in str(info.value) and "refused" in str(info.value).lower()

    # The same inside DataLoader workers: the training loop gets the same class and message, not a hang,
    # and the loader shuts down in bounded time too (the other worker finishes its own bounded retries).
    loader = DataLoader(
        corpus["zh"][:64],
        batch_size=8,
        num_workers=2,
        multiprocessing_context="fork",
        collate_fn=client.collator(max_length=32, truncation=True),
    )
    started = time.monotonic()
    iterator = iter(loader)
    with pytest.raises(RetriesExhausted, match=dead.replace(".", r"\.")):
        for _ in iterator:
            pass
    raised_after = time.monotonic() - started
    # torch leaves the workers to the iterator's __del__ after a worker error; when that runs from the
    # garbage collector, the queues may already be finalised and each join waits out its 5 s timeout.
    # Shut down as the loader does at the end of an epoch, here, so nothing spills into the next test.
    iterator._shutdown_workers()
    assert raised_after < 10 and time.monotonic() - started < 20


@pytest.mark.timeout(60)
def test_httpx_transports_give_the_same_results_and_errors(servers, reference_tokenizers, corpus):
    url = servers["bytelevel_bpe"].url
    texts = corpus["en"][:8]
    reference = reference_tokenizers["bytelevel_bpe"]
    client = TokenizerClient(url, transport=HTTPXTransport())
    assert dict(client(texts, padding=True)) == dict(reference(texts, padding=True))
    assert torch.equal(
        client(texts, padding=True, return_tensors="pt")["input_ids"],
        reference(texts, padding=True, return_tensors="pt")["input_ids"],
    )
    client.close()
    clone = pickle.loads(pickle.dumps(client))
    assert clone.tokenize("hi") == reference.tokenize("hi")

    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RetriesExhausted) as info:
        TokenizerClient(dead, retry=RetryPolicy(max_attempts=2), transport=HTTPXTransport())(["x"])
    assert isinstance(info.value.last_error, ConnectError)

    async def async_dead() -> None:
        await AsyncTokenizerClient(dead, retry=RetryPolicy(max_attempts=2), transport=AsyncHTTPXTransport())(["x"])

    with pytest.raises(RetriesExhausted) as info:
        asyncio.run(async_dead())
    assert isinstance(info.value.last_error, ConnectError)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", [AsyncHTTPTransport, AsyncHTTPXTransport])
def test_async_concurrency_and_cancellation_never_mix_answers(servers, reference_tokenizers, corpus, transport):
    """64 concurrent calls with different texts each get their own answer; a call cancelled mid-flight does
    not leave its connection (with an answer still on the way) in the pool for the next call."""
    reference = reference_tokenizers["wordpiece_default"]
    texts = corpus["zh"][:64]
    expected = reference(texts)["input_ids"]

    async def main() -> tuple[list[Any], list[Any]]:
        async with AsyncTokenizerClient(servers["wordpiece_default"].url, transport=transport()) as client:
            concurrent = await asyncio.gather(*(client([text]) for text in texts))
            after_cancel = []
            for i in range(20):
                doomed = asyncio.ensure_future(client([texts[i]] * 200, padding=True))
                await asyncio.sleep(0.001 * (i % 4))  # cancel at different points of the exchange
                doomed.cancel()
                after_cancel.append(await client([texts[i + 1]]))
            return concurrent, after_cancel

    concurrent, after_cancel = asyncio.run(main())
    assert [r["input_ids"][0] for r in concurrent] == expected
    assert [r["input_ids"][0] for r in after_cancel] == expected[1:21]


@pytest.fixture
def https_stub(tmp_path, stub_server) -> Iterator[tuple[str, str]]:
    """The stub server again, behind TLS with a self-signed certificate for 127.0.0.1."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    _, handler = stub_server
    handler.answers[:] = [(200, {"Content-Type": "application/json", "X-Tokenizer-Fingerprint": FINGERPRINT}, OK_BODY)]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", str(cert)
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(30)
def test_https_with_a_ca_bundle_and_refusal_without(https_stub):
    from service.client import HTTPTransport

    url, cafile = https_stub
    no_retry = RetryPolicy(max_attempts=1)
    for _ in range(2):  # the second call reuses the TLS connection
        assert TokenizerClient(url, transport=HTTPTransport(verify=cafile))(["x"])["input_ids"] == [[1, 2]]

    async def calls() -> list[Any]:
        async with AsyncTokenizerClient(url, transport=AsyncHTTPTransport(verify=cafile)) as client:
            return [await client(["x"]) for _ in range(2)]

    assert all(r["input_ids"] == [[1, 2]] for r in asyncio.run(calls()))
    with pytest.raises(RetriesExhausted, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        TokenizerClient(url, retry=no_retry)(["x"])  # a self-signed certificate is refused by default
    with pytest.raises(RetriesExhausted, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        asyncio.run(AsyncTokenizerClient(url, retry=no_retry)(["x"]))
