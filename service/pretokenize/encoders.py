"""Where the token ids come from: an :class:`Encoder` turns a batch of texts (or conversations, with their loss
masks) into flat ids and row lengths.

:class:`ServiceEncoder` asks the service (the async client, several URLs, the ragged binary answer). The
pre-tokenization runner only knows the protocol, so the benchmark can run the very same reading and writing
with an in-process tokenizer for comparison.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from ..client import (
    AsyncTokenizerClient,
    InvalidRequest,
    PayloadTooLarge,
    RetriesExhausted,
    RetryPolicy,
    ServerBusy,
    ServiceUnreachable,
    TokenizerServiceError,
    TransportError,
)
from ..jobs.storage import DEFAULT_RETRY_DEADLINE

T = TypeVar("T")


class TextsRefused(Exception):
    """The batch was refused because of what one of its texts holds (the tokenizer refused it, it is over a
    limit, or it cannot be sent as UTF-8). The runner then finds the text by halving the batch."""


@dataclass(frozen=True)
class ServedTokenizer:
    """What the service says of its tokenizer and limits (``/info``): what the runner needs to know (the
    engine's own ``TokenizerFacts`` is what the server reads of the tokenizer itself)."""

    fingerprint: str
    vocab_size: int
    source: str
    revision: str | None = None
    tokenizer_class: str | None = None
    special_token_ids: tuple[tuple[str, int], ...] = ()
    max_text_chars: int | None = None
    max_texts_per_request: int | None = None

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> ServedTokenizer:
        limits = info.get("limits") or {}
        return cls(
            fingerprint=info["fingerprint"],
            vocab_size=int(info["vocab_size"]),
            source=str(info.get("source")),
            revision=info.get("revision"),
            tokenizer_class=info.get("tokenizer_class"),
            special_token_ids=tuple(sorted((info.get("special_token_ids") or {}).items())),
            max_text_chars=limits.get("max_text_chars"),
            max_texts_per_request=limits.get("max_texts_per_request"),
        )

    def special_token_id(self, name: str) -> int | None:
        return dict(self.special_token_ids).get(name)

    def describe(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "source": self.source,
            "revision": self.revision,
            "tokenizer_class": self.tokenizer_class,
            "vocab_size": self.vocab_size,
        }


class Encoder(Protocol):
    """What the runner needs of a source of token ids."""

    async def facts(self) -> ServedTokenizer:
        """The tokenizer's identity and limits."""

    async def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(flat ids, lengths)``: every text's ids concatenated, and each text's number of ids. Raises
        :class:`TextsRefused` when a text of the batch is refused."""

    async def encode_conversations(
        self, conversations: Sequence[list[dict[str, Any]]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(flat ids, lengths, flat loss masks or None)`` of a batch of conversations (a conversations run
        only). Raises :class:`TextsRefused` when a conversation of the batch is refused."""

    async def aclose(self) -> None:
        """Release connections."""

    def describe(self) -> str:
        """Where the ids come from, for messages."""


#: Seconds between two lines saying the service still does not answer.
OUTAGE_LINE_SECONDS = 10.0
#: How long one request tries (the client's failover over every URL, honouring Retry-After) before the
#: outage is said and the request retried by :class:`ServiceOutage`.
REQUEST_TRIES_SECONDS = 2.0


class ServiceOutage:
    """The service failing, said as it happens: at once when it cannot be reached (which URL, and what
    failed), after :data:`OUTAGE_LINE_SECONDS` when it only says it is busy; then a line every
    :data:`OUTAGE_LINE_SECONDS` counting down to ``deadline`` seconds after the first failure, and a line
    when it answers again. Shared by every request in flight, so an outage is told once, not per request;
    past the deadline, :class:`RetriesExhausted` naming the URLs and the last error."""

    def __init__(self, deadline: float, log: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.deadline = deadline
        self.log = log
        self.clock = clock
        self.since: float | None = None
        self._last_line = float("-inf")

    def failed(self, exc: TokenizerServiceError, started: float) -> float:
        """Record a request, sent at ``started``, that failed; the seconds to wait before trying it again,
        or raise past the deadline."""
        now = self.clock()
        if self.since is None:
            self.since, self._last_line = started, float("-inf")
        waited = now - self.since
        left = self.deadline - waited
        urls, cause = _failure(exc)
        if left <= 0:
            raise RetriesExhausted(
                f"the service at {urls} failed after retrying for {waited:.0f} s (--retry-deadline "
                f"{self.deadline:g}); last error: {cause}",
                urls=getattr(exc, "urls", ()),
                attempts=getattr(exc, "attempts", 1),
                last_error=exc,
            ) from exc
        busy = isinstance(getattr(exc, "last_error", exc), ServerBusy)
        if now - self._last_line >= OUTAGE_LINE_SECONDS and (not busy or waited >= OUTAGE_LINE_SECONDS):
            self._last_line = now
            state = "still fails" if waited >= OUTAGE_LINE_SECONDS else "fails"
            self.log(
                f"pretokenize: the service at {urls} {state} ({cause}); retrying for {left:.0f} s more "
                f"(--retry-deadline)"
            )
        retry_after = getattr(getattr(exc, "last_error", exc), "retry_after", None)
        return min(left, max(retry_after or 0.0, 1.0), OUTAGE_LINE_SECONDS)

    def answered(self) -> None:
        """A request succeeded: the outage, if any, is over."""
        if self.since is not None:
            if self._last_line > float("-inf"):
                self.log(f"pretokenize: the service answers again after {self.clock() - self.since:.0f} s")
            self.since = None


def _failure(exc: TokenizerServiceError) -> tuple[str, str]:
    """Which URLs failed, and how (the last cause), in words."""
    urls = ", ".join(getattr(exc, "urls", ())) or str(getattr(exc, "url", None) or "?")
    last = getattr(exc, "last_error", None) or exc
    return urls, f"{type(last).__name__}: {last}"


class ServiceEncoder:
    """Ids from the service: :meth:`AsyncTokenizerClient.encode_ragged` with the run's encode options, so
    the answer is flat ids plus lengths (no JSON, no padding), spread over every URL with failover; the
    tokenizer is pinned to the fingerprint seen first, so a redeployment mid-run stops the run instead of
    mixing tokenizers. A request that fails everywhere (the service unreachable, restarting or busy) is
    said at once and retried until ``retry_deadline`` seconds after the first failure (:class:`ServiceOutage`);
    a URL that has never answered fails at once (:class:`~service.client.ServiceUnreachable`)."""

    def __init__(
        self,
        url: str | Sequence[str] | None,
        options: dict[str, Any],
        *,
        api_key: str | None = None,
        expected_fingerprint: str | None = None,
        retry_deadline: float = DEFAULT_RETRY_DEADLINE,
        log: Callable[[str], None] | None = None,
        chat_options: dict[str, Any] | None = None,
    ) -> None:
        self.options = options
        self.chat_options = chat_options or {}
        self.outage = ServiceOutage(retry_deadline, log or (lambda message: None))
        # Each request tries every URL for a few seconds (the client's failover), then the outage is said and
        # the request tried again, rather than the client retrying silently for the whole deadline.
        retry = RetryPolicy(max_attempts=1000, deadline=min(REQUEST_TRIES_SECONDS, retry_deadline), backoff_max=1.0)
        self.client = AsyncTokenizerClient(url, api_key=api_key, expected_fingerprint=expected_fingerprint, retry=retry)

    async def _patiently(self, call: Callable[[], Awaitable[T]]) -> T:
        while True:
            started = self.outage.clock()
            try:
                result = await call()
            except ServiceUnreachable:  # never answered: a wrong URL, not an outage to wait out
                raise
            except (RetriesExhausted, TransportError, ServerBusy) as exc:
                await asyncio.sleep(self.outage.failed(exc, started))
                continue
            self.outage.answered()
            return result

    async def facts(self) -> ServedTokenizer:
        """``/info``: what the service serves; an unreachable URL is said at once (see :class:`ServiceOutage`)."""
        facts = ServedTokenizer.from_info(await self._patiently(self.client.info))
        if self.client.expected_fingerprint is None:
            self.client.expected_fingerprint = facts.fingerprint
        return facts

    async def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        try:
            result = await self._patiently(lambda: self.client.encode_ragged(list(texts), **self.options))
        except (InvalidRequest, PayloadTooLarge) as exc:
            raise TextsRefused(exc.error or str(exc)) from exc
        except UnicodeEncodeError as exc:
            raise TextsRefused(f"the text cannot be sent as UTF-8 ({exc.reason}: a lone surrogate?)") from exc
        return result["input_ids"], result.row_lengths

    async def encode_conversations(
        self, conversations: Sequence[list[dict[str, Any]]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """:meth:`AsyncTokenizerClient.chat_encode_ragged` with the run's chat options: flat ids, lengths and,
        when masks are asked for, the flat ``assistant_masks``."""
        try:
            result = await self._patiently(
                lambda: self.client.chat_encode_ragged(list(conversations), **self.chat_options)
            )
        except (InvalidRequest, PayloadTooLarge) as exc:
            raise TextsRefused(exc.error or str(exc)) from exc
        except (TypeError, UnicodeEncodeError) as exc:
            raise TextsRefused(f"the conversation cannot be sent as JSON ({exc})") from exc
        masks = result["assistant_masks"] if "assistant_masks" in result else None
        return result["input_ids"], result.row_lengths, masks

    async def aclose(self) -> None:
        await self.client.aclose()

    def describe(self) -> str:
        return ", ".join(self.client.urls)
