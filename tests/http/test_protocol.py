"""Tier 3: HTTP/1.1 at the socket against a real server -- framing, header and read limits, connections.

Raw sockets, so what the server does to the connection (answers, closes, resets) is seen as a client sees
it. Timeouts are set small on the server and waited for with a bounded read, never a sleep.
"""

from __future__ import annotations

import json
import resource
import socket
from pathlib import Path

import httpx
import pytest

from testkit.gates import wait_until
from testkit.servers import ServerProcess

BODY = json.dumps({"texts": ["hello world"]}).encode()


def encode_request(body: bytes = BODY, *extra: str, length: int | None = None) -> bytes:
    headers = ["POST /encode HTTP/1.1", "Host: x", "Content-Type: application/json", *extra]
    headers.append(f"Content-Length: {len(body) if length is None else length}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


def exchange(port: int, data: bytes, timeout: float = 30) -> list[tuple[int, dict[str, str], bytes]]:
    """Send ``data`` on one connection and read answers until the server closes it (a reset raises)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return parse_answers(received)


def parse_answers(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    answers = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", 0))
        answers.append((int(lines[0].split()[1]), headers, data[:length]))
        data = data[length:]
    return answers


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("protocol") / "server.log"
    args = ["--header-timeout-seconds", "1", "--body-timeout-seconds", "1", "--max-header-bytes", "8192"]
    with ServerProcess(*args, "--max-connections", "40", "--keep-alive-seconds", "2", log_path=log) as running:
        running.log = log
        yield running


def test_pipelined_requests_are_answered_before_a_malformed_one(server):
    """Defect: the requests pipelined ahead of a malformed one were dropped unanswered."""
    answers = exchange(server.port, encode_request() + encode_request() + b"NOT HTTP AT ALL\r\n\r\n")
    assert [status for status, _, _ in answers] == [200, 200, 400]
    assert json.loads(answers[0][2])["input_ids"] == [[2, 9746, 9660, 3]]
    assert answers[2][1]["connection"] == "close"
    assert json.loads(answers[2][2])["error_type"] == "malformed_http"


def test_bytes_past_the_content_length_get_a_400_after_the_answer(server):
    """Defect: Content-Length smaller than the body lost the answer to the request itself."""
    short = encode_request(BODY + b'{"texts": ["x"]}', length=len(BODY))
    answers = exchange(server.port, short)
    assert [status for status, _, _ in answers] == [200, 400]


def test_a_body_that_breaks_off_gets_a_400_after_the_answers_before_it_and_is_let_go_of(server):
    """A chunked body whose stream breaks (a malformed chunk): queued behind a request, it gets its 400 after that
    request's answer (never a wait for a body that cannot come); running, the app lets go of it at once, while
    the server still lingers on the connection (until this end closes)."""
    head = "POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked"
    broken = head.encode() + b'\r\n\r\n5\r\n{"tex\r\nnot a chunk\r\n'
    answers = exchange(server.port, encode_request() + broken, timeout=10)
    assert [status for status, _, _ in answers] == [200, 400]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(broken)
        status, headers, _ = parse_answers(read_until_closed(sock))[0]
        wait_until(lambda: in_flight(server.url) == 0, 1, "the broken request let go of")
    assert status == 400 and headers["connection"] == "close"


def test_upgrade_h2c_is_ignored_and_the_body_is_read(server):
    """Defect: a request with Upgrade: h2c lost its body (422 "EOF")."""
    request = encode_request(BODY, "Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAAQ")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request[: -len(BODY)])  # the headers; the body once the app waits for it
        wait_until(lambda: in_flight(server.url) == 1, 10, "the request waiting for its body")
        sock.sendall(request[-len(BODY) :] + encode_request())  # and the connection goes on with the next request
        received = b""
        while received.count(b"input_ids") < 2:
            received += sock.recv(65536)
    answers = parse_answers(received)
    assert [status for status, _, _ in answers] == [200, 200]
    assert json.loads(answers[0][2])["input_ids"] == [[2, 9746, 9660, 3]]


@pytest.mark.parametrize("in_one_read", [True, False])
def test_a_header_block_over_the_limit_is_431_and_closed(server, in_one_read):
    """Defect: a 10 MB header was accepted (and never-ending headers grew memory without bound)."""
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        if in_one_read:
            sock.sendall(head + b"a" * 20_000 + b"\r\n\r\n")
        else:  # a header that never ends: refused once the limit is passed, not when it ends
            sock.sendall(head)
            try:
                for _ in range(1000):
                    sock.sendall(b"a" * 1024)
            except (BrokenPipeError, ConnectionResetError):
                pass  # closed under our feet: the answer is already in our receive buffer
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    status, headers, body = parse_answers(received)[0]
    assert status == 431 and headers["connection"] == "close"
    assert json.loads(body)["error_type"] == "headers_too_large"


def test_an_8_mb_header_block_is_answered_431_and_the_client_reads_it(server):
    """Defect: a client sending an 8 MB header block was reset in the middle of sending it (the server
    answered 431 and closed with the rest unread), so it never read the 431. The server now closes
    lingeringly: half-close after the answer, read and drop what still comes (for a bounded time)."""
    big = "a" * (8 * 1024 * 1024)
    # httpx (h11): writes the whole request, then reads the answer -- as most clients do
    response = httpx.get(server.url + "/healthz", headers={"X-Big": big}, timeout=30)
    assert response.status_code == 431 and response.headers["connection"] == "close"
    assert response.json()["error_type"] == "headers_too_large"
    # the same at the socket: every byte sent without a reset, then the answer and a clean end (EOF)
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + big.encode() + b"\r\n\r\n")
        status, headers, _ = parse_answers(read_until_closed(sock))[0]
    assert status == 431 and headers["connection"] == "close"


def test_slow_headers_and_a_slow_body_get_408_and_are_closed(server):
    """Defect: partial headers and partial bodies were never timed out."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
        status, headers, body = parse_answers(read_until_closed(sock))[0]
    assert status == 408 and "headers" in json.loads(body)["error"]
    request = encode_request()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(request[:-5])  # the body's end never comes
        status, headers, body = parse_answers(read_until_closed(sock))[0]
        # the server lingers on its end until this one closes: the request was let go of at the 408 all the same
        wait_until(lambda: in_flight(server.url) == 0, 1, "the timed-out request let go of")
    assert status == 408 and "body" in json.loads(body)["error"]
    assert headers["connection"] == "close"


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The next whole answer on ``sock`` (headers and a Content-Length body)."""
    received = b""
    while True:
        head, end, body = received.partition(b"\r\n\r\n")
        if end and len(body) >= int(parse_answers(head + end)[0][1].get("content-length", 0)):
            return parse_answers(received)[0]
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection without answering"
        received += chunk


def in_flight(url: str) -> float:
    """HTTP requests the server is answering, not counting this scrape."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("tokenizer_http_in_flight "):
            return float(line.split()[-1]) - 1
    raise AssertionError("no tokenizer_http_in_flight in /metrics")


def test_connections_beyond_the_limit_are_refused_and_logged(tmp_path):
    """Defect: ~1,000 idle sockets exhausted the descriptors and new clients were reset without a log line."""
    log = tmp_path / "server.log"
    with ServerProcess("--max-connections", "16", "--keep-alive-seconds", "60", log_path=log) as server:
        held = []
        try:
            for _ in range(16):  # each proves it is open on the server's side with an answer
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
                held.append(sock)
            assert exchange_status(server.port) == 0, "a 17th connection was served"
            wait_until(lambda: "refused 1 connection(s): 16 open" in log.read_text(), 10, "the refusal logged")
            held.pop().close()
            wait_until(lambda: exchange_status(server.port) == 200, 10, "service once a connection went")
        finally:
            for sock in held:
                sock.close()


def exchange_status(port: int) -> int:
    try:
        return exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0][0]
    except (OSError, IndexError):  # reset, or closed without an answer
        return 0


