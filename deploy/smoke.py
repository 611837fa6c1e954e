"""HTTP checks of a running tokenizer-service (a container, a pod), against transformers in this process.

    python deploy/smoke.py wait   URL [--timeout S]
    python deploy/smoke.py encode URL [--threads N] [--largest]
    python deploy/smoke.py drain  URL --grace S -- STOP COMMAND...

`encode` posts calls with and without pairs, padding, truncation, offsets, as JSON and as safetensors, and
asserts the answers equal `AutoTokenizer.from_pretrained("service/default_tokenizer")` called the same way
in this process, and that X-Tokenizer-Fingerprint is the fingerprint of that tokenizer; with --threads,
that /info reports that many Rust threads; with --largest, that the largest response the server allows
(--max-response-tokens positions, as safetensors) is answered, i.e. fits the memory limit.

`drain` puts requests in flight, runs the stop command (which sends SIGTERM), and asserts every in-flight
request got its answer and the stop took less than the grace period. Run with the project's venv
(deploy/check.sh does).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
TEXTS = [
    "今天天气很好",
    "The weather is nice today.",
    "",
    "混合 mixed 文本 with emoji 👩‍👩‍👧 and combining e\u0301 marks",
    "A much longer English sentence that will certainly be truncated by a small max_length setting.",
]
PAIRS = ["第二段", "second segment", "x", "", "pair"]
CALLS: list[dict[str, Any]] = [
    {"texts": TEXTS, "padding": True, "truncation": True, "max_length": 16},
    {
        "texts": TEXTS,
        "text_pairs": PAIRS,
        "truncation": "only_first",
        "max_length": 12,
        "return_special_tokens_mask": True,
        "return_offsets_mapping": True,
        "return_length": True,
    },
    {
        "texts": TEXTS,
        "padding": "max_length",
        "max_length": 24,
        "truncation": True,
        "padding_side": "left",
        "return_token_type_ids": False,
    },
    {"texts": TEXTS[:2], "add_special_tokens": False},
]


def _reference(tokenizer: Any, call: dict[str, Any]) -> dict[str, Any]:
    options = {k: v for k, v in call.items() if k not in ("texts", "text_pairs")}
    encoded = tokenizer(call["texts"], call.get("text_pairs"), **options)

    def plain(value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value.tolist() if hasattr(value, "tolist") else value

    return {key: plain(value) for key, value in encoded.items()}


def check_largest_response(http: httpx.Client, limits: dict[str, int]) -> str:
    rows = min(4096, limits["max_texts_per_request"])
    length = limits["max_response_tokens"] // rows
    call = {"texts": [TEXTS[0]] * rows, "padding": "max_length", "max_length": length, "truncation": True}
    started = time.monotonic()
    response = http.post("/encode", json=call, headers={"Accept": "application/vnd.safetensors"}, timeout=120)
    assert response.status_code == 200, f"the largest allowed response: {response.status_code} {response.text[:200]}"
    from safetensors.numpy import load

    assert load(response.content)["input_ids"].shape == (rows, length)
    return (
        f"; largest response ({rows} x {length} positions, {len(response.content) / 1e6:.0f} MB) "
        f"in {time.monotonic() - started:.1f}s"
    )


def check_encode(url: str, threads: int | None, largest: bool) -> None:
    from transformers import AutoTokenizer

    from service.engine.loading import fingerprint

    tokenizer = AutoTokenizer.from_pretrained(str(REPO / "service" / "default_tokenizer"))
    expected_fingerprint = fingerprint(tokenizer)
    with httpx.Client(base_url=url, timeout=30) as http:
        info = http.get("/info").raise_for_status().json()
        assert info["fingerprint"] == expected_fingerprint, (info["fingerprint"], expected_fingerprint)
        if threads is not None:
            got = info["parallelism"]["rust_threads"]
            assert got == threads, f"/info reports {got} Rust threads, expected {threads} (the CPU limit)"
        for call in CALLS:
            response = http.post("/encode", json=call).raise_for_status()
            assert response.headers["X-Tokenizer-Fingerprint"] == expected_fingerprint
            assert response.json() == _reference(tokenizer, call), f"/encode differs from in-process for {call}"
        # The binary form: int64 arrays of the padded result.
        from safetensors.numpy import load

        call = CALLS[0]
        response = http.post("/encode", json=call, headers={"Accept": "application/vnd.safetensors"})
        arrays = load(response.raise_for_status().content)
        assert {k: v.tolist() for k, v in arrays.items()} == _reference(tokenizer, call), "safetensors differ"
        extra = check_largest_response(http, info["limits"]) if largest else ""
    print(
        f"encode: {len(CALLS) + 1} calls equal to in-process transformers; fingerprint {expected_fingerprint[:19]}…"
        + (f"; {threads} Rust threads" if threads is not None else "")
        + extra
    )


def wait_ready(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url + "/readyz", timeout=2)
            if response.status_code == 200:
                print(f"ready after {timeout - (deadline - time.monotonic()):.1f}s")
                return
            last = response.status_code
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.25)
    raise SystemExit(f"{url}/readyz not ready after {timeout:.0f}s (last: {last})")


def check_drain(url: str, grace: float, stop_command: list[str]) -> None:
    # Each request encodes a few thousand texts: long enough to still be running when SIGTERM arrives.
    body = {"texts": [TEXTS[1] * 8, TEXTS[0] * 8] * 1500, "padding": True}
    outcomes: list[Any] = []

    def request() -> None:
        try:
            outcomes.append(httpx.post(url + "/encode", json=body, timeout=grace + 30).status_code)
        except httpx.HTTPError as exc:
            outcomes.append(type(exc).__name__)

    workers = [threading.Thread(target=request) for _ in range(4)]
    for worker in workers:
        worker.start()
    time.sleep(0.5)  # in flight: one batch encoding, the others queued behind it
    started = time.monotonic()
    stopped = subprocess.run(stop_command, capture_output=True, text=True)
    took = time.monotonic() - started
    assert stopped.returncode == 0, f"{' '.join(stop_command)}: exit {stopped.returncode}: {stopped.stderr}"
    for worker in workers:
        worker.join(grace + 30)
    assert outcomes == [200] * len(workers), f"in-flight requests during the stop: {outcomes}"
    assert took < grace, f"the stop took {took:.1f}s, more than the {grace:.0f}s grace period"
    print(f"drain: {len(workers)} in-flight requests answered 200; stopped {took:.1f}s after SIGTERM")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["wait", "encode", "drain"])
    parser.add_argument("url")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--largest", action="store_true")
    parser.add_argument("--grace", type=float, default=30)
    stop_command = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    url = args.url.rstrip("/")
    if args.mode == "wait":
        wait_ready(url, args.timeout)
    elif args.mode == "encode":
        check_encode(url, args.threads, args.largest)
    else:
        if not stop_command:
            parser.error("drain needs the stop command after --")
        check_drain(url, args.grace, stop_command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
