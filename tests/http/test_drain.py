"""Graceful drain of a real server: SIGTERM under load loses no request that reached the server.

The requests are held in flight by their own clients (headers sent, body not finished), so "in flight
when the signal arrives" is a state the test sets, not a guess about how long an encode takes. Clients
speak raw HTTP/1.1 over sockets, so every close and reset the server causes is seen as a client sees it.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from testkit.gates import wait_until
from testkit.servers import REPO, ServerProcess, free_port
from testkit.venvs import linked_venv

pytestmark = pytest.mark.slow  # every test starts, loads and signals a server of its own


def in_flight(url: str) -> float:
    """HTTP requests the server is answering, not counting this scrape."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("tokenizer_http_in_flight "):
            return float(line.split()[-1]) - 1
    raise AssertionError("no tokenizer_http_in_flight in /metrics")


def ready_status(url: str) -> int:
    return httpx.get(url + "/readyz", timeout=5).status_code


def listening(port: int) -> bool:
    """Whether the server still accepts connections (each probe closed at once, so it holds none)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except ConnectionRefusedError:
        return False
    except TimeoutError:  # the handshake was dropped: the listener is closing
        pass
    return True


class HeldRequest:
    """A POST /encode whose client has sent the headers and half the body, and finishes when told to."""

    def __init__(self, port: int, texts: list[str]) -> None:
        self.body = json.dumps({"texts": texts}).encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        head = f"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(self.body)}"
        self.sock.sendall(head.encode() + b"\r\n\r\n" + self.body[: len(self.body) // 2])

    def finish(self) -> tuple[int, bytes]:
        """Send the rest of the body; return the status and body of the answer."""
        self.sock.sendall(self.body[len(self.body) // 2 :])
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(line.split(":")[1]) for line in lines if line.lower().startswith("content-length"))
        while len(rest) < length:
            rest += self._recv()
        self.sock.close()
        return int(lines[0].split()[1]), rest

    def _recv(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection without answering")
        return chunk


@pytest.mark.timeout(120)
def test_sigterm_under_load_completes_in_flight_requests_then_exits_cleanly(corpus, reference_tokenizers, tmp_path):
    texts = corpus["zh"][:50]
    log = tmp_path / "server.log"
    with ServerProcess("--graceful-shutdown-seconds", "30", log_path=log) as server:
        held = [HeldRequest(server.port, texts[i:] + texts[:i]) for i in range(6)]
        wait_until(lambda: in_flight(server.url) == 6, 30, "six requests in flight")
        sent_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)

        # readiness turns 503 at once, and new work is refused politely, while the in-flight ones are held
        wait_until(lambda: ready_status(server.url) == 503, 10, "readiness 503 after SIGTERM")
        assert "draining" in httpx.get(server.url + "/readyz", timeout=5).json()["error"]
        refused = httpx.post(server.url + "/encode", json={"texts": ["new work"]}, timeout=5)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert refused.json()["error_type"] == "unavailable"
        # refused before its body is read, and its connection closed: a client still sending its 4 MB is not
        # reset (the server reads and drops the rest before it closes) and reads the 503
        late = KeepAliveClient(server.port)
        late.send([" " * (4 << 20)])
        status, headers, _ = late.response()
        assert status == 503 and headers["connection"] == "close" and late.closed_by_server()
        # two requests pipelined: the first is refused and closes the connection; the second is never served
        # (its answer would come after the connection's end: an error in the log)
        body = json.dumps({"texts": ["pipelined"]}).encode()
        request = f"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        pipelined = KeepAliveClient(server.port)
        pipelined.sock.sendall(request * 2)
        status, headers, _ = pipelined.response()
        assert status == 503 and headers["connection"] == "close" and pipelined.closed_by_server()
        assert server.proc.poll() is None, "the server exited before its in-flight requests completed"

        reference = reference_tokenizers["wordpiece_default"]
        for i, request in enumerate(held):
            status, body = request.finish()
            assert status == 200, body
            assert json.loads(body)["input_ids"] == reference(texts[i:] + texts[:i])["input_ids"]
        assert server.proc.wait(35) == 0
        assert time.monotonic() - sent_at < 30
    assert "Traceback" not in log.read_text()


@pytest.mark.timeout(60)
def test_drain_gives_up_after_the_grace_period():
    with ServerProcess("--graceful-shutdown-seconds", "1") as server:
        stuck = HeldRequest(server.port, ["never finished"])  # its client never sends the rest
        wait_until(lambda: in_flight(server.url) == 1, 30, "the request in flight")
        sent_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 1  # gave up: the exit code says work was cut short
        assert time.monotonic() - sent_at < 5
        with pytest.raises(OSError):
            stuck.finish()


class KeepAliveClient:
    """One keep-alive connection speaking raw HTTP/1.1, so every close and reset the server causes is seen."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buffer = b""

    def send(self, texts: list[str], *, hold: bool = False) -> bytes:
        """Send a POST /encode; with ``hold``, only its headers and half its body (finish with the rest)."""
        body = json.dumps({"texts": texts}).encode()
        head = f"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
        request = head.encode() + b"\r\n\r\n" + body
        cut = len(request) - len(body) // 2 if hold else len(request)
        self.sock.sendall(request[:cut])
        return request[cut:]

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """The next answer on this connection (raises ConnectionResetError on a reset)."""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self._recv()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            self.buffer += self._recv()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), headers, body

    def closed_by_server(self) -> bool:
        """Whether the server closed this connection cleanly (EOF, never a reset)."""
        return self._recv(allow_eof=True) == b""

    def _recv(self, allow_eof: bool = False) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk and not allow_eof:
            raise ConnectionError("the server closed the connection without answering")
        return chunk