def test_the_descriptor_soft_limit_is_raised_to_the_hard_limit(server):
    limits = Path(f"/proc/{server.pid}/limits").read_text()
    line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    assert soft == hard == str(resource.getrlimit(resource.RLIMIT_NOFILE)[1])


def test_the_log_never_holds_request_content(server):
    """Defect: a deeply nested body was answered 500 with its head and tail in the logged traceback."""
    secret = "SECRET-TEXT-" * 3
    nested = ("[" * 1000 + f'"{secret}"').encode()
    for path in ("/encode", "/tokenize", "/decode"):
        status, _, body = exchange(
            server.port, encode_request(nested, "Connection: close").replace(b"/encode", path.encode())
        )[0]
        assert status == 422, body
    status, _, _ = exchange(server.port, encode_request(b"\x00" * 10 + secret.encode(), "Connection: close"))[0]
    assert status == 422
    assert secret not in server.log.read_text()


class _FirstUploadStalls:
    """The client's transport, except that its first request stops halfway through the body -- a DataLoader
    worker paused mid-upload, or a stalled network -- and waits for whatever the server answers; every later
    request goes through the real stdlib transport."""

    def __init__(self) -> None:
        from service.client import HTTPTransport

        self.real = HTTPTransport()
        self.stalled_answers: list[int] = []

    def handle_request(self, request):
        from urllib.parse import urlsplit

        from service.client import Response

        if self.stalled_answers:
            return self.real.handle_request(request)
        url = urlsplit(request.url)
        head = [f"{request.method} {url.path} HTTP/1.1", f"Host: {url.netloc}"]
        head += [f"{name}: {value}" for name, value in request.headers.items()]
        head.append(f"Content-Length: {len(request.body)}")
        with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + request.body[: len(request.body) // 2])
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        status, headers, body = parse_answers(received)[0]
        self.stalled_answers.append(status)
        return Response(status, headers, body)

    def close(self) -> None:
        self.real.close()


def test_a_request_whose_upload_stalled_gets_408_and_the_client_sends_it_again(server):
    """The server runs nothing for a body that stopped arriving (408, closed); the SDK repeats the request
    (RFC 9110 allows it) and the call succeeds, instead of failing a training step on a transient stall."""
    from service.client import RequestTimeout, RetriesExhausted, RetryPolicy, TokenizerClient

    transport = _FirstUploadStalls()
    with TokenizerClient(server.url, transport=transport) as client:
        assert client(["hello world"])["input_ids"] == [[2, 9746, 9660, 3]]
    assert transport.stalled_answers == [408]

    once = _FirstUploadStalls()
    with TokenizerClient(server.url, transport=once, retry=RetryPolicy(max_attempts=1)) as client:
        with pytest.raises(RetriesExhausted) as info:
            client(["hello world"])
    assert isinstance(info.value.last_error, RequestTimeout) and info.value.last_error.status == 408
    assert "body did not arrive within 1s" in info.value.last_error.error


@pytest.fixture(scope="module")
def paced_server(tmp_path_factory):
    """Deadlines ordered so that each can be seen alone: the body deadline (0.3 s) < the keep-alive timeout (2 s) <
    the header deadline (5 s); and a lone encode waits 1 s for others to batch with, longer than the body deadline."""
    log = tmp_path_factory.mktemp("paced") / "server.log"
    args = ["--header-timeout-seconds", "5", "--body-timeout-seconds", "0.3", "--keep-alive-seconds", "2"]
    with ServerProcess(*args, "--batch-wait-ms", "1000", log_path=log) as running:
        running.log = log
        yield running


def test_the_keep_alive_timeout_and_the_read_deadlines_each_time_only_their_own_wait(paced_server):
    """An idle keep-alive connection is not held to the body deadline of the request before it (no 408 while
    idle), a request that begins to arrive stops the keep-alive timer (it is not cut when the timer would have
    fired), and an idle connection is closed cleanly at its keep-alive timeout."""
    with socket.create_connection(("127.0.0.1", paced_server.port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_answer(sock)[0] == 200
        sock.settimeout(1.2)  # idle past the body deadline, within the keep-alive timeout
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a request begins, and is slow to finish
        sock.settimeout(1.5)  # past the keep-alive timeout (2 s after the answer), within the header deadline
        with pytest.raises(TimeoutError):
            sock.recv(65536)
        sock.sendall(b"\r\n")
        sock.settimeout(30)
        assert read_answer(sock)[0] == 200
        assert sock.recv(65536) == b""  # idle again: closed at the keep-alive timeout, cleanly


def test_the_body_deadline_counts_from_the_end_of_the_headers(paced_server):
    """A body that stops arriving gets its 408 at the body deadline (0.3 s after the headers here), not at the
    header deadline (5 s after the request's first byte)."""
    with socket.create_connection(("127.0.0.1", paced_server.port), timeout=3) as sock:
        sock.sendall(encode_request()[:-5])  # the body's end never comes
        status, _, body = parse_answers(read_until_closed(sock))[0]  # (a TimeoutError after 3 s)
    assert status == 408 and "the request's body did not arrive within 0.3s" in json.loads(body)["error"]


def test_a_request_queued_behind_a_slower_one_is_not_timed_out_while_the_server_is_not_reading(paced_server):
    """Pipelined behind a request that takes longer than the body deadline (a lone encode waits 1 s for a batch),
    a request whose body the server has not read yet -- it stops reading a connection while the request before is
    answered -- gets its answer, not a 408: only the time the client itself is slow counts."""
    queued = encode_request(BODY + b" " * 1_000_000, "Connection: close")  # JSON allows the spaces: many reads
    answers = exchange(paced_server.port, encode_request() + queued)
    assert [status for status, _, _ in answers] == [200, 200]
    assert json.loads(answers[1][2])["input_ids"] == [[2, 9746, 9660, 3]]


def test_a_client_that_reads_nothing_of_a_large_answer_is_cut_after_the_body_deadline(paced_server):
    """A client that stops reading its answer (12 MB, more than the socket buffers hold) would hold its
    connection, and the answer's memory, for ever: once the answer has not moved for the body deadline, the
    connection is closed."""
    options = {"padding": "max_length", "max_length": 1000, "truncation": True}
    request = encode_request(json.dumps({"texts": ["hello"] * 2000, **options}).encode())
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
        sock.settimeout(30)
        sock.connect(("127.0.0.1", paced_server.port))
        sock.sendall(request)
        said = "closed a connection: its client read nothing of its answer for 0.3s"
        wait_until(lambda: said in paced_server.log.read_text(), 20, "the stalled answer cut")
        received = b""
        try:
            while chunk := sock.recv(1 << 20):
                received += chunk
        except ConnectionResetError:
            pass
    status, headers, body = parse_answers(received)[0]
    length = int(headers["content-length"])
    assert status == 200 and length > 10_000_000 and len(body) < length
