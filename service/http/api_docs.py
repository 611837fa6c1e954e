"""The API docs at ``/docs``: Swagger UI over ``/openapi.json``, served entirely by the service.

FastAPI's own ``/docs`` loads Swagger UI from a CDN, so it is blank offline and in an air-gapped cluster
(and ``/redoc`` likewise; the app serves neither). Here the UI's files come from an installed package,
``fastapi-offline`` -- chosen among those on PyPI because it is maintained (it follows Swagger UI 5's
releases), needs nothing but FastAPI, which the server has anyway, and ships the two files we need
(``swagger-ui-bundle.js``, ``swagger-ui.css``). Only its files are used: its page starts Swagger UI with an
inline script, which our Content-Security-Policy forbids. The page and its start-up script are ours
(``service/http/static/docs.*``), under the playground's policy (:mod:`service.http.playground`):
scripts, styles and requests from this origin only, nothing inline.

The API key: the page, its assets and the schema are the same for every install and hold nothing secret,
so they are open (a browser cannot send a bearer token when it opens a page); every call the page makes
needs the key like any other client's. When the service has a key, the schema declares the bearer scheme
(:func:`declare_bearer_auth`), so Swagger UI's "Authorize" asks for the key and sends it on the calls it
tries; the probes and ``/metrics``, which need no key, are marked so.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from typing import Any

from fastapi import FastAPI

from .playground import install_static

#: The page; FastAPI's own is turned off (``FastAPI(docs_url=None)``).
DOCS_PATH = "/docs"
#: The schema, where FastAPI serves it.
OPENAPI_PATH = "/openapi.json"
#: path -> (package, file in it, media type). Linked from the page by relative URLs (behind a path prefix too).
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
#: Served without the API key: the page, its files and the schema (see the module doc).
OPEN_PATHS = frozenset({DOCS_PATH, OPENAPI_PATH, *ASSETS})
#: The name of the security scheme in the schema.
BEARER_SCHEME = "bearer"


def _read(package: str, name: str) -> bytes:
    return (resources.files(package) / name).read_bytes()


class ApiDocs:
    """The docs page and its files, read from the packages once, answered from memory."""

    def __init__(self) -> None:
        self.page = _read(__package__, "static/docs.html")
        self.assets = {path: (_read(package, name), media) for path, (package, name, media) in ASSETS.items()}

    def install(self, app: FastAPI) -> set[str]:
        """Register the page and its files on ``app``; returns the paths served."""
        return install_static(app, (DOCS_PATH,), self.page, self.assets)


def declare_bearer_auth(app: FastAPI, open_paths: Iterable[str], description: str) -> None:
    """Make ``app``'s schema say that its calls need ``Authorization: Bearer <key>``, except those on
    ``open_paths``: Swagger UI then shows "Authorize" and sends the key on the calls it tries."""
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
