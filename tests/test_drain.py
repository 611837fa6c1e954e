"""Graceful drain of a real server: SIGTERM under load loses no in-flight request.

The requests are held in flight by their own clients (headers sent, body not finished), so "in flight
when the signal arrives" is a state the test sets, not a guess about how long an encode takes.
"""

from __future__ import annotations

import json
import signal
import socket
import time

import httpx
import pytest
from gates import wait_until

from testkit.servers import ServerProcess


def in_flight(url: str) -> float:
    """HTTP requests the server is answering, not counting this scrape."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("tokenizer_http_in_flight "):
            return float(line.split()[-1]) - 1
    raise AssertionError("no tokenizer_http_in_flight in /metrics")


def ready_status(url: str) -> int:
    return httpx.get(url + "/readyz", timeout=5).status_code


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
def test_sigterm_under_load_completes_in_flight_requests_then_exits_cleanly(corpus, reference_tokenizers):
    texts = corpus["zh"][:50]
    with ServerProcess("--graceful-shutdown-seconds", "30") as server:
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
        assert server.proc.poll() is None, "the server exited before its in-flight requests completed"

        reference = reference_tokenizers["wordpiece_default"]
        for i, request in enumerate(held):
            status, body = request.finish()
            assert status == 200, body
            assert json.loads(body)["input_ids"] == reference(texts[i:] + texts[:i])["input_ids"]
        assert server.proc.wait(35) == 0
        assert time.monotonic() - sent_at < 30


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
