"""Unix domain sockets everywhere a URL goes: the ``http+unix://`` convention (``service.wire``), every client
transport, ``serve --uds`` answering every route, a stale socket file replaced and a live one refused, the
lossless drain over a socket, and ``--owners-file`` (the server stops once no process holds its lock).

Socket paths live in short folders under /tmp: a Unix socket path holds at most 107 bytes, and pytest's
``tmp_path`` can be longer."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.addresses import MAX_SOCKET_PATH_BYTES, UNIX_SCHEME, parse_service_url, unix_socket_url
from service.client import (
    AsyncHTTPTransport,
    AsyncHTTPXTransport,
    AsyncTokenizerClient,
    ConnectError,
    HTTPTransport,
    HTTPXTransport,
    InvalidRequest,
    TokenizerClient,
)
from service.client.base import resolve_urls
from service.transport import Request, Timeout
from service.wire import URL_ENV
from testkit.servers import REPO, ServerProcess

TEXTS = ["今天天气很好", "The weather is nice today.", "质量太差了，不推荐"]


@pytest.fixture(scope="module")
def short_dir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="tsu-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def uds_server(short_dir: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(uds=short_dir / "served.sock", log_path=short_dir / "served.log").start()
    yield server
    server.stop()


def get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    response = HTTPTransport().handle_request(Request("GET", url + path, headers or {}, timeout=Timeout(5, 30)))
    return response.status, dict(response.headers), bytes(response.body)


# -- the URL convention ------------------------------------------------------------------------------------
def test_a_socket_url_is_its_path_percent_encoded_and_reads_back():
    url = unix_socket_url("/run/user/1000/Tok a,b.sock")
    assert url == f"{UNIX_SCHEME}://%2Frun%2Fuser%2F1000%2FTok%20a%2Cb.sock"
    address = parse_service_url(url + "/encode?x=1")
    assert address.socket_path == "/run/user/1000/Tok a,b.sock" and address.target == "/encode?x=1"
    assert address.origin == (UNIX_SCHEME, "/run/user/1000/Tok a,b.sock", 0)
    # a comma-separated list stays one: the comma in the path is encoded
    assert resolve_urls(f"{url},http://h:1") == (url, "http://h:1")
    tcp = parse_service_url("http://Example.org:8000/prefix/encode")
    assert (tcp.host, tcp.port, tcp.socket_path, tcp.target) == ("example.org", 8000, None, "/prefix/encode")


@pytest.mark.parametrize(
    "written", ["unix:/tmp/t.sock", "unix:///tmp/t.sock", f"{UNIX_SCHEME}:///tmp/t.sock", "/tmp/t.sock"]
)
def test_a_socket_written_another_way_is_refused_with_its_url(written):
    with pytest.raises(ValueError, match=r"http\+unix://%2Ftmp%2Ft.sock"):
        TokenizerClient(written)


def test_other_schemes_are_refused_naming_the_three_forms():
    with pytest.raises(ValueError, match=r"http://HOST:PORT, https://HOST:PORT or http\+unix://"):
        TokenizerClient("ftp://example.org")


# -- serve --uds -------------------------------------------------------------------------------------------
def test_uds_serves_every_route(uds_server, reference_tokenizers):
    """Every route of the server's own schema, the pages, and a guarded-protocol refusal, over the socket."""
    url = uds_server.url
    reference = reference_tokenizers["wordpiece_default"]
    status, _, body = get(url, "/openapi.json")
    assert status == 200
    schema = json.loads(body)
    posts = {path for path, methods in schema["paths"].items() if "post" in methods}
    gets = {path for path, methods in schema["paths"].items() if "get" in methods}
    assert posts == {"/encode", "/tokenize", "/decode", "/lengths", "/chat/encode", "/chat/render"}  # add its call
    client = TokenizerClient(url)
    expected = reference(TEXTS, padding=True, truncation=True, max_length=16)
    assert client(TEXTS, padding=True, truncation=True, max_length=16).data == dict(expected)
    tensors = client(TEXTS, padding=True, return_tensors="pt")
    assert tensors["input_ids"].tolist() == reference(TEXTS, padding=True)["input_ids"]
    assert client.encode_ragged(TEXTS).tolist()["input_ids"] == reference(TEXTS)["input_ids"]
    assert client.tokenize(TEXTS[1]) == reference.tokenize(TEXTS[1])
    assert client.batch_decode(expected["input_ids"]) == reference.batch_decode(expected["input_ids"])
    assert client.lengths(TEXTS) == [len(ids) for ids in reference(TEXTS)["input_ids"]]
    for tokenize in (True, False):  # the chat routes answer over the socket (this tokenizer has no template)
        with pytest.raises(InvalidRequest, match="this tokenizer has no chat template"):
            client.apply_chat_template([{"role": "user", "content": TEXTS[0]}], tokenize=tokenize)
    for path in [*sorted(gets), "/", "/playground", "/docs"]:
        status, _, body = get(url, path)
        assert status == 200, (path, body[:200])
    assert client.info()["fingerprint"].startswith("sha256:")
    _, _, metrics = get(url, "/metrics")
    assert b'route="/encode"' in metrics and b'route="/lengths"' in metrics
    # the guarded protocol over a socket (its peer has no address): an oversized header block gets its 431
    status, _, body = get(url, "/info", {"X-Big": "x" * 40_000})
    assert status == 431 and b"max-header-bytes" in body


