"""A transport that calls a function instead of the network, for tests of code that uses the client."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from .base import Request, Response

__all__ = ["MockTransport", "Handler"]

Handler = Callable[[Request], Response | Awaitable[Response]]


class MockTransport:
    """Calls ``handler(request)``, which returns a :class:`Response` (an awaitable of one too, for the async
    client) or raises a ``TransportError``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler

    def handle_request(self, request: Request) -> Response:
        response = self.handler(request)
        if not isinstance(response, Response):
            if inspect.isawaitable(response):
                raise TypeError("this MockTransport handler is async: use it with AsyncTokenizerClient")
            raise TypeError(f"a MockTransport handler must return a Response, not {type(response).__name__}")
        return response

    async def handle_async_request(self, request: Request) -> Response:
        response = self.handler(request)
        if inspect.isawaitable(response):
            response = await response
        if not isinstance(response, Response):
            raise TypeError(f"a MockTransport handler must return a Response, not {type(response).__name__}")
        return response

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass
