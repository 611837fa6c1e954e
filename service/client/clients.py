"""``TokenizerClient`` and ``AsyncTokenizerClient``: a remote tokenizer that feels like the in-process one.

Both take the same arguments and have the same methods; the async one's are coroutines. Construction
only stores configuration: no socket, thread or event loop exists until the first call in a process, so a
client can be built at import time, used in the parent, pickled into spawned DataLoader workers or
inherited by forked ones, and each process opens its own connections.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from .. import __version__
from ..wire import (
    API_KEY_ENV,
    AUTH_SCHEME,
    AUTHORIZATION_HEADER,
    JSON_MEDIA_TYPE,
    LENGTHS_BATCH_TEXTS,
    RAGGED_MEDIA_TYPE,
    SAFETENSORS_MEDIA_TYPE,
    URL_ENV,
    DecodeOptions,
    EncodeOptions,
    LengthOptions,
    TokenizeOptions,
)
from .calls import (
    RETRY_STATUSES,
    Call,
    decode_call,
    encode_call,
    encode_ragged_call,
    finish,
    info_call,
    lengths_calls,
    rejection,
    tokenize_call,
)
from .collate import Collator
from .exceptions import TransportError
from .results import EncodeResult, RaggedResult
from .retrying import Attempts, Endpoints, RetryPolicy
from .transports.base import Request, SyncTransport, Timeout
from .transports.stdlib import HTTPTransport

T = TypeVar("T")
_ACCEPTED = (JSON_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE, RAGGED_MEDIA_TYPE)


def resolve_urls(url: str | Sequence[str] | None) -> tuple[str, ...]:
    """Base URLs from ``url`` (one, a comma-separated string, or a list) or ``$TOKENIZER_SERVICE_URL``."""
    if url is None:
        url = os.environ.get(URL_ENV, "")
        if not url.strip():
            raise ValueError(
                f"no service URL: set {URL_ENV}, or give one (--url on the command line, url= in Python): "
                "one URL, several, or a comma-separated list"
            )
    parts = url.split(",") if isinstance(url, str) else list(url)
    urls = []
    for part in parts:
        if not isinstance(part, str):
            raise TypeError(f"URLs must be str, not {type(part).__name__}")
        part = part.strip().rstrip("/")
        if not part:
            continue
        if not part.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {part!r}")
        if part not in urls:
            urls.append(part)
    if not urls:
        raise ValueError(f"no service URL in {url!r}: give an http(s) URL, e.g. http://127.0.0.1:8000")
    return tuple(urls)


class _ClientBase:
    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        *,
        api_key: str | None = None,
        timeout: Timeout | float | None = Timeout(),
        retry: RetryPolicy = RetryPolicy(),
        expected_fingerprint: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.urls = resolve_urls(url)
        self.timeout = Timeout.of(timeout)
        if not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, not {type(retry).__name__}")
        self.retry = retry
        self.expected_fingerprint = expected_fingerprint
        api_key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
        self._api_key = api_key
        self._extra_headers = dict(headers or {})
        base = {"User-Agent": f"tokenizer-service-client/{__version__}", **self._extra_headers}
        if api_key:
            base[AUTHORIZATION_HEADER] = f"{AUTH_SCHEME} {api_key}"
        self._headers = {accept: {"Content-Type": JSON_MEDIA_TYPE, "Accept": accept, **base} for accept in _ACCEPTED}
        self._endpoints = Endpoints(self.urls)

    def _request(self, call: Call[Any], base_url: str) -> Request:
        headers = self._headers[call.accept]
        return Request(call.method, base_url + call.path, headers, call.body, self.timeout)

    def _settings(self) -> dict[str, Any]:
        return {
            "url": list(self.urls),
            "api_key": self._api_key,
            "timeout": self.timeout,
            "retry": self.retry,
            "expected_fingerprint": self.expected_fingerprint,
            "headers": self._extra_headers,
        }

    def collator(
        self, *, text_field: str = "text", pair_field: str | None = None, packing: bool = False, **options: Any
    ) -> Collator:
        """A picklable ``collate_fn`` for ``torch.utils.data.DataLoader`` that encodes through this service.

        The batch may hold strings, ``(text, pair)`` tuples, or dicts: then ``text_field`` (and
        ``pair_field``) name the text(s), and every other field is collated as ``default_collate`` would
        (labels become a tensor). The result is one dict of int64 tensors plus those fields. ``options``
        are those of ``encode`` (``padding`` defaults to True here: tensors need rectangular batches).

        ``packing=True``: padding-free batches, exactly as transformers' ``DataCollatorWithFlattening`` makes
        them (``input_ids``/``labels``/``position_ids`` of shape ``[1, total]``; its options
        ``return_flash_attn_kwargs``, ``return_seq_idx``, ``separator_id``, ``return_position_ids`` and
        ``position_ids_start`` are taken here too). ``collator.batch_sampler(dataset, max_tokens=...)`` then
        gives the batches a token budget (see :class:`Collator`).
        """
        return Collator(self._sync_client(), text_field=text_field, pair_field=pair_field, packing=packing, **options)

    def _sync_client(self) -> TokenizerClient:
        raise NotImplementedError

    def __repr__(self) -> str:
        urls = ", ".join(self.urls)
        pinned = f", expected_fingerprint={self.expected_fingerprint!r}" if self.expected_fingerprint else ""
        return f"{type(self).__name__}({urls!r}{pinned})"


class TokenizerClient(_ClientBase):
    """A remote HuggingFace fast tokenizer: ``client(texts, padding=..., return_tensors="pt")`` returns
    what ``tokenizer(texts, padding=..., return_tensors="pt")`` would, computed by the service.

    ``url``: a base URL, several (list or comma-separated: calls are spread over them, with failover), or
    None for ``$TOKENIZER_SERVICE_URL``. ``api_key``: sent as ``Authorization: Bearer`` (default
    ``$TOKENIZER_SERVICE_API_KEY``). ``timeout``: seconds or :class:`Timeout` (connect 5 s, read 60 s).
    ``retry``: a :class:`RetryPolicy` for connection errors, 408, 429, 502, 503 and 504.
    ``expected_fingerprint``: pin the tokenizer; any answer from a server with another fingerprint raises
    :class:`FingerprintMismatch` (get the value from ``client.info()["fingerprint"]``).
    ``transport``: a :class:`~service.client.transports.SyncTransport` (default :class:`HTTPTransport`).

    Safe to build before a fork and to pickle; thread-safe. ``close()`` releases this process's idle
    connections (a later call reconnects).
    """

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        *,
        api_key: str | None = None,
        timeout: Timeout | float | None = Timeout(),
        retry: RetryPolicy = RetryPolicy(),
        expected_fingerprint: str | None = None,
        headers: Mapping[str, str] | None = None,
        transport: SyncTransport | None = None,
    ) -> None:
        super().__init__(
            url,
            api_key=api_key,
            timeout=timeout,
            retry=retry,
            expected_fingerprint=expected_fingerprint,
            headers=headers,
        )
        self._transport: SyncTransport = transport if transport is not None else HTTPTransport()

    def _send(self, call: Call[T]) -> T:
        attempts = Attempts(self._endpoints, self.retry, call.what)
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
            if response.status in RETRY_STATUSES:
                busy = rejection(response, request.url, call.method)
                attempts.failed(endpoint, busy, busy.retry_after)
                continue
            attempts.succeeded(endpoint)
            return finish(call, response, request.url, self.expected_fingerprint)

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
        """Encode a text, a batch of texts, or pairs -- same arguments, same result as calling a
        transformers fast tokenizer (``tokenizer(text, text_pair, ...)``), not its ``encode`` method.

        ``return_tensors``: None (lists), ``"np"`` (numpy int64) or ``"pt"`` (torch int64); tensors come
        from the binary answer without a copy and need rectangular rows (pass ``padding``), else
        :class:`NotAcceptable`. Invalid options raise :class:`InvalidRequest`, as transformers would raise.
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
        """Token counts without the ids: for a batch, one int per text (or pair), each equal to
        ``len(tokenizer(text, text_pair, **options)["input_ids"])`` in-process; for a single text, one int.

        The options are those of :meth:`encode` that change a count, with its defaults (padding never
        does). With ``return_overflowing_tokens=True`` each entry is instead the list of the counts of that
        text's rows: its first window, then each overflow window (``max_length`` and ``stride`` as in
        ``encode``). Much cheaper than encoding: the service answers one small int per text. Any number of
        texts: they are sent ``batch_size`` per request (the server's ``max_texts_per_request``, 4,096 by
        default, is the most it takes); an empty batch gives ``[]`` without a request.
        """
        options = LengthOptions(
            add_special_tokens=add_special_tokens,
            truncation=truncation,
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=return_overflowing_tokens,
        )
        calls, batched = lengths_calls(text, text_pair, options, batch_size)
        lengths = [n for call in calls for n in self._send(call)]
        return lengths if batched else lengths[0]

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
        """Encode as :meth:`encode` does, with the answer in the binary ragged layout: rows of any lengths,
        no padding, each key one flat int64 numpy array plus ``row_lengths`` (a :class:`RaggedResult`;
        ``result.tolist()`` equals the in-process lists). The fast path for pre-tokenization: neither JSON
        nor a Python int per token on the client. A single text is a batch of one row."""
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

    def decode(
        self, ids: Any, *, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None
    ) -> str:
        """The text of one id sequence (list, 1-D array or tensor), as ``tokenizer.decode``."""
        options = DecodeOptions(
            skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=clean_up_tokenization_spaces
        )
        return self._send(decode_call(ids, options, single=True))

    def batch_decode(
        self, sequences: Any, *, skip_special_tokens: bool = False, clean_up_tokenization_spaces: bool | None = None
    ) -> list[str]:
        """The texts of several id sequences (lists, or a 2-D array or tensor), as ``tokenizer.batch_decode``."""
        options = DecodeOptions(
            skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=clean_up_tokenization_spaces
        )
        return self._send(decode_call(sequences, options, single=False))

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
        """Tokens of a text (``list[str]``), or of each text of a batch (``list[list[str]]``), as
        ``tokenizer.tokenize(text, pair, add_special_tokens=...)`` gives them; ``pair`` (or a batch of
        ``(text, pair)`` tuples) as ``encode`` takes ``text_pair``.

        With ``truncation``/``max_length`` (as in :meth:`encode`), the tokens of the encoding ``encode`` makes
        with the same options -- one per id, ``BatchEncoding.tokens()``. With ``return_sequence_ids=True``
        the answer is ``{"tokens": ..., "sequence_ids": ...}``: per token ``None`` (a special token), 0 (the
        text) or 1 (the pair), as ``BatchEncoding.sequence_ids()``."""
        options = TokenizeOptions(
            add_special_tokens=add_special_tokens,
            truncation=truncation,
            max_length=max_length,
            return_sequence_ids=return_sequence_ids,
        )
        return self._send(tokenize_call(text, pair, options))

    def info(self) -> dict[str, Any]:
        """What the server serves: tokenizer, ``fingerprint``, limits, batching, versions."""
        return self._send(info_call())

    def close(self) -> None:
        """Close this process's idle connections."""
        self._transport.close()

    def __enter__(self) -> TokenizerClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def _sync_client(self) -> TokenizerClient:
        return self
