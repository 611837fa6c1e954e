"""The HTTP/1.1 protocol's own CPU per request: uvicorn's httptools and h11 protocols and the guarded subclass.

No sockets, no engine: each protocol is fed whole keep-alive requests (a typical ``POST /encode`` with a
one-text JSON body, and a ``GET /healthz``) over an in-memory transport, and a minimal ASGI app answers each
with a small body, so what is timed is parsing, the request-response cycle and writing the answer -- the
part the choice of protocol changes. Rounds interleave the protocols, so machine noise hits them alike;
the median of the rounds is reported, in microseconds of CPU (process time) per request.

Usage: python -m benchmarks.http_protocols [--requests 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

BODY = b'{"texts": ["The weather is nice today, and the tokenizer service is fast."], "padding": true}'
ANSWER = b'{"input_ids":[[2,5602,6152,7340,5621,11234,5623,8432,18,3]]}'
REQUESTS = {
    "POST /encode": (
        b"POST /encode HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
        b"Accept: application/vnd.safetensors\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    ),
    "GET /healthz": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n",
}


class MemoryTransport(asyncio.Transport):
    """Collects what the protocol writes; never pauses, never closes."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


def protocols() -> dict[str, Any]:
    """name -> a factory of a connected protocol (uvicorn Config and server state as uvicorn makes them)."""
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    from service.http.server.protocol import ConnectionGuard

    guard = ConnectionGuard(
        max_header_bytes=32 * 1024, header_timeout=10, body_timeout=60, max_connections=4096, keep_alive=5
    )
    classes = {
        "uvicorn httptools": HttpToolsProtocol,
        "guarded httptools (ours)": guard.protocol_class(),
        "uvicorn h11": H11Protocol,
    }
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", ws="none")
    config.load()
    state = ServerState()

    def factory(cls: Any) -> Any:
        def make() -> Any:
            protocol = cls(config=config, server_state=state, app_state={})
            protocol.connection_made(MemoryTransport())
            return protocol

        return make

    return {name: factory(cls) for name, cls in classes.items()}


async def one_round(make: Any, request: bytes, count: int) -> float:
    """CPU seconds per request for ``count`` keep-alive requests on one connection."""
    protocol = make()
    transport = protocol.transport
    started = time.process_time()
    for _ in range(count):
        before = transport.written
        protocol.data_received(request)
        while transport.written == before:  # until the answer is written
            await asyncio.sleep(0)
    elapsed = time.process_time() - started
    protocol.connection_lost(None)
    return elapsed / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per protocol per round")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    made = protocols()

    async def run() -> dict[tuple[str, str], list[float]]:
        timings: dict[tuple[str, str], list[float]] = {(r, p): [] for r in REQUESTS for p in made}
        for name in made:  # warm up
            await one_round(made[name], REQUESTS["POST /encode"], 2000)
        for round_ in range(args.rounds):
            names = list(made)
            names = names[round_ % len(names) :] + names[: round_ % len(names)]
            for request_name, request in REQUESTS.items():
                for name in names:
                    timings[(request_name, name)].append(await one_round(made[name], request, args.requests))
        return timings

    timings = asyncio.run(run())
    print(f"{args.requests} keep-alive requests per protocol per round, {args.rounds} rounds, median CPU per request")
    print(f"{'request':<14} {'protocol':<26} {'us/request':>10} {'vs httptools':>13}")
    for request_name in REQUESTS:
        base = statistics.median(timings[(request_name, "uvicorn httptools")])
        for name in made:
            value = statistics.median(timings[(request_name, name)])
            print(f"{request_name:<14} {name:<26} {value * 1e6:>10.2f} {value / base:>12.2f}x")


if __name__ == "__main__":
    main()
