"""What both twins of the client share: the URLs, headers, retry policy and pin, the conveniences that build the data
tools on a client, and how ``launch`` builds a client on the launcher's transport. The sync client is
:mod:`.sync_client`, its asyncio twin :mod:`.async_client`. Construction only stores configuration: no socket,
thread or event loop exists until the first call in a process, so a client can be built at import time, used in the
parent, pickled into spawned DataLoader workers or inherited by forked ones, and each process opens its own
connections.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import __version__
from ..transport.base import AsyncTransport, Request, SyncTransport, Timeout
from ..wire import (
    API_KEY_ENV,
    AUTH_SCHEME,
    AUTHORIZATION_HEADER,
    JSON_MEDIA_TYPE,
    RAGGED_MEDIA_TYPE,
    SAFETENSORS_MEDIA_TYPE,
    URL_ENV,
    check_fingerprint_pin,
    parse_service_url,
)
from .operations import Call
from .retrying import Endpoints, RetryPolicy

if TYPE_CHECKING:
    from ..data import ChatTokenizeFunction, TokenizeFunction, TokenizerLike
    from ..data.collate import ChatCollator, Collator

C = TypeVar("C", bound="ClientBase[Any]")
TransportT = TypeVar("TransportT", SyncTransport, AsyncTransport)
_ACCEPTED = (JSON_MEDIA_TYPE, SAFETENSORS_MEDIA_TYPE, RAGGED_MEDIA_TYPE)


def resolve_urls(url: str | Sequence[str] | None) -> tuple[str, ...]:
    """Base URLs from ``url`` (one, a comma-separated string, or a list) or ``$TOKENIZER_SERVICE_URL``:
    ``http://``, ``https://`` or ``http+unix://`` (a Unix socket, :data:`service.wire.UNIX_SCHEME`)."""
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
        parse_service_url(part)  # ValueError saying what to write instead
        if part not in urls:
            urls.append(part)
    if not urls:
        raise ValueError(f"no service URL in {url!r}: give an http(s) URL, e.g. http://127.0.0.1:8000")
    return tuple(urls)


