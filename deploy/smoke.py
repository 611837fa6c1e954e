"""HTTP checks of a running tokenizer-service (a container, a pod, a venv), against transformers in this process.

    python deploy/smoke.py wait       URL [--timeout S]
    python deploy/smoke.py encode     URL [--model DIR] [--threads N] [--largest]
    python deploy/smoke.py routes     URL --model DIR [--threads N]
    python deploy/smoke.py chat-model DIR
    python deploy/smoke.py drain      URL --grace S -- STOP COMMAND...

`encode` posts calls with and without pairs, padding, truncation, offsets, as JSON and as safetensors, and
asserts the answers equal `AutoTokenizer.from_pretrained(DIR)` (default: service/default_tokenizer) called the
same way in this process, and that X-Tokenizer-Fingerprint is the fingerprint of that tokenizer; with --threads,
that /info reports that many Rust threads; with --largest, that the largest response the server allows
(--max-response-tokens positions, as safetensors) is answered, i.e. fits the memory limit.

`routes` checks every route of the app's route table (read from the code: a route without a check here fails
the smoke): the work routes answer what the tokenizer in DIR answers in this process (`/chat/encode` with the
assistant masks of its `{% generation %}` markers), `/info`, `/metrics`, the health routes, `/docs` and the
OpenAPI schema, the playground and every static asset. `chat-model DIR` makes such a tokenizer directory: the
embedded default tokenizer with the tests' chat templates (testkit/chat.py), and prints its path.

`drain` puts requests in flight, runs the stop command (which sends SIGTERM), and asserts every in-flight
request got its answer and the stop took less than the grace period. Run with the project's venv
(deploy/check.sh does).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # testkit (the tests' chat templates) lives at the repository root, beside service/
DEFAULT_MODEL = REPO / "service" / "default_tokenizer"
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


def check_encode(url: str, model: Path, threads: int | None, largest: bool) -> None:
    from transformers import AutoTokenizer

    from service.engine.loading import fingerprint

    tokenizer = AutoTokenizer.from_pretrained(str(model))
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


# -- every route of the route table ------------------------------------------------------------------------
CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "天气怎么样？"}, {"role": "assistant", "content": "晴朗。"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": [{"type": "text", "text": "混合 mixed 👩‍👩‍👧"}]},
        {"role": "assistant", "content": "好的 ok"},
    ],
]


def make_chat_model(root: Path) -> Path:
    """A tokenizer directory whose chat templates have {% generation %} markers: the embedded default tokenizer
    with the tests' templates (testkit.chat), as transformers saves them."""
    from testkit.chat import chat_tokenizer_dirs

    made: Path = chat_tokenizer_dirs({"chat": DEFAULT_MODEL}, root)["chat"]
    return made


def route_table() -> set[tuple[str, str]]:
    """(method, path) of every route the app registers, from the app factory itself (HEAD aside: GET's twin)."""
    from service.http.app import create_app
    from service.http.settings import Settings

    app = create_app(Settings())
    return {
        (method, path)
        for route in app.routes
        for path in [getattr(route, "path", None)]
        for method in getattr(route, "methods", None) or ()
        if path is not None and method != "HEAD"
    }