@pytest.mark.parametrize("transport", [HTTPTransport, HTTPXTransport])
def test_sync_transports_reach_a_socket(uds_server, reference_tokenizers, transport):
    client = TokenizerClient(uds_server.url, transport=transport())
    expected = reference_tokenizers["wordpiece_default"](TEXTS, padding=True)["input_ids"]
    for _ in range(3):  # keep-alive: the same connection again
        assert client(TEXTS, padding=True)["input_ids"] == expected
    client.close()


@pytest.mark.parametrize("transport", [AsyncHTTPTransport, AsyncHTTPXTransport])
def test_async_transports_reach_a_socket(uds_server, reference_tokenizers, transport):
    expected = reference_tokenizers["wordpiece_default"](TEXTS, padding=True)["input_ids"]

    async def main() -> list[list[list[int]]]:
        async with AsyncTokenizerClient(uds_server.url, transport=transport()) as client:
            results = await asyncio.gather(*(client(TEXTS, padding=True) for _ in range(8)))
        return [result["input_ids"] for result in results]

    assert asyncio.run(main()) == [expected] * 8


def test_the_url_variable_takes_a_socket_and_a_pickled_client_reconnects(uds_server, monkeypatch):
    monkeypatch.setenv(URL_ENV, uds_server.url)
    client = TokenizerClient()
    assert client.urls == (uds_server.url,)
    first = client(TEXTS)["input_ids"]
    copy = pickle.loads(pickle.dumps(client))  # the URL travels, never a connection
    assert copy(TEXTS)["input_ids"] == first


def test_a_missing_socket_is_a_connect_error_naming_the_url(short_dir):
    url = unix_socket_url(str(short_dir / "nobody.sock"))
    request = Request("GET", url + "/info", {}, timeout=Timeout(1, 1))
    with pytest.raises(ConnectError, match="No such file"):
        HTTPTransport().handle_request(request)


# -- start-up edges ----------------------------------------------------------------------------------------
def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", "serve", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_a_stale_socket_is_replaced_and_a_live_one_refused(short_dir, uds_server):
    stale = short_dir / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(stale))
    dead.close()  # a server that died: its file stays, nothing listens
    with ServerProcess(uds=stale) as server:
        assert TokenizerClient(server.url).info()["fingerprint"]
        assert stale.stat().st_mode & 0o777 == 0o660
    assert not stale.exists()  # removed at exit
    live = serve("--uds", uds_server.uds, timeout=30)
    assert live.returncode == 1 and "a server is listening on that socket" in live.stderr, live.stderr
    assert TokenizerClient(uds_server.url).info()  # untouched
    not_a_socket = short_dir / "file.sock"
    not_a_socket.write_text("mine")
    refused = serve("--uds", str(not_a_socket), timeout=30)
    assert refused.returncode == 1 and "not a socket" in refused.stderr and not_a_socket.read_text() == "mine"


def test_too_long_a_socket_path_is_refused_before_anything_starts():
    path = "/tmp/" + "x" * (MAX_SOCKET_PATH_BYTES - 4)
    result = serve("--uds", path, timeout=30)
    assert result.returncode == 2 and f"at most {MAX_SOCKET_PATH_BYTES} bytes" in result.stderr


# -- the drain over a socket -------------------------------------------------------------------------------
def read_answer(conn: socket.socket) -> bytes:
    """One whole HTTP answer (headers and a Content-Length body: they may come in separate reads)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(
        next(line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")).split(b":")[1]
    )
    while len(body) < length:
        body += conn.recv(4096)
    return head + b"\r\n\r\n" + body


@pytest.mark.slow
def test_sigterm_removes_the_socket_first_then_answers_what_was_connected(short_dir):
    """New connections fail at once (no such file) while a connection opened before is still answered."""
    path = short_dir / "drain.sock"
    server = ServerProcess("--drain-listen-seconds", "0", uds=path).start()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.connect(str(path))
    request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
    conn.sendall(request)
    assert read_answer(conn).startswith(b"HTTP/1.1 200")
    os.kill(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not path.exists(), "the socket file outlived the start of the drain"
    with pytest.raises(ConnectError, match="No such file"):
        get(unix_socket_url(str(path)), "/healthz")
    conn.sendall(request)  # the connection accepted before the drain is answered, and told to close
    answer = read_answer(conn)
    assert answer.startswith(b"HTTP/1.1 200") and b"connection: close" in answer.lower()
    conn.close()
    assert server.proc is not None and server.proc.wait(10) == 0


# -- --owners-file -----------------------------------------------------------------------------------------
HOLDER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    print("held", flush=True)
    time.sleep(600)
""")


