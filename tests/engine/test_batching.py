"""The micro-batcher alone (engine tier), then backpressure and disconnects against a real server."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import httpx
import pytest

from service.engine.batching import Batcher, BatchingConfig, Job
from service.engine.encoding import RustCall
from service.engine.errors import ErrorKind, ServiceError
from testkit.gates import HOLD, Gate, in_thread_server, wait_until


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
    def batch_done(self, requests, texts, seconds):
        pass

    def request_rejected(self, reason):
        self.rejected.append(reason)

    def request_dropped(self):
        self.dropped += 1

    def queue_changed(self, requests, texts):
        pass


DEFAULT_KEY = key()


def work(text: str, batch_key: RustCall | None = DEFAULT_KEY) -> Job:
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
        rest = [
            asyncio.ensure_future(batcher.submit(work(t, other_key if t == "x" else key())))
            for t in ("b", "x", "c", "d")
        ]
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
        batcher, _rec = await started(BatchingConfig(max_wait_seconds=0))
        running = asyncio.ensure_future(batcher.submit(work("running")))
        await settle()
        waiting = asyncio.ensure_future(batcher.submit(work("waiting")))
        await settle()
        await batcher.stop()
        return await asyncio.gather(running, waiting, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert all(isinstance(o, ServiceError) and o.kind is ErrorKind.UNAVAILABLE for o in outcomes)


# -- against a real server, the engine held by a gate (deterministic: no sleeps) ---------------------------


@pytest.fixture(scope="module")
def default_tokenizer():
    """The embedded default tokenizer, carrying our ChatML template so that the chat routes serve too."""
    from dataclasses import replace

    from service.engine import load_tokenizer
    from testkit.chat import TEMPLATES, with_template

    loaded = load_tokenizer(None)
    return replace(loaded, tokenizer=with_template(loaded.tokenizer, TEMPLATES["chatml_generation"]))


def post_later(url: str, texts: list[str], results: list) -> threading.Thread:
    """POST /encode from another thread; its response lands in ``results``."""

    def run():
        results.append(httpx.post(url + "/encode", json={"texts": texts}, timeout=60))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def dropped(server) -> float:
    return server.runtime.metrics.registry.get_sample_value("tokenizer_dropped_total")


@pytest.mark.timeout(120)
def test_real_server_refuses_at_once_when_the_queue_is_full(default_tokenizer):
    gate = Gate()
    with in_thread_server(default_tokenizer, gate, max_queued_requests=1, queue_timeout_seconds=60) as server:
        assert httpx.post(server.url + "/encode", json={"texts": ["hi"]}).status_code == 200
        answers: list = []
        holder = post_later(server.url, [HOLD], answers)
        assert gate.entered.wait(30)  # the engine is busy with the held request
        queued = post_later(server.url, ["queued"], answers)
        wait_until(lambda: server.queued() == 1, what="one request queued")
        refused = httpx.post(server.url + "/encode", json={"texts": ["refused"]}, timeout=30)
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["error_type"] == "overloaded"
        gate.open()
        holder.join(30)
        queued.join(30)
        assert [a.status_code for a in answers] == [200, 200]
        assert "refused" not in gate.encoded
        text = httpx.get(server.url + "/metrics").text
        assert 'tokenizer_rejected_total{reason="queue_full"} 1.0' in text


@pytest.mark.timeout(120)
def test_real_server_answers_504_past_the_queue_deadline_while_the_engine_is_busy(default_tokenizer):
    gate = Gate()
    with in_thread_server(default_tokenizer, gate, queue_timeout_seconds=0.2) as server:
        answers: list = []
        holder = post_later(server.url, [HOLD], answers)
        assert gate.entered.wait(30)
        late = httpx.post(server.url + "/encode", json={"texts": ["late"]}, timeout=30)  # the gate is still closed
        assert late.status_code == 504, late.text
        assert late.json()["error_type"] == "timeout"
        gate.open()
        holder.join(30)
        assert answers[0].status_code == 200  # once running, a request runs to the end
        assert "late" not in gate.encoded


LEFT_BEHIND = "nobody waits for me"
LEAVING = [  # every work route, with a body whose work would show in the gate's records
    ("/encode", {"texts": [LEFT_BEHIND]}),
    ("/lengths", {"texts": [LEFT_BEHIND]}),
    ("/tokenize", {"texts": [LEFT_BEHIND]}),
    ("/decode", {"ids": [[7592, 2088]]}),
    ("/chat/encode", {"conversations": [[{"role": "user", "content": LEFT_BEHIND}]]}),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path, body", LEAVING, ids=[path for path, _ in LEAVING])
def test_real_server_drops_a_queued_request_whose_client_left(default_tokenizer, path, body):
    """On every work route: a client that closes its connection while its request waits behind a busy engine
    withdraws the request, which is dropped before any work is done."""
    gate = Gate()
    with in_thread_server(default_tokenizer, gate) as server:
        answers: list = []
        holder = post_later(server.url, [HOLD], answers)
        assert gate.entered.wait(30)
        content = json.dumps(body).encode()
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(
                f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode()
                + b"Content-Length: "
                + str(len(content)).encode()
                + b"\r\n\r\n"
                + content
            )
            wait_until(lambda: server.queued() == 1, what="the request queued")
        wait_until(lambda: server.queued() == 0, what="the request withdrawn")  # the client closed its socket
        assert dropped(server) == 1
        gate.open()
        holder.join(30)
        assert answers[0].status_code == 200
        assert not any(LEFT_BEHIND in str(item) for item in gate.encoded) and not gate.decoded  # no work was done
        assert httpx.get(server.url + "/readyz").status_code == 200


# -- conversations: renders on the render thread, encodes in the one queue --------------------------------------
CHAT = {"conversations": [[{"role": "user", "content": LEFT_BEHIND}, {"role": "assistant", "content": "ok"}]]}


class RecordedRenders:
    """Wraps the chat core's render function: which renders started, and how each ended."""

    def __init__(self, monkeypatch) -> None:
        from service.engine.chat import renderer as render_thread  # (the module that calls it)

        self.started = threading.Event()
        self.outcomes: list[str] = []
        real = render_thread.render_chats

        def render_chats(prepared, watch=None):
            self.started.set()
            try:
                rendered = real(prepared, watch)
            except BaseException as exc:
                self.outcomes.append(type(exc).__name__)
                raise
            self.outcomes.append("rendered")
            return rendered

        monkeypatch.setattr(render_thread, "render_chats", render_chats)


