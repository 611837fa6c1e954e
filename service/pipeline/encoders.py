"""Where the token ids come from: an :class:`Encoder` turns a batch of texts into flat ids and row lengths.

:class:`ServiceEncoder` asks the service (the async client, several URLs, the ragged binary answer). The
pre-tokenization runner only knows the protocol, so the benchmark can run the very same reading and writing
with an in-process tokenizer for comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..client import InvalidRequest, PayloadTooLarge, RetryPolicy
from ..client.async_client import AsyncTokenizerClient


class TextsRefused(Exception):
    """The batch was refused because of what one of its texts holds (the tokenizer refused it, it is over a
    limit, or it cannot be sent as UTF-8). The runner then finds the text by halving the batch."""


@dataclass(frozen=True)
class TokenizerFacts:
    """What the runner needs to know of the tokenizer and the service's limits (from ``/info``)."""

    fingerprint: str
    vocab_size: int
    source: str
    revision: str | None = None
    tokenizer_class: str | None = None
    special_token_ids: tuple[tuple[str, int], ...] = ()
    max_text_chars: int | None = None
    max_texts_per_request: int | None = None

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> TokenizerFacts:
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

    async def facts(self) -> TokenizerFacts:
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
    ) -> None:
        self.options = options
        self.client = AsyncTokenizerClient(url, api_key=api_key, expected_fingerprint=expected_fingerprint, retry=retry)

    async def facts(self) -> TokenizerFacts:
        facts = TokenizerFacts.from_info(await self.client.info())
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
