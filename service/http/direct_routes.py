"""The work routes' fast path: their POSTs answered ahead of FastAPI's routing, and the guard that keeps it honest."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fastapi.routing import APIRoute, APIRouter
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from .routes import Routes


class DirectWorkRoutes:
    """Work routes' POSTs go straight to :meth:`Routes.serve`, ahead of FastAPI's routing, dependencies and exit
    stacks (costlier per small request than the work); the FastAPI routes stay registered for the schema. Built
    with the app's middleware stack (when the app first runs), it refuses a dependency it would skip."""

    def __init__(self, app: ASGIApp, routes: Routes, router: APIRouter) -> None:
        refuse_bypassed_dependencies(router, routes.work_routes)
        self.app = app
        self.routes = routes
        self.work_routes = routes.work_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.work_routes.get(scope["path"])
            if route is not None:
                response = await self.routes.serve(route, Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def refuse_bypassed_dependencies(router: APIRouter, work_paths: Iterable[str]) -> None:
    """RuntimeError if a FastAPI dependency is declared where :class:`DirectWorkRoutes` would skip it: on the app or
    its router (which FastAPI runs for every route), or on a POST route at a work path, included routers' too
    (``Depends()`` parameters and ``include_router(dependencies=...)`` included)."""
    paths = set(work_paths)
    found = [f"the app's or its router's dependencies ({_names(router.dependencies)})"] if router.dependencies else []
    app_wide = {d.dependency for d in router.dependencies}  # (in each route's own list too, when added before it)
    for path, declared in _post_dependencies(router.routes, paths):
        if own := [d for d in declared if getattr(d, "call", getattr(d, "dependency", None)) not in app_wide]:
            found.append(f"POST {path}'s dependencies ({_names(own)})")
    if found:
        raise RuntimeError(
            f"{'; '.join(found)} would never run on {', '.join(sorted(paths))}: DirectWorkRoutes "
            "(service/http/direct_routes.py) answers the work routes' POSTs before FastAPI's routing. Check a request "
            "in Routes.serve, or in a middleware added in create_app (as BearerAuth is), instead of with Depends()."
        )


def _post_dependencies(
    routes: Iterable[Any], paths: set[str], prefix: str = "", inherited: tuple[Any, ...] = ()
) -> Iterator[tuple[str, list[Any]]]:
    """(path, dependencies) of each POST route at one of ``paths`` that declares any."""
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI 0.16x includes a router as is, not its routes
        if isinstance(included, APIRouter):
            context = route.include_context
            yield from _post_dependencies(
                included.routes, paths, prefix + context.prefix, (*inherited, *context.dependencies)
            )
        elif isinstance(route, APIRoute) and prefix + route.path in paths and "POST" in (route.methods or ()):
            declared = [*inherited, *route.dependant.dependencies]  # (the route's and its router's, at creation)
            if declared:
                yield prefix + route.path, declared


def _names(dependencies: Iterable[Any]) -> str:
    calls = (getattr(d, "dependency", None) or getattr(d, "call", None) for d in dependencies)
    return ", ".join(getattr(call, "__name__", repr(call)) for call in calls)
