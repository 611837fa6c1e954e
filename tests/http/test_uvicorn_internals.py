"""The uvicorn internals that service/http/server/ relies on, checked against the installed uvicorn.

The room's docstring (``service/http/server/__init__.py``) is the one list of them, each with the test that fails
without it. This fails first on a uvicorn other than the release pyproject.toml pins (the one those tests ran on),
and on one whose listed internals moved, before a silently broken override (a renamed method is simply never
called) reaches a server.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any

from testkit.servers import REPO

#: A kept internal in the room's docstring: ``Class.name`` for an attribute, ``Class.name(params)`` for a method.
INTERNAL = re.compile(r"``(\w+)\.(\w+)(\([\w, ]*\))?``")


def kept_internals() -> list[tuple[str, str, list[str] | None, list[str]]]:
    """(class, name, the parameters after self or None for an attribute, the tests) for each kept internal."""
    from service.http import server

    kept = (server.__doc__ or "").split("Kept, each with")[1].split("\n\n", 2)[1]
    rows = []
    for item in re.split(r"\n- ", "\n" + kept)[1:]:
        tests = re.findall(r"\b(test_\w+)", item)
        for cls, name, call in INTERNAL.findall(item):
            params = [p.strip() for p in call[1:-1].split(",") if p.strip()] if call else None
            rows.append((cls, name, params, tests))
    return rows


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)[1:]  # after self


def test_the_installed_uvicorn_is_the_release_the_room_was_tested_on():
    """pyproject.toml admits only the uvicorn release(s) the room's tests ran on: to move to another, run them on
    it (the tests in the room's table), then widen the pin."""
    from importlib.metadata import version

    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pin = next(Requirement(line) for line in project["optional-dependencies"]["server"] if line.startswith("uvicorn"))
    assert pin.specifier and all(spec.operator == "==" for spec in pin.specifier), f"{pin}: one tested release"
    assert pin.specifier.contains(version("uvicorn")), f"uvicorn {version('uvicorn')} is installed; the room pins {pin}"


def test_the_uvicorn_internals_the_room_relies_on_are_still_there():
    import uvicorn
    from uvicorn.protocols.http import flow_control, httptools_impl
    from uvicorn.server import ServerState

    from service.http.server.protocol import GuardedHttpToolsProtocol
    from service.http.server.running import DrainingServer

    async def made() -> Any:
        config = uvicorn.Config(lambda scope, receive, send: None, ws="none", lifespan="off")
        config.load()
        made = httptools_impl.HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
        made.connection_made(_NullTransport())
        made.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0)
        return made

    connection = asyncio.run(made())
    classes: dict[str, tuple[type, Any, type | None]] = {  # the class, an instance, our subclass
        "Server": (uvicorn.Server, uvicorn.Server(uvicorn.Config(lambda scope, receive, send: None)), DrainingServer),
        "HttpToolsProtocol": (httptools_impl.HttpToolsProtocol, connection, GuardedHttpToolsProtocol),
        "RequestResponseCycle": (httptools_impl.RequestResponseCycle, connection.cycle, None),
        "FlowControl": (flow_control.FlowControl, connection.flow, None),
    }
    rows = kept_internals()
    assert len(rows) >= 20 and {cls for cls, *_ in rows} == set(classes), "the table no longer parses"
    sources = [path.read_text() for path in (REPO / "tests").rglob("test_*.py")]
    defined_tests = {name for source in sources for name in re.findall(r"def (test_\w+)", source)}
    for cls_name, name, params, tests in rows:
        cls, instance, ours = classes[cls_name]
        where = f"uvicorn's {cls_name}.{name}"
        assert tests and set(tests) <= defined_tests, f"{where}: the table names no test, or one that is gone: {tests}"
        if params is None:  # an attribute: on an instance, or set by the class's code later (Server.servers)
            assert hasattr(instance, name) or f"self.{name} =" in inspect.getsource(cls), f"{where} is gone"
            continue
        assert callable(getattr(cls, name, None)), f"{where}() is gone"
        assert parameters(getattr(cls, name)) == params, f"{where}() now takes {parameters(getattr(cls, name))}"
        if ours is not None and name in vars(ours):
            assert parameters(getattr(ours, name)) == params, f"our override of {where} takes other parameters"
    # every override in the room is in the table (a new one cannot come in unchecked)
    listed = {(cls, name) for cls, name, *_ in rows}
    for cls_name, (cls, _, ours) in classes.items():
        if ours is not None:
            overrides = {name for name in vars(ours) if callable(vars(ours)[name]) and hasattr(cls, name)}
            assert overrides <= {name for c, name in listed if c == cls_name} | {"__init__"}, (cls_name, overrides)


class _NullTransport:
    """Enough of an asyncio transport for a protocol to be made and parse one request."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8000) if name in ("sockname", "peername") else default

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass
