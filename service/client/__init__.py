"""The training-side client of tokenizer-service: a remote tokenizer that works inside DataLoader workers.

    from service.client import TokenizerClient

    client = TokenizerClient.launch()                       # a private service on this machine (Unix socket)
    client = TokenizerClient("http://127.0.0.1:8000")       # or a deployed one: several URLs, $TOKENIZER_SERVICE_URL
    batch = client(["text a", "text b"], padding="longest", truncation=True, max_length=128, return_tensors="pt")
    loader = DataLoader(texts, batch_size=32, num_workers=2, collate_fn=client.collator(padding="longest"))
    batch = client.apply_chat_template(conversations, return_assistant_tokens_mask=True)

The data tools (collators, the token-budget sampler, map functions, streams) are ``service.data``'s, made by the
client's conveniences (the guides in docs/guides/). Importing or using this package never imports ``tokenizers``,
``transformers``, ``fastapi`` or ``pydantic``, nor httpx with the default transports (stdlib ``http.client`` for
the sync client, asyncio streams for the async one); numpy and torch only when arrays or tensors are asked for.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ..transport import AsyncTransport, HTTPTransport, MockTransport, Request, Response, SyncTransport, Timeout
from ..transport.exceptions import *  # noqa: F403  # the SDK raises the one exception tree: all of it
from ..transport.exceptions import __all__ as _EXCEPTIONS
from ..wire import API_KEY_ENV, URL_ENV
from .results import EncodeResult, RaggedResult
from .retrying import RetryLog, RetryPolicy
from .sync_client import TokenizerClient

if TYPE_CHECKING:
    from ..transport import AsyncHTTPTransport, AsyncHTTPXTransport, HTTPXTransport
    from .async_client import AsyncTokenizerClient

__all__ = [
    "TokenizerClient",
    "AsyncTokenizerClient",
    "EncodeResult",
    "RaggedResult",
    "RetryPolicy",
    "RetryLog",
    "Timeout",
    "URL_ENV",
    "API_KEY_ENV",
    # transports
    "Request",
    "Response",
    "HTTPTransport",
    "HTTPXTransport",
    "AsyncHTTPTransport",
    "AsyncHTTPXTransport",
    "MockTransport",
    "SyncTransport",
    "AsyncTransport",
    *_EXCEPTIONS,
]


# Imported when first asked for, so the sync client -- what DataLoader workers use -- loads neither asyncio nor
# httpx.
_LAZY = {
    "AsyncTokenizerClient": "service.client.async_client",
    "AsyncHTTPTransport": "service.transport",
    "HTTPXTransport": "service.transport",
    "AsyncHTTPXTransport": "service.transport",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
