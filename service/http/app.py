"""The app factory: routes, error handlers and middleware around one :class:`~service.http.runtime.Runtime`."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import FastAPI
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from .. import __version__
from ..engine import ErrorKind, LoadedTokenizer, ServiceError
from ..wire import AUTH_SCHEME, PLAYGROUND_PATH
from .api_docs import DOCS_PATH, ApiDocs, declare_bearer_auth
from .direct_routes import DirectWorkRoutes, refuse_bypassed_dependencies
from .middleware import OPEN_PATHS, BearerAuth, CatchAll, ReleaseAfterSend, RequestMetrics
from .playground import Playground
from .responses import KIND_BY_STATUS, answer_error, error_response
from .routes import Routes
from .runtime import Runtime
from .settings import Settings

# FastAPI's OpenTelemetry hooks (newer releases) cost a provider lookup per request; we export Prometheus.
_NO_OPENTELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def create_app(settings: Settings, loaded: LoadedTokenizer | None = None, *, runtime: Runtime | None = None) -> FastAPI:
    """The ASGI app; the engine starts in its lifespan. ``loaded`` skips loading there (the CLI loads first, so a
    bad source fails in one line before the server starts); ``runtime``, what a launcher drains (by default the
    app's own, ``app.state.runtime``)."""
    runtime = runtime or Runtime(settings, loaded)
    app = FastAPI(
        title="tokenizer-service",
        version=__version__,
        description=(
            "HuggingFace fast tokenization over HTTP, with exact transformers parity.\n\n"
            # relative: resolves next to /docs, also behind a path prefix
            f"**[Tokenizer playground]({PLAYGROUND_PATH.lstrip('/')})**: type a text and see how the served "
            "tokenizer cuts it (token spans, ids, counts, special tokens)."
        ),
        lifespan=runtime.lifespan,  # (no dependencies=: the work routes would skip them, see Routes.install)
        docs_url=None,  # FastAPI's loads Swagger UI from a CDN: ApiDocs serves it from the package
        redoc_url=None,
        **_NO_OPENTELEMETRY,
    )
    app.state.runtime = runtime
    routes = Routes(runtime)
    paths = routes.install(app) | Playground(DOCS_PATH).install(app) | ApiDocs().install(app)

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> Response:
        return answer_error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        kind = KIND_BY_STATUS.get(exc.status_code, ErrorKind.INVALID_REQUEST)
        return error_response(kind, f"{exc.detail}: {request.method} {request.url.path}", headers=exc.headers)

    # Middleware, innermost first. CatchAll answers unexpected errors (no handler for Exception: Starlette would
    # re-raise it to the server, which logs its message, request content and all).
    app.add_middleware(DirectWorkRoutes, routes=routes, router=app.router)  # auth and metrics still wrap it
    app.add_middleware(ReleaseAfterSend)  # after the fast path and the routes have sent their answers
    if settings.api_key is not None:
        app.add_middleware(BearerAuth, api_key=settings.api_key.get_secret_value())
        declare_bearer_auth(app, OPEN_PATHS, f"The service's API key (--api-key), sent as '{AUTH_SCHEME} <key>'.")
    app.add_middleware(CatchAll)
    app.add_middleware(RequestMetrics, runtime=runtime, routes=paths)  # outermost
    refuse_bypassed_dependencies(app.router, routes.work_routes)  # (again when the app first runs: added since)
    return app
