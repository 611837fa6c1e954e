"""Shared fixtures: real tokenizers fetched from packages, in-process references, engines, servers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import Phase
from hypothesis import settings as hypothesis_settings
from parity import TALLIES, RegionTally

from service.engine.loading import DEFAULT_TOKENIZER_DIR
from testkit import assets
from testkit.servers import ServerProcess

# `pytest --hypothesis-profile=mutants` (scripts/mutants.py): no shrinking and no example database, so a
# mutant that is caught fails fast and a fresh copy of the repository replays nothing.
hypothesis_settings.register_profile(
    "mutants", phases=(Phase.explicit, Phase.generate), database=None, print_blob=False
)

T = TypeVar("T")

# The three tokenizer families every parity test runs on.
FAMILIES = ("wordpiece_default", "bytelevel_bpe", "sentencepiece")


@pytest.fixture(scope="session")
def tokenizer_dirs() -> dict[str, Path]:
    """family -> HuggingFace tokenizer directory (the default one ships in the package)."""
    return {"wordpiece_default": DEFAULT_TOKENIZER_DIR, **assets.tokenizer_dirs()}


@pytest.fixture(scope="session")
def reference_tokenizers(tokenizer_dirs: dict[str, Path]) -> dict[str, Any]:
    """family -> the in-process transformers tokenizer a user would load (AutoTokenizer)."""
    from transformers import AutoTokenizer

    return {name: AutoTokenizer.from_pretrained(str(path)) for name, path in tokenizer_dirs.items()}


@pytest.fixture(scope="session")
def corpus() -> dict[str, list[str]]:
    return {
        "zh": assets.chinese_reviews(),
        "en": assets.english_paragraphs(),
    }


class EngineRunner:
    """An :class:`~service.engine.Engine` on its own event loop thread, callable from sync tests."""

    def __init__(self, source: Any, **engine_kwargs: Any) -> None:
        """``source``: what load_tokenizer takes (None: the embedded default), or a LoadedTokenizer."""
        from service.engine import Engine, LoadedTokenizer
        from service.engine.loading import load_tokenizer

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        loaded = source if isinstance(source, LoadedTokenizer) else load_tokenizer(source)
        self.engine = Engine(loaded, threads=2, **engine_kwargs)
        self.run(self.engine.astart())

    def run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def result(self, submit: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``await submit(*args, **kwargs)`` on the engine's loop (``submit``: an ``engine.submit_*``)."""

        async def submitted() -> Any:
            return await submit(*args, **kwargs)

        return self.run(submitted())

    def close(self) -> None:
        self.run(self.engine.astop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class MadeOnUse(Mapping[str, T]):
    """family -> a resource made the first time it is asked for, so a run that selects one family (``-k``,
    the mutation check) waits for that one only. ``made()``: what exists, for the teardown."""

    def __init__(self, names: Iterable[str], make: Callable[[str], T]) -> None:
        self._names = tuple(names)
        self._make = make
        self._made: dict[str, T] = {}

    def __getitem__(self, name: str) -> T:
        if name not in self._names:
            raise KeyError(name)
        if name not in self._made:
            self._made[name] = self._make(name)
        return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def made(self) -> list[T]:
        return list(self._made.values())


@pytest.fixture(scope="session")
def engines(tokenizer_dirs: dict[str, Path]) -> Iterator[Mapping[str, EngineRunner]]:
    from service.engine import EngineLimits

    # Parity is what these engines test; the memory budget has its own tests (test_memory.py). Its bounds are
    # safe, hence loose where UTF-8 bytes stand for tokens (a pair truncated longest_first with overflow
    # multiplies two such bounds), so a budget in the tens of GiB -- bookkeeping only -- keeps hypothesis'
    # long pairs with tiny max_length from being refused where transformers encodes them.
    limits = EngineLimits(
        max_texts_per_request=4096, max_text_chars=1_000_000, max_response_tokens=1 << 28, memory_budget=64 << 30
    )
    runners = MadeOnUse(tokenizer_dirs, lambda name: EngineRunner(str(tokenizer_dirs[name]), limits=limits))
    yield runners
    for runner in runners.made():
        runner.close()


class SharedServers:
    """Server processes shared by the whole run, one per (tokenizer, flags), each started the first time a test
    asks for it and stopped when the run ends (as httpx's suite shares one uvicorn server): a module that needs
    a server of its own settings asks for it here, and a later module asking for the same settings meets the
    same process. A test that stops, signals, restarts, fills or counts on a fresh server starts its own
    :class:`ServerProcess` instead."""

    def __init__(self, logs: Path) -> None:
        self._logs = logs
        self._started: dict[tuple[str | None, tuple[str, ...]], ServerProcess] = {}

    def __call__(self, *flags: str, model: str | Path | None = None) -> ServerProcess:
        """The server of ``model`` (None: the embedded default) run with ``flags``, started on first use."""
        key = (None if model is None else str(model), flags)
        if key not in self._started:
            model_args = () if model is None else ("--model", str(model))
            log = self._logs / f"server-{len(self._started)}.log"
            self._started[key] = ServerProcess(*model_args, *flags, log_path=log).start()
        return self._started[key]

    def stop(self) -> None:
        for server in self._started.values():
            server.stop()


@pytest.fixture(scope="session")
def shared_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServers]:
    """``shared_servers(*flags, model=None)``: a running server of those settings, shared by the whole run."""
    started = SharedServers(tmp_path_factory.mktemp("server-logs"))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def servers(tokenizer_dirs: dict[str, Path], shared_servers: SharedServers) -> Mapping[str, ServerProcess]:
    """family -> a real server process on 127.0.0.1 (the default family runs with no --model)."""

    def start(name: str) -> ServerProcess:
        # a 4 GiB budget: the client's parity cases send pairs with longest_first overflow, whose bound
        # is quadratic (each overflow row of one text combines with each of the other's)
        model = None if name == "wordpiece_default" else tokenizer_dirs[name]
        return shared_servers("--max-text-chars", "1000000", "--memory-budget-mib", "4096", model=model)

    return MadeOnUse(tokenizer_dirs, start)


