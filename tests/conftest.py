"""Shared fixtures: real tokenizers fetched from packages, in-process references, engines, servers."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import Phase
from hypothesis import settings as hypothesis_settings

from service.engine.loading import DEFAULT_TOKENIZER_DIR
from testkit import assets
from testkit.families import FAMILIES, MadeOnUse
from testkit.parity import TALLIES, RegionTally
from testkit.servers import ServerProcess

# `pytest --hypothesis-profile=mutants` (scripts/mutants.py): no shrinking and no example database, so a
# mutant that is caught fails fast and a fresh copy of the repository replays nothing.
hypothesis_settings.register_profile(
    "mutants", phases=(Phase.explicit, Phase.generate), database=None, print_blob=False
)

T = TypeVar("T")


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
LONGEST_FIRST = (  # by their time in a run of the whole suite, -n 3 on 2 cores: 490 s down to 80 s
    "test_docs_examples.py",
    "test_object_storage.py",
    "test_installs.py",
    "test_bench_smoke.py",
    "test_train.py",
    "test_replicas.py",
    "test_data_map.py",
    "test_pretokenize.py",
    "test_resolving.py",
    "test_memory.py",
    "test_fuzz.py",
    "test_fingerprint.py",
    "test_calibrate.py",
    "test_launch.py",
    "test_gpu_feed.py",
    "test_packing.py",
    "test_drain.py",
)


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
