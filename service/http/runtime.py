"""What the HTTP layer serves from, one per app: settings, metrics, requests in flight, the engine once started,
and the one owner of the draining state (the launcher begins it and watches :attr:`Runtime.in_flight`; routes,
``/readyz`` and the connection guard ask :attr:`Runtime.draining`). The engine has no drain of its own: it is
stopped once the launcher has seen the admitted requests finish.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..engine import Engine, ErrorKind, LoadedTokenizer, ServiceError, available_cpus, load_tokenizer
from ..plurals import counted
from .metrics import Metrics
from .settings import Settings

logger = logging.getLogger(__name__)


class Runtime:
    def __init__(self, settings: Settings, loaded: LoadedTokenizer | None = None) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.threads = settings.threads or available_cpus()
        self._loaded = loaded
        self._engine: Engine | None = None
        self._draining = False
        self.in_flight = 0  # HTTP requests being answered now (the metrics middleware counts them)
        self.metrics.track_in_flight(lambda: self.in_flight)

    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        """FastAPI's ``lifespan=``: load (unless given) and start the engine; stop it at shutdown."""
        settings = self.settings
        loaded = self._loaded
        if loaded is None:
            loaded = await asyncio.to_thread(load_tokenizer, settings.model, settings.revision)
        engine = Engine(
            loaded,
            threads=self.threads,
            limits=settings.engine_limits(),
            batching=settings.batching_config(),
            observer=self.metrics,
            allow_chat_template_bodies=settings.allow_chat_template_bodies,
        )
        await engine.astart()
        self._engine = engine
        self.metrics.memory_budget.set(engine.budget.capacity)
        logger.info("serving %s (%s) with %s", loaded.source, loaded.fingerprint, counted(self.threads, "Rust thread"))
        for reason in dict.fromkeys(engine.chat.unusable.values()):  # one line when the install is the cause
            logger.error("the chat routes will refuse this template: %s", reason)
        try:
            yield
        finally:
            await engine.astop()

    def begin_drain(self) -> None:
        """Readiness turns 503 and new requests get 503 + Retry-After (and, through the guard, ``Connection:
        close``); those already being answered (bodies arriving, queued or encoding) complete."""
        self._draining = True

    def check_accepting(self) -> None:
        """Refuse a request arriving while draining (the SDK retries elsewhere)."""
        if self._draining:
            raise ServiceError(
                ErrorKind.UNAVAILABLE, "the server is draining; retry on another replica", retry_after=1.0
            )

    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def engine(self) -> Engine:
        """The running engine; UNAVAILABLE while it is loading."""
        if self._engine is None:
            raise ServiceError(ErrorKind.UNAVAILABLE, "the tokenizer is not loaded yet", retry_after=1.0)
        return self._engine

    @property
    def ready(self) -> bool:
        return self._engine is not None and self._engine.ready and not self._draining

    def not_ready_reason(self) -> str:
        if self._draining:
            return "draining"
        return "the tokenizer is not loaded" if self._engine is None else "the engine is stopped"