@pytest.mark.timeout(120)
def test_sigterm_under_32_keep_alive_clients_loses_no_request(corpus):
    """32 keep-alive clients: 16 hold a request in flight at SIGTERM, 16 are idle between requests. Every
    request is answered -- 200, or 503 + Retry-After -- each answer after the signal carries Connection:
    close, every connection is closed by the server between requests (EOF, never a reset), and the
    process exits 0 once none is left."""
    texts = corpus["zh"][:8]
    args = ("--graceful-shutdown-seconds", "30", "--keep-alive-seconds", "60")
    with ServerProcess(*args) as server:
        clients = [KeepAliveClient(server.port) for _ in range(32)]
        for client in clients:  # a first request each: every connection is a live keep-alive one
            client.send(texts)
            status, headers, _ = client.response()
            assert status == 200 and headers.get("connection") != "close"
        busy, idle = clients[:16], clients[16:]
        rests = [client.send(texts, hold=True) for client in busy]
        wait_until(lambda: in_flight(server.url) == 16, 30, "16 requests in flight")
        server.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: ready_status(server.url) == 503, 10, "readiness 503 after SIGTERM")

        answers = []
        for client, rest in zip(busy, rests, strict=True):  # in flight at the signal: answered in full
            client.sock.sendall(rest)
            answers.append(client.response())
        # nothing in flight any more, and the listener closes (after its window): the idle connections stay open
        wait_until(lambda: not listening(server.port), 30, "the listener closed")
        for client in idle:  # idle at the signal: the next request is refused politely, not cut
            client.send(texts)
            answers.append(client.response())
        for status, headers, body in answers[:16]:
            assert status in (200, 503), body
            assert headers["connection"] == "close"
        for status, headers, body in answers[16:]:
            assert status == 503, body
            assert headers["retry-after"] == "1" and headers["connection"] == "close"
            assert json.loads(body)["error_type"] == "unavailable"
        assert [status for status, _, _ in answers[:16]].count(200) == 16, "in-flight requests complete"
        for client in clients:
            assert client.closed_by_server()  # EOF after the closing answer; a reset would raise here
        assert server.proc.wait(35) == 0


class ReconnectingClient(threading.Thread):
    """A client that keeps sending: one request after another on a keep-alive connection, and a new
    connection after every ``Connection: close`` answer, until its connection is refused (the listener has
    closed: a client fails over to another replica) or ``stop_at``. Every outcome is counted in ``tally``:
    statuses, 503s without Retry-After, resets and answers lost (EOF) of requests it had sent."""

    def __init__(self, port: int, tally: collections.Counter[object], lock: threading.Lock, stop_at: float) -> None:
        super().__init__(daemon=True)
        self.port, self.tally, self.lock, self.stop_at = port, tally, lock, stop_at
        body = json.dumps({"texts": ["hello world"]}).encode()
        head = f"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
        self.request = head.encode() + b"\r\n\r\n" + body

    def count(self, outcome: object) -> None:
        with self.lock:
            self.tally[outcome] += 1

    def run(self) -> None:
        while time.monotonic() < self.stop_at:
            try:
                client = KeepAliveClient(self.port)
            except ConnectionRefusedError:
                self.count("refused")
                return
            with client.sock:
                client.sock.settimeout(10)
                while time.monotonic() < self.stop_at:
                    try:
                        client.sock.sendall(self.request)
                        status, headers, _ = client.response()
                    except ConnectionResetError:
                        self.count("reset")
                        break
                    except (ConnectionError, OSError) as exc:  # EOF before the answer, broken pipe, timeout
                        self.count(f"lost: {type(exc).__name__}")
                        break
                    self.count(status)
                    if status == 503 and headers.get("retry-after") != "1":
                        self.count("503 without Retry-After: 1")
                    if headers.get("connection") == "close":
                        break


