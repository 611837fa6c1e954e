"""The API docs at ``/docs``: Swagger UI over ``/openapi.json``, served entirely by the service (FastAPI's own
``/docs`` and ``/redoc`` load from a CDN: blank air-gapped; the app serves neither). The UI's two files come from
``fastapi-offline`` (maintained, following Swagger UI 5; needs only FastAPI); its page is not used, as it starts
Swagger UI inline, which the playground's Content-Security-Policy forbids: ours is ``service/http/static/docs.*``.

The page, its files and the schema hold nothing secret, so they are open; with an API key the schema declares the
bearer scheme (:func:`declare_bearer_auth`), so "Authorize" asks for the key and sends it on the calls it tries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI

from .playground import install_static, read_static

#: The page; FastAPI's own is turned off (``FastAPI(docs_url=None)``).
DOCS_PATH = "/docs"
#: The schema, where FastAPI serves it.
OPENAPI_PATH = "/openapi.json"
#: path -> (package, file in it, media type), linked by relative URLs.
ASSETS = {
    f"{DOCS_PATH}/swagger-ui-bundle.js": (
        "fastapi_offline",
        "static/swagger-ui-bundle.js",
        "text/javascript; charset=utf-8",
    ),
    f"{DOCS_PATH}/swagger-ui.css": ("fastapi_offline", "static/swagger-ui.css", "text/css; charset=utf-8"),
    f"{DOCS_PATH}/favicon.png": ("fastapi_offline", "static/favicon.png", "image/png"),
    f"{DOCS_PATH}/init.js": (__package__, "static/docs.js", "text/javascript; charset=utf-8"),
}
#: Served without the API key.
OPEN_PATHS = frozenset({DOCS_PATH, OPENAPI_PATH, *ASSETS})
#: The security scheme's name in the schema.
BEARER_SCHEME = "bearer"


class ApiDocs:
    """The docs page and its files, read from the packages once, answered from memory."""

    def __init__(self) -> None:
        self.page = read_static("static/docs.html")
        self.assets = {path: (read_static(name, package), media) for path, (package, name, media) in ASSETS.items()}

    def install(self, app: FastAPI) -> set[str]:
        return install_static(app, (DOCS_PATH,), self.page, self.assets)


def declare_bearer_auth(app: FastAPI, open_paths: Iterable[str], description: str) -> None:
    """Make ``app``'s schema say its calls need ``Authorization: Bearer <key>``, but those on ``open_paths``."""
    build = app.openapi
    open_paths = frozenset(open_paths)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()  # FastAPI's, cached in app.openapi_schema: completed once, here
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes[BEARER_SCHEME] = {"type": "http", "scheme": "bearer", "description": description}
        schema["security"] = [{BEARER_SCHEME: []}]
        for path, operations in schema.get("paths", {}).items():
            if path in open_paths:
                for operation in operations.values():
                    operation["security"] = []  # no key needed
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