def send_and_leave(port: int, path: str, body: dict, leave_when) -> None:
    """POST ``body`` on a raw socket and close it once ``leave_when()`` holds."""
    content = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode()
            + f"Content-Length: {len(content)}\r\n\r\n".encode()
            + content
        )
        wait_until(leave_when, what="the moment to leave")


@pytest.mark.timeout(120)
def test_a_client_leaving_withdraws_its_render_before_it_starts(default_tokenizer, monkeypatch):
    """A render waiting for the render thread is withdrawn with its client: it never runs."""
    from testkit.engine import hold_render_thread, pending_renders

    renders = RecordedRenders(monkeypatch)
    with in_thread_server(default_tokenizer, Gate()) as server:
        release = hold_render_thread(server.runtime.engine)
        try:
            send_and_leave(server.port, "/chat/render", CHAT, lambda: pending_renders(server.runtime.engine) == 1)
            wait_until(lambda: pending_renders(server.runtime.engine) == 0, what="the render withdrawn")
        finally:
            release.set()
        assert httpx.post(server.url + "/chat/render", json=CHAT, timeout=30).status_code == 200
        assert renders.outcomes == ["rendered"]  # only the second request's render ran


@pytest.mark.timeout(120)
def test_a_client_leaving_stops_its_render_midway(default_tokenizer, monkeypatch):
    """A render under way stops at its next check once its client has gone, instead of rendering to the end."""
    renders = RecordedRenders(monkeypatch)
    slow = "{% for i in range(20000) %}{% if i % 1000 == 0 %}z{% endif %}{% endfor %}"  # seconds for 4,096
    body = {"conversations": CHAT["conversations"] * 4096, "chat_template": slow}
    with in_thread_server(default_tokenizer, Gate(), allow_chat_template_bodies=True) as server:
        send_and_leave(server.port, "/chat/render", body, renders.started.is_set)
        wait_until(lambda: renders.outcomes, timeout=60, what="the render ended")
        assert renders.outcomes == ["_RenderCancelled"]
        assert httpx.get(server.url + "/info", timeout=30).json()["memory"]["reserved_bytes"] == 0


@pytest.mark.timeout(120)
def test_conversations_and_texts_share_one_rust_call(default_tokenizer):
    """A chat encode's texts queue as an encode like any other: waiting behind a busy engine beside a plain encode
    with the same Rust call, the two are encoded in one call."""
    gate = Gate()
    with in_thread_server(default_tokenizer, gate) as server:
        answers: list = []
        holder = post_later(server.url, [HOLD], answers)
        assert gate.entered.wait(30)
        results: dict[str, httpx.Response] = {}

        def post(path: str, body: dict) -> None:
            results[path] = httpx.post(server.url + path, json=body, timeout=60)

        threads = [
            threading.Thread(target=post, args=("/chat/encode", CHAT)),
            threading.Thread(target=post, args=("/encode", {"texts": ["plain text"], "add_special_tokens": False})),
        ]
        for thread in threads:
            thread.start()
        wait_until(lambda: server.queued() == 2, what="both queued")
        gate.open()
        for thread in (holder, *threads):
            thread.join(30)
        assert all(response.status_code == 200 for response in results.values())
        shared = [call for call in gate.calls if "plain text" in call]
        assert len(shared) == 1 and any(LEFT_BEHIND in str(item) for item in shared[0]), gate.calls
