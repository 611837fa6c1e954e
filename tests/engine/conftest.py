"""The engine's tests: engines run in-process on their own event loop threads, and the chat core's render thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from testkit.engine import EngineRunner
from testkit.families import MadeOnUse


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


@pytest.fixture(scope="session")
def chat_renderer() -> Iterator[Any]:
    """The chat core's render thread (service.engine.chat.ChatRenderer), for every engine's loop."""
    from service.engine.chat import ChatRenderer

    renderer = ChatRenderer()
    asyncio.run(renderer.astart())
    yield renderer
    asyncio.run(renderer.astop())