class RouteChecks:
    """One check per route, each comparing the server's answer with the in-process tokenizer of ``model``."""

    def __init__(self, http: httpx.Client, model: Path) -> None:
        from transformers import AutoTokenizer

        from service.engine.loading import fingerprint

        self.http = http
        self.model = model
        self.tokenizer = AutoTokenizer.from_pretrained(str(model))
        self.fingerprint = fingerprint(self.tokenizer)

    def table(self) -> dict[tuple[str, str], Any]:
        """(method, path) -> check. Static assets are checked by their modules' declarations."""
        from service.http import api_docs, playground
        from service.wire import (
            CHAT_ENCODE_PATH,
            CHAT_RENDER_PATH,
            DECODE_PATH,
            ENCODE_PATH,
            HEALTH_PATH,
            INFO_PATH,
            LENGTHS_PATH,
            METRICS_PATH,
            READY_PATH,
            TOKENIZE_PATH,
        )

        checks: dict[tuple[str, str], Any] = {
            ("POST", ENCODE_PATH): self.encode,
            ("POST", TOKENIZE_PATH): self.tokenize,
            ("POST", DECODE_PATH): self.decode,
            ("POST", LENGTHS_PATH): self.lengths,
            ("POST", CHAT_ENCODE_PATH): self.chat_encode,
            ("POST", CHAT_RENDER_PATH): self.chat_render,
            ("GET", INFO_PATH): self.info,
            ("GET", METRICS_PATH): self.metrics,
            ("GET", HEALTH_PATH): lambda: self.status(HEALTH_PATH, "alive"),
            ("GET", READY_PATH): lambda: self.status(READY_PATH, "ready"),
            ("GET", api_docs.DOCS_PATH): self.docs,
            ("GET", api_docs.OPENAPI_PATH): self.openapi,
        }
        for path in playground.PAGE_PATHS:
            checks["GET", path] = lambda path=path: self.playground(path)
        for path, (_, _, media_type) in api_docs.ASSETS.items():
            checks["GET", path] = lambda path=path, media_type=media_type: self.asset(path, media_type, None)
        for path, (name, media_type) in playground.ASSETS.items():
            shipped = (REPO / "service" / "http" / "static" / name).read_bytes()
            checks["GET", path] = lambda path=path, media_type=media_type, shipped=shipped: self.asset(
                path, media_type, shipped
            )
        return checks

    def post(self, path: str, body: dict[str, Any]) -> Any:
        response = self.http.post(path, json=body)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:300]}"
        assert response.headers["X-Tokenizer-Fingerprint"] == self.fingerprint, path
        return response.json()

    def encode(self) -> None:
        for call in CALLS:
            assert self.post("/encode", call) == _reference(self.tokenizer, call), f"/encode differs for {call}"
        from safetensors.numpy import load

        response = self.http.post("/encode", json=CALLS[0], headers={"Accept": "application/vnd.safetensors"})
        arrays = load(response.raise_for_status().content)
        assert {k: v.tolist() for k, v in arrays.items()} == _reference(self.tokenizer, CALLS[0]), "safetensors"

    def tokenize(self) -> None:
        pairs = [pair or "·" for pair in PAIRS]  # tokenize(text, "") drops the empty pair, a batch keeps it
        for special in (False, True):
            got = self.post("/tokenize", {"texts": TEXTS, "text_pairs": pairs, "add_special_tokens": special})
            expected = [
                self.tokenizer.tokenize(t, p, add_special_tokens=special) for t, p in zip(TEXTS, pairs, strict=True)
            ]
            assert got == {"tokens": expected}, f"/tokenize differs (add_special_tokens={special})"

    def decode(self) -> None:
        ids = self.tokenizer(TEXTS)["input_ids"]
        for skip in (False, True):
            got = self.post("/decode", {"ids": ids, "skip_special_tokens": skip})
            assert got == {"texts": self.tokenizer.batch_decode(ids, skip_special_tokens=skip)}, "/decode differs"

    def lengths(self) -> None:
        got = self.post("/lengths", {"texts": TEXTS, "text_pairs": PAIRS, "truncation": True, "max_length": 12})
        expected = [len(ids) for ids in self.tokenizer(TEXTS, PAIRS, truncation=True, max_length=12)["input_ids"]]
        assert got == {"lengths": expected}, "/lengths differs"

    def chat_encode(self) -> None:
        options = {"return_assistant_tokens_mask": True, "truncation": True, "max_length": 64}
        got = self.post("/chat/encode", {"conversations": CONVERSATIONS, **options})
        expected = self.tokenizer.apply_chat_template(CONVERSATIONS, tokenize=True, return_dict=True, **options)
        assert got == {key: list(value) for key, value in expected.items()}, "/chat/encode differs"
        assert all(any(mask) for mask in got["assistant_masks"]), "no assistant token marked"

    def chat_render(self) -> None:
        got = self.post("/chat/render", {"conversations": CONVERSATIONS, "add_generation_prompt": False})
        assert got == {"texts": self.tokenizer.apply_chat_template(CONVERSATIONS, tokenize=False)}, "/chat/render"

    def info(self) -> None:
        info = self.http.get("/info").raise_for_status().json()
        assert info["fingerprint"] == self.fingerprint, (info["fingerprint"], self.fingerprint)
        chat = info["chat"]
        assert chat["unusable"] == {}, f"chat templates the server cannot render: {chat['unusable']}"
        assert chat["chat_template"] and any(chat["generation_markers"].values()), chat

    def metrics(self) -> None:
        response = self.http.get("/metrics").raise_for_status()
        assert response.headers["content-type"].startswith("text/plain"), response.headers["content-type"]
        assert "tokenizer_texts_encoded_total" in response.text, "no texts counted in /metrics"

    def status(self, path: str, status: str) -> None:
        assert self.http.get(path).raise_for_status().json() == {"status": status}, path

    def docs(self) -> None:
        from service.http import api_docs

        page = self.http.get(api_docs.DOCS_PATH).raise_for_status().text
        for path in api_docs.ASSETS:
            assert path.rsplit("/", 1)[1] in page, f"/docs does not load {path}"

    def openapi(self) -> None:
        from service.http import api_docs

        schema = self.http.get(api_docs.OPENAPI_PATH).raise_for_status().json()
        posts = {path for method, path in route_table() if method == "POST"}
        assert posts <= set(schema["paths"]), f"the schema lacks {posts - set(schema['paths'])}"

    def playground(self, path: str) -> None:
        response = self.http.get(path).raise_for_status()
        assert response.headers["content-type"].startswith("text/html") and "<html" in response.text.lower(), path

    def asset(self, path: str, media_type: str, shipped: bytes | None) -> None:
        response = self.http.get(path).raise_for_status()
        assert response.headers["content-type"].split(";")[0] == media_type.split(";")[0], (path, response.headers)
        assert response.content and (shipped is None or response.content == shipped), f"{path}: not what ships"