@pytest.mark.timeout(120)
def test_sigterm_under_32_reconnecting_clients_resets_nothing_and_exits_in_seconds():
    """32 clients keep sending, each reconnecting after every Connection: close answer. After SIGTERM the
    server answers 503 + Retry-After for the listen window, then closes its listener: every client is
    refused a new connection, every request sent on a connection is answered (200 or 503, never reset),
    and the process exits 0 seconds after the signal, not at the grace deadline."""
    grace, window = 30, 1
    args = ("--graceful-shutdown-seconds", str(grace), "--drain-listen-seconds", str(window))
    with ServerProcess(*args) as server:
        tally: collections.Counter[object] = collections.Counter()
        lock = threading.Lock()
        clients = [ReconnectingClient(server.port, tally, lock, time.monotonic() + 90) for _ in range(32)]
        for client in clients:
            client.start()
        wait_until(lambda: tally[200] >= 320, 30, "the clients sending")
        sent_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(grace) == 0
        exited_after = time.monotonic() - sent_at
        for client in clients:
            client.join(30)
    outcomes = dict(tally)
    assert set(outcomes) == {200, 503, "refused"}, outcomes  # no reset, no lost answer, nothing else
    assert outcomes["refused"] == 32, outcomes  # the listener closed: every client failed over
    assert outcomes[503] >= 32, outcomes  # new requests were refused politely for the window
    assert exited_after < window + 10, f"exited {exited_after:.1f}s after SIGTERM (window {window}s, grace {grace}s)"


@pytest.mark.timeout(60)
def test_connections_waiting_in_the_accept_queue_when_the_listener_closes_are_answered():
    """The race between accept() and closing the listener, made certain: the server is stopped (SIGSTOP)
    while 16 clients connect -- the kernel completes their handshakes into the accept queue -- and send a
    request; then it gets SIGTERM and resumes, with no listen window, so it closes its listener at once.
    Closing a listening socket resets the connections left in its queue: each must be accepted and
    answered first. A connection attempted after the close is refused."""
    with ServerProcess("--drain-listen-seconds", "0") as server:
        os.kill(server.pid, signal.SIGSTOP)
        try:
            queued = [KeepAliveClient(server.port) for _ in range(16)]
            for client in queued:
                client.send(["queued while the server was stopped"])
            os.kill(server.pid, signal.SIGTERM)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        answers = [client.response() for client in queued]  # a reset raises ConnectionResetError here
        assert server.proc.wait(30) == 0
        with pytest.raises(ConnectionRefusedError):
            KeepAliveClient(server.port)
    for status, headers, _ in answers:
        assert status in (200, 503) and headers["connection"] == "close"
        assert status == 200 or headers["retry-after"] == "1"


def test_the_runtime_is_the_one_owner_of_the_draining_state():
    """Draining was owned three times (engine, runtime, connection guard): the runtime owns it, the guard
    and readiness ask it, and the engine has no drain of its own (it refuses work only once stopped)."""
    from service.engine import Engine
    from service.http.runtime import Runtime
    from service.http.server.protocol import ConnectionGuard
    from service.http.settings import Settings

    runtime = Runtime(Settings())
    guard = ConnectionGuard(
        max_header_bytes=8192, header_timeout=1, body_timeout=1, max_connections=8, keep_alive=1, drain_state=runtime
    )
    assert not runtime.draining and not guard.draining
    runtime.begin_drain()
    assert runtime.draining and guard.draining and runtime.not_ready_reason() == "draining"
    assert not hasattr(guard, "begin_drain") and not hasattr(Engine, "begin_drain") and not hasattr(Engine, "draining")


@pytest.mark.timeout(30)
def test_a_listener_refusing_new_handshakes_completes_none_and_keeps_its_queue():
    """The first step of closing a listener (service.http.server.listening): from the moment the filter is on, no
    new connection completes -- the client's connect waits, and is refused once the socket closes -- while
    a connection already completed stays in the accept queue, counted, to be accepted and answered."""
    from service.http.server.listening import accept_queue_length, refuse_new_handshakes

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        address = listener.getsockname()
        early = socket.create_connection(address, timeout=5)
        assert refuse_new_handshakes(listener)
        with pytest.raises(TimeoutError):  # the SYN was dropped: no connection, nothing sent
            socket.create_connection(address, timeout=0.5)
        assert accept_queue_length(listener) == 1
        accepted, _ = listener.accept()
        assert accept_queue_length(listener) == 0
        accepted.close()
        early.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=5)


