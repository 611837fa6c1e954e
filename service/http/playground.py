"""The tokenizer playground, a page for people at ``/`` and ``/playground`` (docs/guides/playground.md): static
files in ``service/http/static/`` (no CDN, no build step: works air-gapped) that call this service only (its
Content-Security-Policy allows no other origin). They hold nothing of the service, so they are served without the
API key (a browser cannot send one when it opens a page); the page's API calls need it like any client's.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from importlib import resources

from fastapi import FastAPI
from starlette.responses import Response

from ..wire import (
    AUTH_SCHEME,
    CHAT_ENCODE_PATH,
    CHAT_RENDER_PATH,
    ENCODE_PATH,
    ERROR_FIELD,
    ERROR_TYPE_FIELD,
    FINGERPRINT_HEADER,
    INFO_PATH,
    PLAYGROUND_PATH,
    TOKENIZE_PATH,
)

#: Where the page is served (the root too: a person opening the service's address finds it).
PAGE_PATHS = ("/", PLAYGROUND_PATH)
#: path -> (file in service/http/static/, media type), linked by relative URLs (so a proxy's path prefix works).
ASSETS = {
    f"{PLAYGROUND_PATH}/app.js": ("playground.js", "text/javascript; charset=utf-8"),
    # which characters this browser has no font for, and the fix (shared with the docs site)
    f"{PLAYGROUND_PATH}/glyphs.js": ("glyphs.js", "text/javascript; charset=utf-8"),
    f"{PLAYGROUND_PATH}/style.css": ("playground.css", "text/css; charset=utf-8"),
}
#: Served without the API key: static files only, never an API route.
OPEN_PATHS = frozenset({*PAGE_PATHS, *ASSETS})

#: Tokens drawn as spans, at most (the count and ids cover all): ~5,000 draw in milliseconds, the 25k-60k tokens
#: of 100k characters would not.
RENDER_CAP = 5000
#: Typing pauses this long before the text is sent.
DEBOUNCE_MS = 200

# Same origin only, nothing inline: the page cannot send a text anywhere else.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
STATIC_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidate: an upgraded service serves its own page at once
}
_CONFIG_MARK = "__PLAYGROUND_CONFIG__"


def read_static(name: str, package: str = __package__) -> bytes:
    return (resources.files(package) / name).read_bytes()


def page_config(docs_path: str | None) -> dict[str, object]:
    """The page's JSON block: ``service.wire``'s contract (so page and routes cannot drift) and its own limits."""
    return {
        "paths": {
            "info": INFO_PATH.lstrip("/"),
            "encode": ENCODE_PATH.lstrip("/"),
            "tokenize": TOKENIZE_PATH.lstrip("/"),
            "chat_render": CHAT_RENDER_PATH.lstrip("/"),
            "chat_encode": CHAT_ENCODE_PATH.lstrip("/"),
            "docs": docs_path.lstrip("/") if docs_path else None,
        },
        "auth_scheme": AUTH_SCHEME,
        "fingerprint_header": FINGERPRINT_HEADER,
        "error_field": ERROR_FIELD,
        "error_type_field": ERROR_TYPE_FIELD,
        "render_cap": RENDER_CAP,
        "debounce_ms": DEBOUNCE_MS,
        "key_storage": "tokenizer-service.api-key",
    }


def install_static(
    app: FastAPI, page_paths: Iterable[str], page: bytes, assets: Mapping[str, tuple[bytes, str]]
) -> set[str]:
    """Serve ``page`` (HTML) at ``page_paths`` and each asset (body, media type) at its path, from memory, outside
    the OpenAPI schema, with :data:`STATIC_HEADERS`; the paths."""
    served = {**dict.fromkeys(page_paths, (page, "text/html; charset=utf-8")), **assets}

    def endpoint(body: bytes, media_type: str) -> Callable[[], Awaitable[Response]]:
        async def serve_static() -> Response:
            return Response(body, media_type=media_type, headers=STATIC_HEADERS)

        return serve_static

    for path, (body, media_type) in served.items():
        app.router.add_api_route(path, endpoint(body, media_type), methods=["GET"], include_in_schema=False)
    return set(served)


class Playground:
    """The page (its config block filled in) and its assets, read from the package once, answered from memory."""

    def __init__(self, docs_path: str | None) -> None:
        html = read_static("static/playground.html").decode()
        if html.count(_CONFIG_MARK) != 1:
            raise RuntimeError(f"playground.html must hold {_CONFIG_MARK} exactly once")
        # "<" escaped, so no value can close the <script type="application/json"> block
        config = json.dumps(page_config(docs_path), separators=(",", ":")).replace("<", "\\u003c")
        self.page = html.replace(_CONFIG_MARK, config).encode()
        self.assets = {path: (read_static(f"static/{name}"), media) for path, (name, media) in ASSETS.items()}

    def install(self, app: FastAPI) -> set[str]:
        return install_static(app, PAGE_PATHS, self.page, self.assets)
