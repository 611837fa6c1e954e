"""What the sync client (:mod:`.sync_client`) and its asyncio twin (:mod:`.async_client`) share: URLs, headers,
retry policy and pin, the conveniences that build the data tools, and how ``launch`` builds a client. Construction
only stores configuration (no socket, thread or event loop before a process's first call), so a client can be built
at import time, pickled into spawned DataLoader workers or inherited by forked ones: each process connects itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .. import __version__
from ..addresses import parse_service_url
from ..fingerprint_pins import check_fingerprint_pin
from ..serve_flags import setting_of_flag
from ..suggestions import UnknownOptionError, closest, unknown_option, unrecognized_flags
from ..transport.base import AsyncTransport, Request, SyncTransport, Timeout
from ..transport.exceptions import LaunchError
from ..wire import (
    API_KEY_ENV,
    AUTH_SCHEME,
    AUTHORIZATION_HEADER,
    JSON_MEDIA_TYPE,
    RAGGED_MEDIA_TYPE,
    SAFETENSORS_MEDIA_TYPE,
    URL_ENV,
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
    ``http://``, ``https://`` or ``http+unix://`` (a Unix socket, :data:`service.addresses.UNIX_SCHEME`)."""
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
        self._api_key = api_key if api_key is not None else (os.environ.get(API_KEY_ENV) or None)
        self._extra_headers = dict(headers or {})
        base = {"User-Agent": f"tokenizer-service-client/{__version__}", **self._extra_headers}
        if self._api_key:
            base[AUTHORIZATION_HEADER] = f"{AUTH_SCHEME} {self._api_key}"
        self._headers = {accept: {"Content-Type": JSON_MEDIA_TYPE, "Accept": accept, **base} for accept in _ACCEPTED}
        self._endpoints = Endpoints(self.urls)
        self._transport: TransportT = transport if transport is not None else self._default_transport()

    def _default_transport(self) -> TransportT:
        raise NotImplementedError

    def _request(self, call: Call[Any], base_url: str) -> Request:
        return Request(call.method, base_url + call.path, self._headers[call.accept], call.body, self.timeout)

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
        """A picklable DataLoader ``collate_fn`` that encodes through this service: a :class:`~service.data.Collator`
        (``options``: ``encode``'s; ``padding`` defaults to True)."""
        from ..data.collate import Collator

        return Collator(self.as_sync(), text_field=text_field, pair_field=pair_field, packing=packing, **options)

    def chat_collator(self, **options: Any) -> ChatCollator:
        """A picklable ``collate_fn`` for supervised fine-tuning on conversations, as TRL's, tokenized through this
        service: a :class:`~service.data.ChatCollator` (``options``: its own)."""
        from ..data.collate import ChatCollator

        return ChatCollator(self.as_sync(), **options)

    def tokenize_function(
        self, column: str = "text", *, pair_column: str | None = None, **options: Any
    ) -> TokenizeFunction:
        """A :class:`service.data.TokenizeFunction` for ``dataset.map(function, batched=True, num_proc=N)``: the
        columns ``tokenizer(batch[column], **options)`` gives, cached on the served tokenizer and the options."""
        from ..data import TokenizeFunction

        return TokenizeFunction(self.as_sync(), column, pair_column=pair_column, **options)

    def chat_tokenize_function(
        self, column: str = "messages", *, assistant_only_loss: bool = True, labels: bool = False, **chat_options: Any
    ) -> ChatTokenizeFunction:
        """A :class:`service.data.ChatTokenizeFunction` for ``dataset.map(function, batched=True)`` over
        conversations: ``input_ids`` and ``assistant_masks`` as TRL's ``SFTTrainer`` tokenizes them."""
        from ..data import ChatTokenizeFunction

        return ChatTokenizeFunction(
            self.as_sync(), column, assistant_only_loss=assistant_only_loss, labels=labels, **chat_options
        )

    def as_sync(self) -> TokenizerLike:
        """A client of the same service and settings whose methods are plain calls (DataLoaders and datasets call the
        data tools synchronously): itself, or an async client's sync twin."""
        raise NotImplementedError

    @property
    def service(self) -> Any:
        """The :class:`~service.launch.LaunchedService` of a client from :meth:`TokenizerClient.launch`, else None."""
        return getattr(self._transport, "service", None)

    def __repr__(self) -> str:
        urls = ", ".join(self.urls)
        pinned = f", expected_fingerprint={self.expected_fingerprint!r}" if self.expected_fingerprint else ""
        describe = getattr(self._transport, "describe", None)
        launched = f", {describe()}" if describe is not None else ""
        return f"{type(self).__name__}({urls!r}{pinned}{launched})"


#: The settings of ``launch`` that are the launcher's own (the client's are its constructor's, the rest ``serve``'s).
LAUNCH_SETTINGS = ("start_timeout", "python", "replicas")


def launched(
    client_class: Callable[..., C], model: Any, options: Mapping[str, Any], transport_class: Callable[..., Any]
) -> C:
    """A ``client_class`` on a ``transport_class`` (around the ``transport=`` given, if any), bound to the service
    ``launch`` starts or finds for ``model`` and ``options`` (the client's, the launcher's and the server's)."""
    import inspect

    from ..launch.transport import launch

    own = set(inspect.signature(client_class).parameters) - {"url"}
    client_options = {name: value for name, value in options.items() if name in own}
    launcher = {name: value for name, value in options.items() if name in LAUNCH_SETTINGS}
    server = {name: value for name, value in options.items() if name not in own and name not in LAUNCH_SETTINGS}
    expected = client_options.pop("expected_fingerprint", None)
    try:
        service = launch(
            model, server, api_key=client_options.get("api_key"), expected_fingerprint=expected, **launcher
        )
    except LaunchError as exc:
        misspelt = unrecognized_flags(exc.server_error or "")
        if misspelt:  # a keyword that is no setting of serve (nor the client's, nor the launcher's)
            raise _unknown_setting(f"{getattr(client_class, '__name__', 'client')}.launch()", misspelt, own) from exc
        raise
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


def _unknown_setting(
    where: str, misspelt: Mapping[str, str | None], client_options: Iterable[str]
) -> UnknownOptionError:
    """The error for the first flag ``serve`` refused (``misspelt``: flag -> the flag it suggested), as a keyword."""
    flag, meant_flag = next(iter(misspelt.items()))
    name = setting_of_flag(flag)
    meant = setting_of_flag(meant_flag) if meant_flag else closest(name, [*client_options, *LAUNCH_SETTINGS])
    if meant is not None:
        return unknown_option(where, name, (), meant)
    return UnknownOptionError(
        f"{where} got an unexpected keyword argument {name!r}; it is no option of the client or the launcher, nor a "
        "setting of serve (`tokenizer-service serve --help` lists them)",
        name,
    )
