"""The API docs page, in-process: Swagger UI served by the service itself (offline, air-gapped), under the
playground's Content-Security-Policy, open without the API key while the calls it makes need it, with the
bearer scheme declared so that Swagger UI's "Authorize" sends the key."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from urllib.parse import urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from service import wire
from service.http import api_docs, playground
from service.http.app import create_app
from service.http.settings import Settings

KEY = {"Authorization": "Bearer s3cret"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings())) as c:
        yield c


@pytest.fixture(scope="module")
def keyed() -> Iterator[TestClient]:
    with TestClient(create_app(Settings(api_key="s3cret"))) as c:
        yield c


def test_the_docs_page_loads_nothing_from_another_origin(client):
    """Defect: /docs loaded Swagger UI from a CDN, so it was blank offline and in an air-gapped cluster."""
    response = client.get(api_docs.DOCS_PATH)
    assert response.status_code == 200 and response.headers["content-type"] == "text/html; charset=utf-8"
    html = response.text
    linked = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert linked and not re.search(r"https?:|//", html), "the page names another origin"
    assert "<script>" not in html and "style=" not in html, "nothing inline: the policy forbids it"
    # every file it links is served, from its package, resolved as a browser resolves it
    resolved = sorted(urljoin(api_docs.DOCS_PATH, link) for link in linked)
    assert resolved == sorted(api_docs.ASSETS)
    for path, (package, name, media_type) in api_docs.ASSETS.items():
        asset = client.get(path)
        assert asset.status_code == 200, path
        assert asset.headers["content-type"].startswith(media_type)
        assert asset.content == (resources.files(package) / name).read_bytes()
        assert asset.headers["content-security-policy"] == playground.CONTENT_SECURITY_POLICY
    assert b"SwaggerUIBundle" in client.get(f"{api_docs.DOCS_PATH}/swagger-ui-bundle.js").content
    # the page's schema URL, resolved next to it, is the schema
    schema_url = re.search(r'data-openapi="([^"]+)"', html).group(1)
    assert urljoin(api_docs.DOCS_PATH, schema_url) == api_docs.OPENAPI_PATH
    assert client.get(api_docs.OPENAPI_PATH).json()["paths"]


def test_the_docs_page_has_the_playground_policy_and_its_script_names_no_origin(client):
    headers = client.get(api_docs.DOCS_PATH).headers
    policy = headers["content-security-policy"]
    assert policy == playground.CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in policy and "connect-src 'self';" in policy and "unsafe" not in policy
    assert headers["x-content-type-options"] == "nosniff"
    script = client.get(f"{api_docs.DOCS_PATH}/init.js").text
    assert not re.search(r"https?://", script)
    assert "validatorUrl: null" in script, "Swagger UI would send the schema to validator.swagger.io"


def test_no_page_loads_swagger_or_redoc_from_a_cdn(client):
    assert client.get("/redoc").status_code == 404
    for path in ("/", wire.PLAYGROUND_PATH, api_docs.DOCS_PATH):
        assert "cdn" not in client.get(path).text.lower()


def test_with_an_api_key_the_docs_and_schema_are_open_and_the_calls_need_the_key(keyed):
    """Defect: with --api-key, /docs and /openapi.json answered 401 to a browser: the docs could not open."""
    for path in (api_docs.DOCS_PATH, api_docs.OPENAPI_PATH, *api_docs.ASSETS):
        assert keyed.get(path).status_code == 200, path
    assert keyed.get(wire.INFO_PATH).status_code == 401
    assert keyed.post(wire.ENCODE_PATH, json={"texts": ["hi"]}).status_code == 401
    assert keyed.post(wire.ENCODE_PATH, json={"texts": ["hi"]}, headers=KEY).status_code == 200
    # only the docs' own paths are open, not what lies under them
    assert keyed.get(api_docs.DOCS_PATH + "/other.js").status_code == 401


def test_the_schema_declares_the_bearer_scheme_so_authorize_sends_the_key(keyed):
    """Swagger UI's "Authorize" comes from the schema's security scheme; "Try it out" then sends
    'Authorization: Bearer <key>' on every operation whose security names it -- all but the open paths."""
    schema = keyed.get(api_docs.OPENAPI_PATH).json()
    scheme = schema["components"]["securitySchemes"][api_docs.BEARER_SCHEME]
    assert scheme["type"] == "http" and scheme["scheme"].lower() == wire.AUTH_SCHEME.lower()
    assert schema["security"] == [{api_docs.BEARER_SCHEME: []}]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            needs_key = operation.get("security", schema["security"]) != []
            status = getattr(keyed, method)(path).status_code  # no key, no body
            assert needs_key == (status == 401), f"{method.upper()} {path}: security says {needs_key}, got {status}"
    assert schema == keyed.get(api_docs.OPENAPI_PATH).json(), "the schema is completed once, not per request"


def test_without_an_api_key_the_schema_declares_no_security(client):
    schema = client.get(api_docs.OPENAPI_PATH).json()
    assert "security" not in schema and "securitySchemes" not in schema.get("components", {})


def test_the_playground_links_to_the_served_docs(client):
    html = client.get("/").text
    docs = re.search(r'"docs":"([^"]+)"', html).group(1)
    assert urljoin("/", docs) == api_docs.DOCS_PATH and not urlsplit(docs).netloc
