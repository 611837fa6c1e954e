"""The work routes' fast path (service/http/direct_routes.py) answers their POSTs before FastAPI's routing, so a
dependency declared the FastAPI way would never run there: the app refuses to start with one, naming it, and starts
with one anywhere else."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from fastapi import APIRouter, Depends, FastAPI
from fastapi.testclient import TestClient

import service.http.app as app_module
from service.http.app import create_app
from service.http.settings import Settings


def verify_token() -> None:
    """A dependency someone means to run on every request."""


async def handler() -> dict[str, str]:
    return {}


def app_wide(app: FastAPI) -> None:
    app.router.dependencies.append(Depends(verify_token))


def on_an_included_router(app: FastAPI) -> None:
    router = APIRouter(dependencies=[Depends(verify_token)])
    router.add_api_route("/encode", handler, methods=["POST"])
    app.include_router(router)


def by_include_router(app: FastAPI) -> None:
    router = APIRouter()
    router.add_api_route("/decode", handler, methods=["POST"])
    outer = APIRouter(prefix="/chat")
    outer.add_api_route("/encode", handler, methods=["POST"])
    app.include_router(router, dependencies=[Depends(verify_token)])
    app.include_router(outer, dependencies=[Depends(verify_token)])


def on_the_route(app: FastAPI) -> None:
    app.add_api_route("/tokenize", handler, methods=["POST"], dependencies=[Depends(verify_token)])


def as_a_parameter(app: FastAPI) -> None:
    @app.post("/lengths")
    async def lengths(token: None = Depends(verify_token)) -> dict[str, str]:
        return {}


@pytest.mark.parametrize(
    ("add", "named"),
    [
        (app_wide, "the app's or its router's dependencies (verify_token)"),
        (on_an_included_router, "POST /encode's dependencies (verify_token)"),
        (
            by_include_router,
            "POST /decode's dependencies (verify_token); POST /chat/encode's dependencies (verify_token)",
        ),
        (on_the_route, "POST /tokenize's dependencies (verify_token)"),
        (as_a_parameter, "POST /lengths's dependencies (verify_token)"),
    ],
    ids=lambda value: getattr(value, "__name__", "")[:24],
)
def test_a_dependency_a_work_route_would_skip_stops_the_app_from_starting(add: Callable[[FastAPI], None], named: str):
    app = create_app(Settings())
    add(app)
    with pytest.raises(RuntimeError) as refused, TestClient(app):
        pass
    message = str(refused.value)
    assert message.startswith(f"{named} would never run on /chat/encode, /chat/render, /decode, /encode, /lengths")
    assert "DirectWorkRoutes" in message and "instead of with Depends()" in message


def test_create_app_refuses_a_dependency_given_to_fastapi(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(app_module, "FastAPI", functools.partial(FastAPI, dependencies=[Depends(verify_token)]))
    with pytest.raises(RuntimeError, match=r"^the app's or its router's dependencies \(verify_token\) would never"):
        create_app(Settings())


def test_a_dependency_elsewhere_is_left_to_fastapi():
    app = create_app(Settings())
    calls: list[str] = []
    app.add_api_route("/audit", handler, methods=["POST"], dependencies=[Depends(lambda: calls.append("ran"))])
    app.add_api_route("/encode", handler, methods=["GET"], dependencies=[Depends(verify_token)])  # not a POST
    with TestClient(app) as client:
        assert client.post("/audit").status_code == 200
        assert client.post("/encode", json={"texts": ["hello"]}).status_code == 200
    assert calls == ["ran"]