class ClientBase(Generic[TransportT]):
    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        *,
        api_key: str | None = None,
        timeout: Timeout | float | None = Timeout(),
        retry: RetryPolicy = RetryPolicy(),
        expected_fingerprint: str | None = None,
        headers: Mapping[str, str] | None = None,
        transport: TransportT | None = None,
    ) -> None:
        self.urls = resolve_urls(url)
        self.timeout = Timeout.of(timeout)
        if not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, not {type(retry).__name__}")
        self.retry = retry
        self.expected_fingerprint = (
            None if expected_fingerprint is None else check_fingerprint_pin(expected_fingerprint)
        )
        api_key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
        self._api_key = api_key
        self._extra_headers = dict(headers or {})
        base = {"User-Agent": f"tokenizer-service-client/{__version__}", **self._extra_headers}
        if api_key:
            base[AUTHORIZATION_HEADER] = f"{AUTH_SCHEME} {api_key}"
        self._headers = {accept: {"Content-Type": JSON_MEDIA_TYPE, "Accept": accept, **base} for accept in _ACCEPTED}
        self._endpoints = Endpoints(self.urls)
        self._transport: TransportT = transport if transport is not None else self._default_transport()

    def _default_transport(self) -> TransportT:
        raise NotImplementedError

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
        """A picklable ``collate_fn`` for ``torch.utils.data.DataLoader`` that encodes through this service: a
        :class:`~service.data.Collator`. A batch holds strings, ``(text, pair)`` tuples, or dicts (``text_field`` and
        ``pair_field`` name the text(s); every other field is collated as ``default_collate`` would); the result is
        one dict of int64 tensors plus those fields. ``options`` are those of ``encode`` (``padding`` defaults to
        True: tensors need rectangular batches). ``packing=True``: padding-free batches, exactly as transformers'
        ``DataCollatorWithFlattening`` makes them, with its options. ``collator.batch_sampler(dataset,
        max_tokens=...)`` gives the batches a token budget.
        """
        from ..data.collate import Collator

        return Collator(self.as_sync(), text_field=text_field, pair_field=pair_field, packing=packing, **options)

    def chat_collator(self, **options: Any) -> ChatCollator:
        """A picklable ``collate_fn`` for supervised fine-tuning on conversations, equal to TRL's SFT collation
        (its ``labels`` from the assistant masks, then ``DataCollatorForLanguageModeling``), tokenized through this
        service: rows whose ``messages_field`` holds a conversation -> ``input_ids``, ``labels`` (-100 where the
        assistant did not write the token, and on padding; every real token with ``assistant_only_loss=False``),
        ``attention_mask``; ``padding_free=True`` packs the batch into one row with ``position_ids`` and no padding.
        ``options``: :class:`~service.data.ChatCollator`'s (``messages_field``, ``pad_token_id``,
        ``assistant_only_loss``, ``padding_free``, ``pad_to_multiple_of``, ``padding_side``,
        ``return_position_ids``) and the chat options (``tools``, ``documents``, ``chat_template``,
        ``chat_template_kwargs``, ``assistant_masks_from``, ``truncation``, ``max_length``).
        ``collator.batch_sampler(dataset, max_tokens=...)`` gives the batches a token budget."""
        from ..data.collate import ChatCollator

        return ChatCollator(self.as_sync(), **options)

    def tokenize_function(
        self, column: str = "text", *, pair_column: str | None = None, **options: Any
    ) -> TokenizeFunction:
        """The function of ``dataset.map(function, batched=True, num_proc=N)`` (datasets): the columns
        ``tokenizer(batch[column], **options)`` gives in-process, computed by this service, with datasets' cache keyed
        on the served tokenizer and the options, never the URL (see :class:`service.data.TokenizeFunction`)."""
        from ..data import TokenizeFunction

        return TokenizeFunction(self.as_sync(), column, pair_column=pair_column, **options)

    def chat_tokenize_function(
        self, column: str = "messages", *, assistant_only_loss: bool = True, labels: bool = False, **chat_options: Any
    ) -> ChatTokenizeFunction:
        """The function of ``dataset.map(function, batched=True)`` over conversations: ``input_ids`` and
        ``assistant_masks`` as TRL's ``SFTTrainer`` tokenizes them, so it takes the result as already tokenized (see
        :class:`service.data.ChatTokenizeFunction`)."""
        from ..data import ChatTokenizeFunction

        return ChatTokenizeFunction(
            self.as_sync(), column, assistant_only_loss=assistant_only_loss, labels=labels, **chat_options
        )

    def as_sync(self) -> TokenizerLike:
        """A client of the same service and settings whose methods are plain calls: itself, or an async client's
        sync twin (what its collators and map functions use: DataLoaders and datasets call them synchronously)."""
        raise NotImplementedError

    @property
    def service(self) -> Any:
        """The launched service this client is bound to (:meth:`TokenizerClient.launch`: its ``pid``/``pids``,
        ``socket_path``, ``log_path``, ``fingerprint``...), or None for a client of a deployed service."""
        return getattr(self._transport, "service", None)

    def __repr__(self) -> str:
        urls = ", ".join(self.urls)
        pinned = f", expected_fingerprint={self.expected_fingerprint!r}" if self.expected_fingerprint else ""
        describe = getattr(self._transport, "describe", None)
        launched = f", {describe()}" if describe is not None else ""
        return f"{type(self).__name__}({urls!r}{pinned}{launched})"


#: The settings of ``launch`` that are the launcher's own; the client's are its constructor's parameters, every
#: other one is a setting of ``tokenizer-service serve``.
LAUNCH_SETTINGS = ("start_timeout", "python", "replicas")


def launched(
    client_class: Callable[..., C], model: Any, options: Mapping[str, Any], transport_class: Callable[..., Any]
) -> C:
    """A ``client_class`` bound to the service ``launch`` starts or finds for ``model`` and ``options`` (the
    client's, read from its signature, its URL aside; the launcher's; the server's), on a ``transport_class``
    (a launched transport, around the ``transport=`` given, if any)."""
    import inspect

    from ..launch.transport import launch

    own = set(inspect.signature(client_class).parameters) - {"url"}
    client_options = {name: value for name, value in options.items() if name in own}
    launcher = {name: value for name, value in options.items() if name in LAUNCH_SETTINGS}
    server = {name: value for name, value in options.items() if name not in own and name not in LAUNCH_SETTINGS}
    expected = client_options.pop("expected_fingerprint", None)
    service = launch(model, server, api_key=client_options.get("api_key"), expected_fingerprint=expected, **launcher)
    try:
        transport = transport_class(service.service, service.share, client_options.pop("transport", None))
        return client_class(
            list(service.service.urls),
            expected_fingerprint=service.service.fingerprint,
            transport=transport,
            **client_options,
        )
    except BaseException:
        service.release()
        raise
