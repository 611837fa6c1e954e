"""Where the token ids come from: an :class:`Encoder` turns a batch of texts (or conversations, with loss masks)
into flat ids and row lengths. :class:`ServiceEncoder` asks the service; the benchmark passes an in-process one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..client import AsyncTokenizerClient, InvalidRequest, PayloadTooLarge, RetryLog, RetryPolicy
from ..jobs.retrying import DEFAULT_RETRY_DEADLINE


class TextsRefused(Exception):
    """The batch was refused for what one of its texts holds (the tokenizer refused it, it is over a limit, or
    it cannot be sent as UTF-8); the runner finds it by halving the batch."""


@dataclass(frozen=True)
class ServedTokenizer:
    """What the runner needs of the service's ``/info``: its tokenizer and limits."""

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
            name: getattr(self, name) for name in ("fingerprint", "source", "revision", "tokenizer_class", "vocab_size")
        }


class Encoder(Protocol):
    """What the runner needs of a source of token ids."""

    async def facts(self) -> ServedTokenizer:
        """The tokenizer's identity and limits."""

    async def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(flat ids, lengths)`` of ``texts``, or :class:`TextsRefused` when one of them is refused."""

    async def encode_conversations(
        self, conversations: Sequence[list[dict[str, Any]]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(flat ids, lengths, flat loss masks or None)`` of conversations, or :class:`TextsRefused`."""

    async def aclose(self) -> None:
        """Release connections."""

    def describe(self) -> str:
        """Where the ids come from, for messages."""


#: Tries of one request: as many as the retry deadline allows (the deadline is what bounds them).
RETRY_ATTEMPTS = 1 << 30


class ServiceEncoder:
    """Ids from the service (flat ids plus lengths), over every URL with failover, pinned to the fingerprint seen
    first (a redeployment mid-run stops the run). A failing request is retried until ``retry_deadline`` seconds
    after its first try, said as it goes; a URL that has never answered fails at once."""

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
        said = RetryLog(log or (lambda message: None), prefix="pretokenize", flag="--retry-deadline")
        retry = RetryPolicy(max_attempts=RETRY_ATTEMPTS, deadline=retry_deadline, backoff_max=2.0, log=said)
        self.client = AsyncTokenizerClient(url, api_key=api_key, expected_fingerprint=expected_fingerprint, retry=retry)

    async def facts(self) -> ServedTokenizer:
        facts = ServedTokenizer.from_info(await self.client.info())
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

    async def encode_conversations(
        self, conversations: Sequence[list[dict[str, Any]]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        try:
            result = await self.client.chat_encode_ragged(list(conversations), **self.chat_options)
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
