"""``AsyncTokenizerClient``: the asyncio twin of :class:`~service.client.TokenizerClient`.

A module of its own so that the sync client -- what DataLoader workers use -- never imports asyncio
(``service.client`` loads this module when ``AsyncTokenizerClient`` is first asked for).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from ..wire import LENGTHS_BATCH_TEXTS, ChatOptions, DecodeOptions, EncodeOptions, LengthOptions, TokenizeOptions
from .calls import (
    Call,
    apply_chat_template_call,
    chat_lengths_calls,
    chat_options,
    chat_ragged_call,
    decode_call,
    encode_call,
    encode_ragged_call,
    finish,
    info_call,
    is_conversations,
    lengths_calls,
    read_conversations,
    retried_rejection,
    tokenize_call,
)
from .clients import TokenizerClient, _ClientBase
from .exceptions import TransportError
from .results import EncodeResult, RaggedResult
from .retrying import Attempts, RetryPolicy
from .transports.base import AsyncTransport, SyncTransport, Timeout
from .transports.streams import AsyncHTTPTransport

T = TypeVar("T")


class AsyncTokenizerClient(_ClientBase):
    """The asyncio twin of :class:`TokenizerClient`: same arguments, same methods as coroutines
    (``await client(texts, ...)``), ``aclose()`` and ``async with``. The default transport is
    :class:`AsyncHTTPTransport` (lean asyncio streams; one connection pool per process and event loop);
    ``transport=AsyncHTTPXTransport()`` uses ``httpx.AsyncClient`` instead."""

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        *,
        api_key: str | None = None,
        timeout: Timeout | float | None = Timeout(),
        retry: RetryPolicy = RetryPolicy(),
        expected_fingerprint: str | None = None,
        headers: Mapping[str, str] | None = None,
        transport: AsyncTransport | None = None,
    ) -> None:
        super().__init__(
            url,
            api_key=api_key,
            timeout=timeout,
            retry=retry,
            expected_fingerprint=expected_fingerprint,
            headers=headers,
        )
        self._transport: AsyncTransport = transport if transport is not None else AsyncHTTPTransport()

    async def _send(self, call: Call[T]) -> T:
        attempts = Attempts(self._endpoints, self.retry, call.what)
        try:
            while True:
                endpoint, wait = attempts.next()
                if wait > 0:
                    await asyncio.sleep(wait)
                request = self._request(call, endpoint.url)
                try:
                    response = await self._transport.handle_async_request(request)
                except TransportError as exc:
                    attempts.failed(endpoint, exc)
                    continue
                busy = retried_rejection(response, request.url, call.method)
                if busy is not None:
                    attempts.failed(endpoint, busy, busy.retry_after)
                    continue
                attempts.succeeded(endpoint)
                return finish(call, response, request.url, self.expected_fingerprint)
        finally:
            attempts.close()  # an error that is not retried (or a KeyboardInterrupt) leaves no call counted

    async def encode(
        self,
        text: str | Sequence[str] | Sequence[tuple[str, str]],
        text_pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
    ) -> EncodeResult:
        """As :meth:`TokenizerClient.encode`."""
        options = EncodeOptions(
            add_special_tokens=add_special_tokens,
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            stride=stride,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_token_type_ids=return_token_type_ids,
            return_attention_mask=return_attention_mask,
            return_overflowing_tokens=return_overflowing_tokens,
            return_special_tokens_mask=return_special_tokens_mask,
            return_offsets_mapping=return_offsets_mapping,
            return_length=return_length,
        )
        return await self._send(encode_call(text, text_pair, options, return_tensors))

    __call__ = encode

    async def lengths(
        self,
        text: str | Sequence[str] | Sequence[tuple[str, str]],
        text_pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        return_overflowing_tokens: bool = False,
        batch_size: int = LENGTHS_BATCH_TEXTS,
    ) -> Any:
        """As :meth:`TokenizerClient.lengths`."""
        options = LengthOptions(
            add_special_tokens=add_special_tokens,
            truncation=truncation,
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=return_overflowing_tokens,
        )
        if is_conversations(text) and text_pair is None:
            calls, batched = chat_lengths_calls(text, options, batch_size)
        else:
            calls, batched = lengths_calls(text, text_pair, options, batch_size)
        lengths = [n for call in calls for n in await self._send(call)]
        return lengths if batched else lengths[0]

    async def encode_ragged(
        self,
        text: str | Sequence[str] | Sequence[tuple[str, str]],
        text_pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = True,
        padding: bool | str = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        stride: int = 0,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
    ) -> RaggedResult:
        """As :meth:`TokenizerClient.encode_ragged`."""
        options = EncodeOptions(
            add_special_tokens=add_special_tokens,
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            stride=stride,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_token_type_ids=return_token_type_ids,
            return_attention_mask=return_attention_mask,
            return_overflowing_tokens=return_overflowing_tokens,
            return_special_tokens_mask=return_special_tokens_mask,
            return_offsets_mapping=return_offsets_mapping,
            return_length=return_length,
        )
        return await self._send(encode_ragged_call(text, text_pair, options))

    async def decode(
        self, ids: Any, *, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None
    ) -> str:
        """As :meth:`TokenizerClient.decode`."""
        options = DecodeOptions(
            skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=clean_up_tokenization_spaces
        )
        return await self._send(decode_call(ids, options, single=True))

    async def batch_decode(
        self, sequences: Any, *, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None
    ) -> list[str]:
        """As :meth:`TokenizerClient.batch_decode`."""
        options = DecodeOptions(
            skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=clean_up_tokenization_spaces
        )
        return await self._send(decode_call(sequences, options, single=False))

    async def tokenize(
        self,
        text: str | Sequence[str] | Sequence[tuple[str, str]],
        pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        return_sequence_ids: bool = False,
    ) -> Any:
        """As :meth:`TokenizerClient.tokenize`."""
        options = TokenizeOptions(
            add_special_tokens=add_special_tokens,
            truncation=truncation,
            max_length=max_length,
            return_sequence_ids=return_sequence_ids,
        )
        return await self._send(tokenize_call(text, pair, options))

    async def apply_chat_template(
        self,
        conversation: Any,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        tokenize: bool = True,
        sanitize_control_tokens: bool = False,
        padding: bool | str = False,
        truncation: bool | str | None = False,
        max_length: int | None = None,
        return_tensors: str | None = None,
        return_dict: bool = True,
        return_assistant_tokens_mask: bool = False,
        tokenizer_kwargs: dict[str, Any] | None = None,
        *,
        assistant_masks_from: str = "generation",
        **kwargs: Any,
    ) -> Any:
        """As :meth:`TokenizerClient.apply_chat_template`."""
        options = chat_options(
            tools=tools,
            documents=documents,
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            sanitize_control_tokens=sanitize_control_tokens,
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            return_assistant_tokens_mask=return_assistant_tokens_mask,
            tokenizer_kwargs=tokenizer_kwargs,
            assistant_masks_from=assistant_masks_from,
            template_variables=kwargs,
        )
        call = apply_chat_template_call(
            conversation, options, tokenize=tokenize, return_tensors=return_tensors, return_dict=return_dict
        )
        return await self._send(call)

    async def chat_encode_ragged(
        self,
        conversations: Sequence[Any],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        documents: Sequence[Mapping[str, Any]] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        continue_final_message: bool | str = False,
        padding: bool | str = False,
        truncation: bool | str | None = False,
        max_length: int | None = None,
        return_assistant_tokens_mask: bool = False,
        assistant_masks_from: str = "generation",
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> RaggedResult:
        """As :meth:`TokenizerClient.chat_encode_ragged`."""
        options = ChatOptions(
            tools=tools,
            documents=documents,
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            chat_template_kwargs=chat_template_kwargs,
            return_assistant_tokens_mask=return_assistant_tokens_mask,
            assistant_masks_from=assistant_masks_from,
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_attention_mask=return_attention_mask,
        )
        return await self._send(chat_ragged_call(read_conversations(conversations)[0], options))

    async def info(self) -> dict[str, Any]:
        """As :meth:`TokenizerClient.info`."""
        return await self._send(info_call())

    @classmethod
    def launch(cls, model: str | os.PathLike[str] | None = None, **options: Any) -> Any:
        """As :meth:`TokenizerClient.launch`: ``client = await AsyncTokenizerClient.launch(...)``, or
        ``async with AsyncTokenizerClient.launch(...) as client:`` (start-up runs off the event loop)."""
        from ..launch.async_client import launch_async

        return launch_async(model, **options)

    async def aclose(self) -> None:
        """Close this process's connections on the running event loop."""
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncTokenizerClient:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    def _sync_client(self) -> TokenizerClient:
        # A DataLoader calls collate_fn synchronously: the collator gets a sync twin with the same settings
        # (and the same transport when it can serve sync calls, e.g. a MockTransport).
        transport = self._transport if isinstance(self._transport, SyncTransport) else None
        return TokenizerClient(**self._settings(), transport=transport)
