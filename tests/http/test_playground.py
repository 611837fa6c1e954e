"""The playground page, in-process: served from the package at / and /playground, self-contained (nothing
from another origin, nothing inline but its JSON config), open without the API key while every API call
needs it, linked from the OpenAPI docs, and shipped in the wheel. Its behaviour in a real browser is
tests/http/test_playground_browser.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from urllib.parse import urljoin

import pytest
from fastapi.testclient import TestClient

from service import wire
from service.http import playground
from service.http.app import create_app
from service.http.settings import Settings
from testkit.servers import REPO

STATIC = REPO / "service" / "http" / "static"
ASSET_PATHS = sorted(playground.ASSETS)
STATIC_FILES = ["playground.html", *(name for name, _ in playground.ASSETS.values())]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings())) as c:
        yield c


def page_config(html: str) -> dict:
    match = re.search(r'<script id="config" type="application/json">(.*?)</script>', html, re.S)
    assert match, "the page has no config block"
    return json.loads(match.group(1))


def test_the_page_is_served_at_the_root_and_at_playground_with_its_assets(client):
    root, page = client.get("/"), client.get(wire.PLAYGROUND_PATH)
    assert root.status_code == page.status_code == 200
    assert root.content == page.content
    assert root.headers["content-type"] == "text/html; charset=utf-8"
    html = root.text
    # the page links its assets relatively, and they resolve to the served asset paths from both addresses
    linked = re.findall(r'(?:src|href)="(playground/[^"]+)"', html)
    assert sorted(linked) == sorted(p.lstrip("/") for p in ASSET_PATHS)
    for base in ("/", wire.PLAYGROUND_PATH):
        assert sorted(urljoin(base, link) for link in linked) == ASSET_PATHS
    for path, (name, media_type) in playground.ASSETS.items():
        response = client.get(path)
        assert response.status_code == 200
        assert response.headers["content-type"] == media_type
        assert response.content == (STATIC / name).read_bytes()


def test_the_page_reads_the_wire_contract_from_the_server(client):
    config = page_config(client.get("/").text)
    # relative to the page: /encode from / and from /playground, and under a reverse proxy's path prefix
    assert {name: urljoin(wire.PLAYGROUND_PATH, path) for name, path in config["paths"].items()} == {
        "info": wire.INFO_PATH,
        "encode": wire.ENCODE_PATH,
        "tokenize": wire.TOKENIZE_PATH,
        "chat_render": wire.CHAT_RENDER_PATH,
        "chat_encode": wire.CHAT_ENCODE_PATH,
        "docs": "/docs",
    }
    assert config["auth_scheme"] == wire.AUTH_SCHEME
    assert config["fingerprint_header"] == wire.FINGERPRINT_HEADER
    assert (config["error_field"], config["error_type_field"]) == (wire.ERROR_FIELD, wire.ERROR_TYPE_FIELD)
    # what the page sends is in the contract (a renamed option would be refused as an unknown field)
    script = (STATIC / "playground.js").read_text()
    words = r"return_\w+|add_special_tokens|truncation|max_length|text_pairs"
    words += r"|add_generation_prompt|chat_template|assistant_masks_from"
    sent = set(re.findall(rf"\b({words})\b", script))
    assert sent <= set(wire.ENCODE_OPTIONS) | set(wire.TOKENIZE_OPTIONS) | set(wire.CHAT_OPTIONS) | {"text_pairs"}
    assert {"return_offsets_mapping", "return_special_tokens_mask", "return_sequence_ids"} <= sent
    assert {"add_generation_prompt", "return_assistant_tokens_mask", "assistant_masks_from"} <= sent


def test_the_page_is_self_contained_and_sends_texts_nowhere_else(client):
    response = client.get("/")
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    for path in ASSET_PATHS:
        assert client.get(path).headers["content-security-policy"] == policy
    html = response.text
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S)
    # external scripts of our own, and the JSON config block (data, which no browser executes)
    assert [attrs.strip() for attrs, _ in scripts] == [
        'id="config" type="application/json"',
        'src="playground/glyphs.js" defer',
        'src="playground/app.js" defer',
    ]
    assert not re.search(r"\son\w+\s*=", html), "inline event handlers would need 'unsafe-inline'"
    assert "style=" not in html
    for name in STATIC_FILES:
        text = (STATIC / name).read_text()
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(", text), f"{name} refers elsewhere"
    for name in (name for name in STATIC_FILES if name.endswith(".js")):
        script = (STATIC / name).read_text()
        assert not re.search(r"\bconsole\.", script), f"{name}: the page logs nothing"
        assert "localStorage" not in script and "document.cookie" not in script, f"{name}: the key stays in this tab"
        assert not re.search(r"\binnerHTML\b|\bouterHTML\b|insertAdjacentHTML|document\.write", script), name


def test_with_an_api_key_the_page_is_open_and_every_api_call_needs_the_key():
    with TestClient(create_app(Settings(api_key="s3cret"))) as c:
        for path in ("/", wire.PLAYGROUND_PATH, *ASSET_PATHS):
            assert c.get(path).status_code == 200, path
        assert c.get(wire.INFO_PATH).status_code == 401
        body = {"texts": ["hi"], "return_offsets_mapping": True}
        assert c.post(wire.ENCODE_PATH, json=body).status_code == 401
        assert c.post(wire.TOKENIZE_PATH, json={"texts": ["hi"]}).status_code == 401
        assert c.get("/openapi.json").status_code == 200  # open: it holds no secret (test_api_docs.py)
        key = {"Authorization": "Bearer s3cret"}
        assert c.get(wire.INFO_PATH, headers=key).json()["auth"] is True
        assert c.post(wire.ENCODE_PATH, json=body, headers=key).status_code == 200
        # only the page's own paths are open, not what lies under them
        assert c.get(wire.PLAYGROUND_PATH + "/other.js").status_code == 401


def test_the_openapi_docs_link_to_the_playground(client):
    description = client.get("/openapi.json").json()["info"]["description"]
    links = re.findall(r"\[[^\]]*playground[^\]]*\]\(([^)]+)\)", description, re.I)
    assert links, description
    assert urljoin("/docs", links[0]) == wire.PLAYGROUND_PATH  # the link is relative to the docs page
    assert client.get(urljoin("/docs", links[0])).status_code == 200


def test_page_routes_stay_out_of_the_api_schema_and_are_counted(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert not set(paths) & playground.OPEN_PATHS
    client.get("/")
    assert 'route="/",status="200"' in client.get("/metrics").text


@pytest.mark.timeout(180)
def test_the_page_ships_in_the_wheel(tmp_path):
    """Package data: a wheel built from the checkout carries the page and its assets."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "service", source / "service", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--disable-pip-version-check",
            "-w",
            "dist",
            ".",
        ],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=170,
    )
    (wheel,) = (source / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in STATIC_FILES:
        assert f"service/http/static/{name}" in names
    assert zipfile.ZipFile(wheel).read("service/http/static/playground.js") == (STATIC / "playground.js").read_bytes()