@pytest.mark.slow
def test_the_server_stops_once_no_process_holds_the_owners_lock(short_dir):
    owners = short_dir / "owners.lock"
    server = ServerProcess("--owners-file", str(owners), uds=short_dir / "owned.sock")
    holders = [
        subprocess.Popen([sys.executable, "-c", HOLDER, str(owners)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        for holder in holders:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        server.start()
        assert server.proc is not None
        os.kill(holders[0].pid, signal.SIGKILL)  # one owner gone, the other still there: serving on
        holders[0].wait(5)
        time.sleep(1.0)
        assert server.proc.poll() is None and TokenizerClient(server.url).info()
        os.kill(holders[1].pid, signal.SIGKILL)  # the last one gone, without a word
        holders[1].wait(5)
        assert server.proc.wait(10) == 0
        assert not (short_dir / "owned.sock").exists()
        # the server holds the lock exclusively until it exits: now nobody does
        fd = os.open(owners, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        server.stop()  # (a server that missed its owners' exit)
        for holder in holders:
            if holder.poll() is None:
                os.kill(holder.pid, signal.SIGKILL)
                holder.wait(5)


@pytest.mark.slow
def test_a_server_whose_owners_are_gone_while_loading_exits_without_serving(short_dir):
    owners = short_dir / "nobody.lock"
    owners.touch()
    started = time.monotonic()
    result = serve("--uds", str(short_dir / "unowned.sock"), "--owners-file", str(owners), timeout=60)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30 and not (short_dir / "unowned.sock").exists()


@pytest.mark.slow
def test_a_server_whose_owners_are_gone_closes_idle_connections_at_once_and_answers_those_in_flight(short_dir):
    """Nobody is left to use a private server: a forked worker's idle keep-alive connection does not hold its
    exit (here for the 60 s keep-alive, or the 30 s drain), while the requests under way are answered."""
    owners = short_dir / "drained.lock"
    held = os.open(owners, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_SH)  # this process is the owner
    path = short_dir / "private.sock"
    server = ServerProcess("--owners-file", str(owners), "--keep-alive-seconds", "60", uds=path).start()
    body = json.dumps({"texts": TEXTS}).encode()
    head = f"POST /encode HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    connections = []
    try:
        for _ in range(3):
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.settimeout(10)
            conn.connect(str(path))
            connections.append(conn)
        idle, in_body, in_headers = connections
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert read_answer(idle).startswith(b"HTTP/1.1 200")  # kept alive, now idle
        in_body.sendall(head.encode() + b"\r\n\r\n" + body[:10])  # a request whose body is arriving
        in_headers.sendall(head.encode()[:30])  # one whose headers are
        time.sleep(0.3)  # (read by the server before its owner goes)
        os.close(held)
        closed_at = time.monotonic()
        assert idle.recv(1) == b"", "an idle connection was left open"  # (timeout: 10 s)
        closed_after = time.monotonic() - closed_at
        in_body.sendall(body[10:])
        answer = read_answer(in_body)
        assert answer.startswith(b"HTTP/1.1 200") and b"connection: close" in answer.lower()
        assert b'"input_ids"' in answer
        in_headers.sendall(head.encode()[30:] + b"\r\n\r\n" + body)
        answer = read_answer(in_headers)  # begun before the drain: answered (a 503 "draining"), not cut
        assert answer.startswith(b"HTTP/1.1 ") and b"connection: close" in answer.lower()
        assert server.proc is not None and server.proc.wait(10) == 0
        print(f"idle connection closed {closed_after:.2f}s after the owner left")
    finally:
        for conn in connections:
            conn.close()
        server.stop()


# -- pretokenize over a socket -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_pretokenize_runs_over_a_socket_url_unchanged(uds_server, reference_tokenizers, tmp_path):
    """The pretokenize CLI, through its public entry point, with --url http+unix://...: the in-process ids."""
    from testkit import corpora
    from testkit.shards import input_documents, shard_documents

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    corpora.write_jsonl(corpus / "docs.jsonl", 30_000, seed=7)
    out = tmp_path / "out"
    args = [str(corpus), "--out", str(out), "--url", uds_server.url, "--format", "flat", "--progress", "none"]
    done = subprocess.run(
        [sys.executable, "-m", "service", "pretokenize", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    documents = input_documents(corpus, ["docs.jsonl"])
    expected = reference_tokenizers["wordpiece_default"]([text for text, _ in documents])["input_ids"]
    assert [ids for ids, _ in shard_documents(out)] == expected
