"""``TokenizerClient``: a remote tokenizer that feels like the in-process one; its methods are the async twin's too."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..suggestions import checked_keywords
from ..transport.base import SyncTransport
from ..transport.exceptions import TokenizerServiceError, TransportError
from ..transport.stdlib import HTTPTransport
from ..wire import (
    LENGTHS_BATCH_TEXTS,
    ChatOptions,
    DecodeOptions,
    EncodeOptions,
    LengthOptions,
    TokenizeOptions,
)
from .answers import finish, retried_rejection
from .base import ClientBase, launched
from .operations import (
    Call,
    apply_chat_template_call,
    chat_lengths_calls,
    chat_ragged_call,
    chat_tokenizer_kwargs,
    decode_call,
    encode_call,
    encode_ragged_call,
    info_call,
    is_conversations,
    lengths_calls,
    read_conversations,
    tokenize_call,
)
from .results import EncodeResult, RaggedResult
from .retrying import Attempts

T = TypeVar("T")


class TokenizerClient(ClientBase[SyncTransport]):
    """A remote HuggingFace fast tokenizer: ``client(texts, padding=..., return_tensors="pt")`` returns what
    ``tokenizer(texts, padding=..., return_tensors="pt")`` would, computed by the service. Safe to build before a
    fork and to pickle; thread-safe. ``close()`` releases this process's idle connections (a later call reconnects).
    ``client.collator(...)`` makes a DataLoader ``collate_fn`` of it (:class:`~service.data.Collator`).

    Args:
        url: the service's base URL (``http://``, ``https://`` or ``http+unix://``), several (a list, or
            comma-separated: calls are spread over them, with failover), or None for ``$TOKENIZER_SERVICE_URL``.
        api_key: sent as ``Authorization: Bearer`` (default ``$TOKENIZER_SERVICE_API_KEY``).
        timeout: per request: seconds, or a :class:`Timeout` (default: its connect and read defaults).
        retry: a :class:`RetryPolicy`: how long to retry, and fail over, on connection errors and the answers
            raised as :class:`ServerBusy` or :class:`RequestTimeout` (overloaded, draining, queue timeout, a
            proxy's 502, a slow upload).
        expected_fingerprint: pin the tokenizer: an answer from a server with another fingerprint raises
            :class:`FingerprintMismatch` (``client.info()["fingerprint"]``, or a prefix of it of at least 12 hex
            digits, as ``serve`` logs it).
        headers: extra headers sent with every request.
        transport: a :class:`~service.transport.SyncTransport` (default :class:`HTTPTransport`; tests pass a
            :class:`MockTransport`).

    Raises:
        ValueError: no URL given and ``$TOKENIZER_SERVICE_URL`` unset, a URL that is not a service URL (the
            message says how to write it), or an ``expected_fingerprint`` that is not one (or is too short).
    """

    def _default_transport(self) -> SyncTransport:
        return HTTPTransport()

    def _send(self, call: Call[T]) -> T:
        attempts = Attempts(self._endpoints, self.retry, call.what)
        try:
            while True:
                endpoint, wait = attempts.next()
                if wait > 0:
                    time.sleep(wait)
                request = self._request(call, endpoint.url)
                try:
                    response = self._transport.handle_request(request)
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

    def _send_all(self, calls: Sequence[Call[Any]], combine: Callable[[list[Any]], T]) -> T:
        return combine([self._send(call) for call in calls])

    # The methods below are the async twin's too (service/client/async_client.py): each builds its call(s) and
    # ends in one ``return self._send(...)`` (or ``_send_all``), coroutines there: tests/client/test_async_twin.py.
    # A misspelt keyword names the option meant (checked_keywords), as the HTTP API names a misspelt field.
    @checked_keywords
    def encode(
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
        """Encode a text, a batch of texts, or pairs -- same arguments, same result as calling a transformers fast
        tokenizer (``tokenizer(text, text_pair, ...)``), not its ``encode`` method: every option has transformers'
        name, default and meaning (the HTTP reference lists them). ``return_tensors``: None (lists), ``"np"``
        (numpy int64) or ``"pt"`` (torch int64), read from the binary answer without a copy.

        Returns:
            An :class:`EncodeResult`: the keys and values of the in-process ``BatchEncoding`` (for a single text,
            unbatched lists).

        Raises:
            InvalidRequest: options the tokenizer refuses, with its reason (e.g. padding without a pad token).
            NotAcceptable: tensors asked for rows of different lengths (pass ``padding``).
            PayloadTooLarge: a request over one of the server's limits (send fewer or shorter texts).
            FingerprintMismatch: the server serves another tokenizer than ``expected_fingerprint``.
            RetriesExhausted: the service stayed unreachable or busy past the retry policy.

        Example:
            ```python
            batch = client(["你好", "hello"], padding="longest", truncation=True, max_length=8, return_tensors="pt")
            batch["input_ids"].shape  # torch.Size([2, 4])
            ```
        """
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
        return self._send(encode_call(text, text_pair, options, return_tensors))

    __call__ = encode

    @checked_keywords
    def lengths(
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
        """Token counts without the ids, much cheaper than encoding: ``len(tokenizer(text, text_pair,
        **options)["input_ids"])`` in-process, one int per text (or pair) of a batch, or one int for a single text.

        The options are :meth:`encode`'s that change a count (padding never does), with its defaults; with
        ``return_overflowing_tokens=True`` an entry is the list of the counts of that text's windows, the first then
        each overflow one. Texts are sent ``batch_size`` per request (default: the server's default
        ``max_texts_per_request``, the most it takes); an empty batch gives ``[]`` without a request.

        ``text`` may also be a conversation (a list of message dicts) or a batch of them: each count is then
        ``len(tokenizer.apply_chat_template(conversation, truncation=..., max_length=...)["input_ids"])`` with the
        default template (``add_special_tokens`` does not apply; ``stride`` and overflow are refused). A chat
        collator's :meth:`~ChatCollator.batch_sampler` counts with all of its chat options.
        """
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

        def counts(answers: list[list[Any]]) -> Any:
            lengths = [n for answer in answers for n in answer]
            return lengths if batched else lengths[0]

        return self._send_all(calls, counts)

    @checked_keywords
    def encode_ragged(
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
        """Encode as :meth:`encode` does, answered in the binary ragged layout: a :class:`RaggedResult`, each key one
        flat int64 numpy array plus ``row_lengths`` (``.tolist()`` equals the in-process lists). The fast path of
        pre-tokenization: no JSON, no Python int per token. A single text is a batch of one row."""
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
        return self._send(encode_ragged_call(text, text_pair, options))

    @checked_keywords
    def decode(
        self, ids: Any, *, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None
    ) -> str:
        """The text of one id sequence (list, 1-D array or tensor), as ``tokenizer.decode``."""
        options = DecodeOptions(
            skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=clean_up_tokenization_spaces
        )
        return self._send(decode_call(ids, options, single=True))

    @checked_keywords
    def batch_decode(
        self, sequences: Any, *, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None
    ) -> list[str]:
        """The texts of several id sequences (lists, or a 2-D array or tensor), as ``tokenizer.batch_decode``."""
        options = DecodeOptions(
            skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=clean_up_tokenization_spaces
        )
        return self._send(decode_call(sequences, options, single=False))

    @checked_keywords
    def tokenize(
        self,
        text: str | Sequence[str] | Sequence[tuple[str, str]],
        pair: str | Sequence[str] | None = None,
        *,
        add_special_tokens: bool = False,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        return_sequence_ids: bool = False,
    ) -> Any:
        """Tokens of a text (``list[str]``), or of each text of a batch, as ``tokenizer.tokenize(text, pair,
        add_special_tokens=...)`` gives them; ``pair`` (or ``(text, pair)`` tuples) as ``encode``'s ``text_pair``.
        With ``truncation``/``max_length``, the tokens of the encoding ``encode`` makes with the same options (one per
        id, ``BatchEncoding.tokens()``). ``return_sequence_ids=True`` answers ``{"tokens": ..., "sequence_ids": ...}``:
        per token ``None`` (a special token), 0 (the text) or 1 (the pair), as ``BatchEncoding.sequence_ids()``."""
        options = TokenizeOptions(
            add_special_tokens=add_special_tokens,
            truncation=truncation,
            max_length=max_length,
            return_sequence_ids=return_sequence_ids,
        )
        return self._send(tokenize_call(text, pair, options))

    @checked_keywords
    def apply_chat_template(
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
        """Conversations through the served tokenizer's chat template -- same arguments, same result as
        ``tokenizer.apply_chat_template`` in-process (transformers 5): one conversation (a list of message dicts) or a
        batch; ``tokenize=False`` gives the rendered string(s), else an :class:`EncodeResult` with ``input_ids``,
        ``attention_mask`` and, with ``return_assistant_tokens_mask=True``, ``assistant_masks`` (lists, or
        ``return_tensors="np"``/``"pt"``), or the ids alone with ``return_dict=False``. As in transformers,
        ``tokenizer_kwargs`` go to the tokenizer (the service takes ``pad_to_multiple_of``, ``padding_side`` and
        ``return_attention_mask``) and every other keyword is a template variable (``enable_thinking=False``).
        ``chat_template`` names one of the tokenizer's templates (``info()["chat"]`` lists them); ``tools`` are JSON
        schemas; ``sanitize_control_tokens`` is not supported yet. Where transformers answers an all-zero mask (no
        ``{% generation %}`` markers) the service raises :class:`InvalidRequest`; ``assistant_masks_from="turns"``
        (not a transformers argument) marks each assistant message's rendered turn instead.
        """
        options = ChatOptions(
            tools=tools,
            documents=documents,
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
            chat_template_kwargs=kwargs or None,
            return_assistant_tokens_mask=return_assistant_tokens_mask,
            assistant_masks_from=assistant_masks_from,
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            **chat_tokenizer_kwargs(tokenizer_kwargs, sanitize_control_tokens),
        )
        call = apply_chat_template_call(
            conversation, options, tokenize=tokenize, return_tensors=return_tensors, return_dict=return_dict
        )
        return self._send(call)

    @checked_keywords
    def chat_encode_ragged(
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
        """Encode conversations as :meth:`apply_chat_template` does, with the options as the service names them
        (``service.wire.ChatOptions``), answered as :meth:`encode_ragged` is: the fast path of the chat collator and
        of pre-tokenizing conversations. A single conversation is a batch of one row."""
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
        return self._send(chat_ragged_call(read_conversations(conversations)[0], options))

    def info(self) -> dict[str, Any]:
        """What the server serves: tokenizer, ``fingerprint``, limits, batching, versions."""
        return self._send(info_call())

    @classmethod
    def launch(cls, model: str | os.PathLike[str] | None = None, **options: Any) -> TokenizerClient:
        """Start a private service for ``model`` (a tokenizer file or folder, a hub id, None for the embedded
        default) on this machine, on a Unix socket, and return a client bound to it; nothing to deploy:

            with TokenizerClient.launch("path/to/tokenizer", threads=8) as client:
                loader = DataLoader(rows, num_workers=4, collate_fn=client.collator(padding=True))

        ``options``: the client's (``timeout``, ``retry``, ``headers``, ``transport``, ``api_key``,
        ``expected_fingerprint``), ``start_timeout`` (seconds to wait for a ready service, default 300), ``python``
        (the server's interpreter, default this one), ``replicas`` (a count, or ``"auto"``: from this machine's
        calibration), ``calibrate``, and every setting of ``tokenizer-service serve`` by name (``threads=8``,
        ``memory_budget_mib=2048``). One service per tokenizer and settings per machine: the local ranks of a
        torchrun job share one. It stops when the last process using it exits, even killed; ``shutdown()`` or the
        end of the ``with`` block lets go sooner. A failed start raises ``LaunchError`` with the server's log.
        POSIX only. Details: docs/guides/dataloader.md and ``service/launch/``."""
        from ..launch.transport import LaunchedTransport

        return launched(cls, model, options, LaunchedTransport)

    def close(self) -> None:
        """Close this process's idle connections."""
        self._transport.close()

    def shutdown(self) -> None:
        """Close this client's connections and, for a launched client, let go of the service (its replicas stop
        once no process on this machine uses it). Idempotent; the end of a ``with`` block does it."""
        self.close()
        release = getattr(self._transport, "release", None)
        if release is not None:
            release()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if "datasets" in sys.modules:
            # datasets keys a map by the pickle of its function, which holds this client: with the served fingerprint
            # in it, a service that changed tokenizer behind the same URL misses the cache instead of answering stale.
            state["served_fingerprint"] = self._served_fingerprint()
        return state

    def _served_fingerprint(self) -> str | None:
        """One request to the first URL, no retry; None if unreachable (a map then fails before it caches anything)."""
        if self.expected_fingerprint is not None:
            return self.expected_fingerprint
        call = info_call()
        try:
            request = self._request(call, self.urls[0])
            info = finish(call, self._transport.handle_request(request), request.url, None)
        except TokenizerServiceError:
            return None
        return str(info["fingerprint"])

    def __enter__(self) -> TokenizerClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def as_sync(self) -> TokenizerClient:
        return self