@pytest.mark.timeout(60)
def test_a_connection_that_never_sends_does_not_hold_the_drain():
    """A client that connects and never sends, before the drain or while the listener is still open during it:
    its connection is closed once silent for the keep-alive timeout (uvicorn times out only connections that had
    an answer), cleanly (EOF), and the process exits long before the grace deadline."""
    args = ("--graceful-shutdown-seconds", "30", "--drain-listen-seconds", "2", "--keep-alive-seconds", "1")
    with ServerProcess(*args) as server:
        silent = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200  # accepted after the silent one
        sent_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: ready_status(server.url) == 503, 10, "readiness 503 after SIGTERM")
        late = socket.create_connection(("127.0.0.1", server.port), timeout=20)  # accepted while draining
        assert silent.recv(1) == b"" and late.recv(1) == b""  # closed by the server, cleanly
        assert server.proc.wait(20) == 0
        assert time.monotonic() - sent_at < 10
        silent.close()
        late.close()


# -- Ctrl-C at a terminal ---------------------------------------------------------------------------------
def start_in_a_terminal(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """``argv`` as a terminal's foreground job: a process group of its own (a terminal's Ctrl-C signals the
    whole group), SIGINT at its default (a shell that starts jobs in the background would have it ignored)."""
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["tokenizer-service serve", "make serve"])
def test_ctrl_c_drains_as_sigterm_does_without_a_traceback(command, tmp_path):
    """Defect: Ctrl-C on `tokenizer-service serve` (and `make serve`) printed a 28-line KeyboardInterrupt
    traceback and no "drained" line, while getting-started says Ctrl-C drains. SIGINT to the process group,
    as a terminal sends it, with a request in flight: it is answered, the drain is said, the exit is clean."""
    port = free_port()
    env = {**os.environ, "TOKENIZER_SERVICE_PORT": str(port), "PYTHONPATH": str(REPO)}  # this checkout's service
    if command == "make serve":
        venv = linked_venv(tmp_path / "venv", cwd=REPO, targets=("serve",))  # this one: make sets up nothing
        argv = ["make", "--no-print-directory", "serve", f"VENV={venv}"]
    else:
        argv = [sys.executable, "-m", "service", "serve"]
    proc = start_in_a_terminal(argv, env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(url), 60, "the server ready")
        held = HeldRequest(port, ["今天天气很好"] * 8)
        wait_until(lambda: in_flight(url) >= 1, 10, "the request in flight")
        os.killpg(proc.pid, signal.SIGINT)
        wait_until(lambda: ready_status(url) == 503, 10, "readiness 503 after Ctrl-C")
        assert held.finish()[0] == 200
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "SIGINT (Ctrl-C): draining 1 in-flight request(s)" in output, output
    assert "drained in " in output, output
    # make dies of the SIGINT it got too, once its child has exited: the shell shows 130 for both
    assert proc.returncode in ((0, 130) if command != "make serve" else (0, 130, -signal.SIGINT)), output


def _answers(url: str) -> bool:
    try:
        return ready_status(url) == 200
    except httpx.HTTPError:
        return False


@pytest.mark.timeout(60)
def test_ctrl_c_while_the_tokenizer_loads_is_one_line_and_exit_130():
    """Before the server takes the signal over (loading the tokenizer takes seconds, a hub download minutes),
    Ctrl-C is a KeyboardInterrupt: one line saying nothing was served, not its traceback."""
    env = {**os.environ, "TOKENIZER_SERVICE_PORT": str(free_port()), "PYTHONPATH": str(REPO)}
    proc = start_in_a_terminal([sys.executable, "-m", "service", "serve"], env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "loading the embedded default tokenizer" in first, first
        os.killpg(proc.pid, signal.SIGINT)  # the tokenizer takes ~2 s to load: this lands while it does
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    assert output.splitlines() == ["tokenizer-service serve: interrupted (Ctrl-C) before serving; nothing was served"]
    assert proc.returncode == 130


@pytest.mark.timeout(60)
def test_a_second_ctrl_c_while_draining_stops_at_once_saying_what_is_left():
    port = free_port()
    env = {**os.environ, "TOKENIZER_SERVICE_PORT": str(port), "PYTHONPATH": str(REPO)}
    proc = start_in_a_terminal([sys.executable, "-m", "service", "serve", "--graceful-shutdown-seconds", "30"], env)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _answers(url), 60, "the server ready")
        held = HeldRequest(port, ["今天天气很好"])
        wait_until(lambda: in_flight(url) >= 1, 10, "the request in flight")
        os.killpg(proc.pid, signal.SIGINT)
        wait_until(lambda: ready_status(url) == 503, 10, "readiness 503 after Ctrl-C")
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=10)  # not the 30 s of the grace period
        held.sock.close()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    assert "SIGINT (Ctrl-C) again: stopping now, 1 request(s) unanswered" in output, output
    assert "Traceback" not in output and proc.returncode == 130, output
