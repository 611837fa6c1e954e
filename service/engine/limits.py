"""The engine's limits and their defaults, declared once for the settings, ``/info`` and the render bounds."""

from __future__ import annotations

from dataclasses import dataclass

from ..wire import MAX_TEXTS_PER_REQUEST
from .memory import DEFAULT_BUDGET_WITHOUT_LIMIT


@dataclass(frozen=True)
class EngineLimits:
    """What one request may ask of the engine, and the memory all of them may hold at once."""

    max_texts_per_request: int = MAX_TEXTS_PER_REQUEST
    max_text_chars: int = 200_000
    max_response_tokens: int = 8 * 1024 * 1024
    #: Bytes all in-flight work may hold at once (:mod:`service.engine.memory`).
    memory_budget: int = DEFAULT_BUDGET_WITHOUT_LIMIT


#: The defaults, as one value (the server's settings read theirs from it).
DEFAULT_LIMITS = EngineLimits()
