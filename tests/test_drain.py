"""Graceful drain of a real server: SIGTERM under load loses no in-flight request."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from testkit.servers import ServerProcess


@pytest.mark.timeout(120)
def test_sigterm_under_load_completes_in_flight_requests_then_exits_cleanly(corpus):
    texts = (corpus["en"] * 4)[:1500]
    with ServerProcess("--threads", "1", "--graceful-shutdown-seconds", "20") as server:
        results: list = []

        def client(i: int) -> None:
            with httpx.Client(timeout=60) as http:
                response = http.post(server.url + "/encode", json={"texts": texts[i:] + texts[:i], "padding": True})
                results.append(response.status_code)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)  # requests are in flight (one encoding, the rest queued)
        sent_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.1)

        # readiness turns 503 at once, and new work is refused politely, while the in-flight finish
        ready = httpx.get(server.url + "/readyz", timeout=5)
        assert ready.status_code == 503 and "draining" in ready.json()["error"]
        refused = httpx.post(server.url + "/encode", json={"texts": ["new work"]}, timeout=5)
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert refused.json()["error_type"] == "unavailable"
        assert server.proc.poll() is None, "the server exited before its in-flight requests completed"

        for thread in threads:
            thread.join(60)
        assert results == [200] * 6, results
        assert server.proc.wait(25) == 0
        assert time.monotonic() - sent_at < 20


@pytest.mark.timeout(60)
def test_drain_gives_up_after_the_grace_period():
    huge = {"texts": ["slow " * 2000] * 4000, "padding": True}
    with ServerProcess("--threads", "1", "--graceful-shutdown-seconds", "1", "--max-text-chars", "20000") as server:
        outcome: list = []

        def cut_short() -> None:
            try:
                outcome.append(httpx.post(server.url + "/encode", json=huge, timeout=60).status_code)
            except httpx.HTTPError as exc:  # expected: the server gave up on it
                outcome.append(type(exc).__name__)

        thread = threading.Thread(target=cut_short)
        thread.start()
        time.sleep(0.5)
        sent_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 1  # gave up: exit code says work was cut short
        assert time.monotonic() - sent_at < 5
        thread.join(60)
        assert outcome == ["RemoteProtocolError"]