@pytest.fixture
def region_tally(request: pytest.FixtureRequest) -> RegionTally:
    """Counts the option regions a property test reached (see parity.reaches_every_region)."""
    tally = RegionTally(request.node.nodeid)
    TALLIES.append(tally)
    return tally


#: The modules that take minutes (clean venvs, whole jobs on three stores, every docs page, the benchmarks):
#: they start first, so that with `pytest -n` (``make test``) none of them starts last and runs on alone.
LONGEST_FIRST = ("test_installs.py", "test_object_storage.py", "test_docs_examples.py", "test_bench_smoke.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first, each in that order, every other module after them in its usual order."""
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How often each property test reached each option region, every run (floors: parity.RegionTally)."""
    if TALLIES:
        terminalreporter.section("parity option regions reached")
        for tally in TALLIES:
            terminalreporter.write_line(tally.summary())


# -- conversations (tests/test_chat_*.py) ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def chat_renderer() -> Iterator[Any]:
    """The chat core's render thread (service.engine.chat.ChatRenderer), for every engine's loop."""
    from service.engine.chat import ChatRenderer

    renderer = ChatRenderer()
    asyncio.run(renderer.astart())
    yield renderer
    asyncio.run(renderer.astop())


@pytest.fixture(scope="session")
def named_chat_tokenizers(reference_tokenizers: dict[str, Any]) -> dict[str, Any]:
    """family -> the in-process tokenizer carrying every named template of testkit.chat.NAMED_TEMPLATES."""
    from testkit.chat import NAMED_TEMPLATES, TEMPLATES, with_template

    named = {name: TEMPLATES[template] for name, template in NAMED_TEMPLATES.items()}
    return {family: with_template(tokenizer, named) for family, tokenizer in reference_tokenizers.items()}


@pytest.fixture(scope="session")
def chat_tokenizer_dirs(tokenizer_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """family -> a copy of its tokenizer directory with our chat templates, as transformers saves them (the default
    ChatML with markers in chat_template.jinja; llama3, rewriting and tool_use in additional_chat_templates/)."""
    from testkit.chat import chat_tokenizer_dirs as make

    return make(dict(tokenizer_dirs), tmp_path_factory.mktemp("chat-tokenizers"))


@pytest.fixture(scope="session")
def chat_servers(chat_tokenizer_dirs: dict[str, Path], shared_servers: SharedServers) -> Mapping[str, ServerProcess]:
    """family -> a real server process on 127.0.0.1 serving that family with the chat templates."""

    def start(name: str) -> ServerProcess:
        limits = ("--max-text-chars", "1000000", "--memory-budget-mib", "2048", "--drain-listen-seconds", "0")
        return shared_servers(*limits, model=chat_tokenizer_dirs[name])

    return MadeOnUse(FAMILIES, start)