def check_routes(url: str, model: Path, threads: int | None) -> None:
    with httpx.Client(base_url=url, timeout=30) as http:
        checks = RouteChecks(http, model)
        table = checks.table()
        routes = route_table()
        unchecked, gone = routes - set(table), set(table) - routes
        assert not unchecked, f"routes without a check in deploy/smoke.py: {sorted(unchecked)}"
        assert not gone, f"checks of routes the app no longer has: {sorted(gone)}"
        for (method, path), check in sorted(table.items()):
            try:
                check()
            except (AssertionError, httpx.HTTPError) as exc:
                raise SystemExit(f"{method} {path}: {exc}") from None
        if threads is not None:
            got = http.get("/info").json()["parallelism"]["rust_threads"]
            assert got == threads, f"/info reports {got} Rust threads, expected {threads} (the CPU limit)"
    print(f"routes: all {len(table)} routes of the route table answered as transformers in-process ({model.name})")


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


def _wait_in_flight(url: str, requests: int, answered: list[Any], timeout: float = 30) -> None:
    """Until the server counts ``requests`` requests in flight beside the scrape (a fixed pause is too short on a
    loaded machine: a request that arrives after SIGTERM is rightly refused)."""
    deadline = time.monotonic() + timeout
    seen = 0.0
    while time.monotonic() < deadline:
        for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
            if line.startswith("tokenizer_http_in_flight "):
                seen = float(line.split()[1]) - 1  # the scrape itself
        if seen >= requests:
            return
        time.sleep(0.05)
    raise SystemExit(
        f"{requests} requests not in flight after {timeout:.0f}s (the server counts {seen:.0f}; "
        f"answered meanwhile: {answered or 'none'})"
    )


def check_drain(url: str, grace: float, stop_command: list[str]) -> None:
    # Each request encodes a few thousand texts: long enough to still be running when SIGTERM arrives. The four
    # leave together, on one client, their body made once (each thread making its own client and body could send
    # them apart on a loaded machine, each answered before the next arrived).
    body = json.dumps({"texts": [TEXTS[1] * 8, TEXTS[0] * 8] * 1500, "padding": True}).encode()
    outcomes: list[Any] = []
    together = threading.Barrier(4)
    http = httpx.Client(timeout=grace + 30, headers={"content-type": "application/json"})

    def request() -> None:
        together.wait()
        try:
            outcomes.append(http.post(url + "/encode", content=body).status_code)
        except httpx.HTTPError as exc:
            outcomes.append(type(exc).__name__)

    workers = [threading.Thread(target=request) for _ in range(together.parties)]
    with http:
        for worker in workers:
            worker.start()
        _wait_in_flight(url, len(workers), outcomes)  # one batch encoding, the others queued behind it
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
    parser.add_argument("mode", choices=["wait", "encode", "routes", "chat-model", "drain"])
    parser.add_argument("url", help="the server's URL (chat-model: the directory to make)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="the tokenizer directory served")
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
        check_encode(url, args.model, args.threads, args.largest)
    elif args.mode == "routes":
        check_routes(url, args.model, args.threads)
    elif args.mode == "chat-model":
        print(make_chat_model(Path(args.url)))
    else:
        if not stop_command:
            parser.error("drain needs the stop command after --")
        check_drain(url, args.grace, stop_command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
