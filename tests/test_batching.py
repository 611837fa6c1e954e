"""The micro-batcher alone (engine tier), then backpressure and disconnects against a real server."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest

from testkit.servers import ServerProcess
from service.engine.batching import Batcher, BatchingConfig, Job
from service.engine.encoding import RustCall
from service.engine.errors import ErrorKind, ServiceError


def key(truncation=None, add_special_tokens=True) -> RustCall:
    return RustCall(truncation, add_special_tokens, False)


class Recorder:
    """A run_batch that records each batch and waits for the test to open its gate."""

    def __init__(self) -> None:
        self.batches: list[list[Job]] = []
        self.gate = asyncio.Event()
        self.dropped = 0
        self.rejected: list[str] = []

    async def run_batch(self, batch):
        self.batches.append(batch)
        await self.gate.wait()
        return [f"result:{job.payload}" for job in batch]

    # BatchObserver
    def batch_done(self, requests, texts, seconds): pass
    def request_rejected(self, reason): self.rejected.append(reason)
    def request_dropped(self): self.dropped += 1
    def queue_changed(self, requests, texts): pass


def work(text: str, batch_key: RustCall | None = key()) -> Job:
    return Job(text, 1, len(text), batch_key, asyncio.get_running_loop().create_future())


async def started(config: BatchingConfig):
    recorder = Recorder()
    batcher = Batcher(config, recorder.run_batch, recorder)
    batcher.start()
    return batcher, recorder


async def settle():
    for _ in range(20):
        await asyncio.sleep(0)


def test_waiting_requests_are_coalesced_by_key_in_fifo_order():
    async def scenario():
        batcher, rec = await started(BatchingConfig(max_wait_seconds=0))
        first = asyncio.ensure_future(batcher.submit(work("a")))
        await settle()  # "a" is running alone; the next ones queue up behind it
        other_key = key(add_special_tokens=False)
        rest = [asyncio.ensure_future(batcher.submit(work(t, other_key if t == "x" else key())))
                for t in ("b", "x", "c", "d")]
        await settle()
        rec.gate.set()
        results = await asyncio.gather(first, *rest)
        await batcher.stop()
        return rec, results

    rec, results = asyncio.run(scenario())
    assert results == ["result:a", "result:b", "result:x", "result:c", "result:d"]
    assert [[job.payload for job in b] for b in rec.batches] == [["a"], ["b", "c", "d"], ["x"]]


def test_batches_respect_the_text_cap_and_batching_can_be_switched_off():
    async def scenario(config):
        batcher, rec = await started(config)
        futures = [asyncio.ensure_future(batcher.submit(work(str(i)))) for i in range(7)]
        await settle()
        rec.gate.set()
        await asyncio.gather(*futures)
        await batcher.stop()
        return [len(b) for b in rec.batches]

    assert max(asyncio.run(scenario(BatchingConfig(max_wait_seconds=0.01, max_batch_texts=3)))) == 3
    assert asyncio.run(scenario(BatchingConfig(enabled=False))) == [1] * 7


def test_a_request_whose_caller_left_is_dropped_before_it_is_encoded():
    async def scenario():
        batcher, rec = await started(BatchingConfig(max_wait_seconds=0))
        busy = asyncio.ensure_future(batcher.submit(work("busy")))
        await settle()
        gone = asyncio.ensure_future(batcher.submit(work("gone")))
        stays = asyncio.ensure_future(batcher.submit(work("stays")))
        await settle()
        gone.cancel()
        await settle()
        rec.gate.set()
        await asyncio.gather(busy, stays)
        await batcher.stop()
        return rec

    rec = asyncio.run(scenario())
    encoded = [job.payload for b in rec.batches for job in b]
    assert "gone" not in encoded and "stays" in encoded
    assert rec.dropped == 1


def test_full_queue_refuses_at_once_with_retry_after():
    async def scenario():
        batcher, rec = await started(BatchingConfig(max_wait_seconds=0, max_queued_requests=2))
        running = asyncio.ensure_future(batcher.submit(work("running")))
        await settle()
        queued = [asyncio.ensure_future(batcher.submit(work(f"q{i}"))) for i in range(2)]
        await settle()
        with pytest.raises(ServiceError) as refused:
            await batcher.submit(work("one too many"))
        rec.gate.set()
        await asyncio.gather(running, *queued)
        await batcher.stop()
        return refused.value, rec

    error, rec = asyncio.run(scenario())
    assert error.kind is ErrorKind.OVERLOADED and error.retry_after == 1.0
    assert rec.rejected == ["queue_full"]


def test_withdrawn_requests_leave_the_queue_at_once():
    async def scenario():
        batcher, rec = await started(BatchingConfig(max_wait_seconds=0, max_queued_requests=2))
        running = asyncio.ensure_future(batcher.submit(work("running")))
        await settle()
        gone = [batcher.submit(work(f"gone{i}")) for i in range(2)]
        for future in gone:
            future.cancel()
        await settle()
        accepted = batcher.submit(work("room again"))  # would be 429 if the cancelled ones still counted
        rec.gate.set()
        results = await asyncio.gather(running, accepted)
        await batcher.stop()
        return results, rec

    results, rec = asyncio.run(scenario())
    assert results == ["result:running", "result:room again"]
    assert rec.dropped == 2


def test_a_request_waiting_past_the_deadline_times_out():
    async def scenario():
        batcher, rec = await started(BatchingConfig(max_wait_seconds=0, queue_timeout_seconds=0.05))
        stuck = asyncio.ensure_future(batcher.submit(work("holds the engine")))
        await settle()
        with pytest.raises(ServiceError) as late:
            await batcher.submit(work("waits too long"))
        rec.gate.set()
        in_flight = await stuck  # past the deadline too, but already being encoded: it completes
        await batcher.stop()
        return late.value, in_flight

    late, in_flight = asyncio.run(scenario())
    assert late.kind is ErrorKind.TIMEOUT
    assert in_flight == "result:holds the engine"


def test_stop_fails_waiting_requests_instead_of_hanging():
    async def scenario():
        batcher, rec = await started(BatchingConfig(max_wait_seconds=0))
        running = asyncio.ensure_future(batcher.submit(work("running")))
        await settle()
        waiting = asyncio.ensure_future(batcher.submit(work("waiting")))
        await settle()
        await batcher.stop()
        return await asyncio.gather(running, waiting, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, ServiceError) and o.kind is ErrorKind.UNAVAILABLE for o in outcomes)


# -- against a real server --------------------------------------------------------------------------------

HEAVY = {"texts": ["The quick brown fox jumps over the lazy dog. " * 90] * 4000, "padding": True}


def occupy(url: str, seconds_box: list) -> threading.Thread:
    """Keep the server's engine busy with one heavy request (~1 s with one Rust thread)."""
    def run():
        started_at = time.monotonic()
        httpx.post(url + "/encode", json=HEAVY, timeout=120)
        seconds_box.append(time.monotonic() - started_at)
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.timeout(120)
def test_real_server_backpressure_deadline_and_disconnect():
    with ServerProcess("--threads", "1", "--max-queued-requests", "1", "--queue-timeout-seconds", "0.3",
                       "--max-text-chars", "10000") as server:
        url = server.url
        # a lone small request is fine
        assert httpx.post(url + "/encode", json={"texts": ["hi"]}).status_code == 200

        # 1. queue full -> 429 with Retry-After, at once
        took: list = []
        heavy = occupy(url, took)
        time.sleep(0.15)
        with httpx.Client(timeout=30) as http:
            first = threading.Thread(target=lambda: http.post(url + "/encode", json={"texts": ["queued"]}))
            first.start()
            time.sleep(0.05)
            t0 = time.monotonic()
            refused = http.post(url + "/encode", json={"texts": ["refused"]})
            refused_after = time.monotonic() - t0
            first.join()
        heavy.join()
        assert took and took[0] > 0.5, f"the heavy request took only {took}s: test premise broken"
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error_type"] == "overloaded"
        assert refused_after < 0.2

        # 2. a request that waits past --queue-timeout-seconds gets 504, not a hang
        heavy = occupy(url, took)
        time.sleep(0.15)
        late = httpx.post(url + "/encode", json={"texts": ["late"]}, timeout=30)
        heavy.join()
        assert late.status_code == 504, late.text
        assert late.json()["error_type"] == "timeout"

        # 3. a client that disconnects while queued is dropped before its encode
        dropped_before = metric(url, "tokenizer_dropped_total")
        heavy = occupy(url, took)
        time.sleep(0.15)
        body = b'{"texts": ["nobody waits for me"]}'
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            time.sleep(0.05)
        heavy.join()
        time.sleep(0.2)
        assert metric(url, "tokenizer_dropped_total") == dropped_before + 1
        assert metric(url, 'tokenizer_rejected_total{reason="queue_full"}') >= 1
        assert httpx.get(url + "/readyz").status_code == 200
