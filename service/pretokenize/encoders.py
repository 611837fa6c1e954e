"""Where the token ids come from: an :class:`Encoder` turns a batch of texts into flat ids and row lengths.

:class:`ServiceEncoder` asks the service (the async client, several URLs, the ragged binary answer). The
pre-tokenization runner only knows the protocol, so the benchmark can run the very same reading and writing
with an in-process tokenizer for comparison.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..client import (
    AsyncTokenizerClient,
    FingerprintMismatch,
    InvalidRequest,
    PayloadTooLarge,
    RequestRejected,
    RetryPolicy,
    TokenizerServiceError,
)


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

    async def aclose(self) -> None:
        """Release connections."""

    def describe(self) -> str:
        """Where the ids come from, for messages."""


class ServiceEncoder:
    """Ids from the service: :meth:`AsyncTokenizerClient.encode_ragged` with the run's encode options, so
    the answer is flat ids plus lengths (no JSON, no padding), spread over every URL with failover and
    retries; the tokenizer is pinned to the fingerprint seen first, so a redeployment mid-run stops the
    run instead of mixing tokenizers."""

    def __init__(
        self,
        url: str | Sequence[str] | None,
        options: dict[str, Any],
        *,
        api_key: str | None = None,
        expected_fingerprint: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.options = options
        self._log = log or (lambda message: None)
        self._api_key = api_key
        self.client = AsyncTokenizerClient(url, api_key=api_key, expected_fingerprint=expected_fingerprint, retry=retry)

    async def facts(self) -> ServedTokenizer:
        """``/info``, asked once at a time: a wrong or unreachable URL is said at once (which URL, and what
        failed), then retried with a line every 10 s counting down to the retry policy's deadline."""
        log, deadline = self._log, self.client.retry.deadline
        probe = AsyncTokenizerClient(
            self.client.urls,
            api_key=self._api_key,
            expected_fingerprint=self.client.expected_fingerprint,
            retry=RetryPolicy(max_attempts=1),
        )
        started = time.monotonic()
        last_line = float("-inf")
        try:
            while True:
                try:
                    info = await probe.info()
                    break
                except (FingerprintMismatch, RequestRejected):
                    raise
                except TokenizerServiceError as exc:
                    waited = time.monotonic() - started
                    if waited >= deadline:
                        raise
                    if time.monotonic() - last_line >= 10:
                        last_line = time.monotonic()
                        log(
                            f"pretokenize: the service does not answer: {exc}; retrying for "
                            f"{deadline - waited:.0f} s more (--retry-deadline)"
                        )
                    await asyncio.sleep(min(2.0, deadline - waited))
        finally:
            await probe.aclose()
        facts = ServedTokenizer.from_info(info)
        if self.client.expected_fingerprint is None:
            self.client.expected_fingerprint = facts.fingerprint
        return facts

    async def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        try:
            result = await self.client.encode_ragged(list(texts), **self.options)
        except (InvalidRequest, PayloadTooLarge) as exc:
            raise TextsRefused(exc.error or str(exc)) from exc
        except UnicodeEncodeError as exc:
            raise TextsRefused(f"the text cannot be sent as UTF-8 ({exc.reason}: a lone surrogate?)") from exc
        return result["input_ids"], result.row_lengths

    async def aclose(self) -> None:
        await self.client.aclose()

    def describe(self) -> str:
        return ", ".join(self.client.urls)
