"""The uvicorn internals that service/http/server/ relies on, checked against the installed uvicorn.

The room's table (``service/http/server/internals.py``: ``KEPT``) is the one list of them, each with the tests that
fail without it, and ``UVICORN_RELEASES`` the releases it is known to work on (pyproject.toml's server extra
declares the same range). This fails on a uvicorn outside that range, and on one whose listed internals moved,
before a silently broken override (a renamed method is simply never called) reaches a server. CI runs it at the
lowest and the newest release of the range (.ci/run).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from typing import Any

from service.http.server.internals import KEPT, MODULES, UVICORN_RELEASES
from testkit.servers import REPO


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)[1:]  # after self


def server_extra_uvicorn() -> str:
    """The uvicorn requirement of pyproject.toml's server extra."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (uvicorn,) = [
        Requirement(line) for line in project["optional-dependencies"]["server"] if Requirement(line).name == "uvicorn"
    ]
    return str(uvicorn.specifier)


def test_the_server_extra_admits_the_uvicorn_releases_the_room_was_tested_on_and_no_other():
    """pyproject.toml's server extra and the room's table declare one range (serve's start-up check reads the
    installed extra): to move it, run the table's tests on the new release, then change both."""
    from packaging.specifiers import SpecifierSet

    assert SpecifierSet(server_extra_uvicorn()) == SpecifierSet(UVICORN_RELEASES), (
        server_extra_uvicorn(),
        UVICORN_RELEASES,
    )
    lowest = [spec for spec in SpecifierSet(UVICORN_RELEASES) if spec.operator == ">="]
    newest = [spec for spec in SpecifierSet(UVICORN_RELEASES) if spec.operator == "<"]
    assert len(lowest) == 1 and len(newest) == 1, f"{UVICORN_RELEASES}: a lowest tested release and an upper bound"


def test_the_installed_uvicorn_is_in_the_range_the_room_was_tested_on():
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    installed = version("uvicorn")
    assert SpecifierSet(UVICORN_RELEASES).contains(installed), (
        f"uvicorn {installed}: the room accepts {UVICORN_RELEASES}"
    )


def test_the_public_options_the_room_sets_are_there():
    """The Config the server runs with (``timeout_graceful_shutdown`` came in 0.22.0: on 0.21 serve crashed at
    start-up while every internal was there), for each --http-protocol."""
    from service.http.server.protocol import ConnectionGuard
    from service.http.server.running import server_config

    guard = ConnectionGuard(max_header_bytes=8192, header_timeout=5, body_timeout=5, max_connections=8, keep_alive=5)
    for protocol in ("guarded", "h11", "httptools"):
        config = server_config(
            None, log_level="info", access_log=False, grace_seconds=5, guard=guard, http_protocol=protocol
        )
        assert config.timeout_graceful_shutdown == 5 and config.server_header is False, protocol


async def parsed_one_request(app: Any = lambda scope, receive, send: None) -> Any:
    """uvicorn's httptools protocol on a transport that keeps what is written, one GET parsed (its cycle made and
    ``app`` called on it)."""
    import uvicorn
    from uvicorn.protocols.http import httptools_impl
    from uvicorn.server import ServerState

    config = uvicorn.Config(app, ws="none", lifespan="off")
    config.load()
    made = httptools_impl.HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    made.connection_made(_NullTransport())
    made.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await asyncio.sleep(0)
    return made


def test_a_cycle_whose_keep_alive_is_cleared_answers_connection_close():
    """What the drain relies on when it clears ``RequestResponseCycle.keep_alive``: uvicorn then writes
    ``Connection: close`` on the answer (0.53.0 on; before, only where the request or the app asked for it, and
    the drain tests of tests/http/test_drain.py failed on 0.52.4 while every internal was there)."""

    async def app_that_waits(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.Event().wait()  # the answer is sent below, as the drain finds the cycle

    async def answered() -> bytes:
        connection = await parsed_one_request(app_that_waits)
        connection.cycle.keep_alive = False
        await connection.cycle.send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]}
        )
        return b"".join(connection.transport.written)

    head = asyncio.run(answered()).lower()
    assert b"\r\nconnection: close\r\n" in head, head


def test_the_uvicorn_internals_the_room_relies_on_are_still_there():
    import uvicorn
    from uvicorn.protocols.http import flow_control, httptools_impl

    from service.http.server.protocol import GuardedHttpToolsProtocol
    from service.http.server.running import DrainingServer

    connection = asyncio.run(parsed_one_request())
    classes: dict[str, tuple[type, Any, type | None]] = {  # the class, an instance, our subclass
        "Server": (uvicorn.Server, uvicorn.Server(uvicorn.Config(lambda scope, receive, send: None)), DrainingServer),
        "HttpToolsProtocol": (httptools_impl.HttpToolsProtocol, connection, GuardedHttpToolsProtocol),
        "RequestResponseCycle": (httptools_impl.RequestResponseCycle, connection.cycle, None),
        "FlowControl": (flow_control.FlowControl, connection.flow, None),
    }
    assert set(MODULES) == set(classes) and {kept.owner for kept in KEPT} == set(classes)
    for cls_name, (cls, *_) in classes.items():
        assert cls.__module__ == MODULES[cls_name], f"uvicorn's {cls_name} moved to {cls.__module__}"
    sources = [path.read_text() for path in (REPO / "tests").rglob("test_*.py")]
    defined_tests = {name for source in sources for name in re.findall(r"def (test_\w+)", source)}
    for kept in KEPT:
        cls, instance, ours = classes[kept.owner]
        where = f"uvicorn's {kept.where}"
        assert kept.tests and set(kept.tests) <= defined_tests, f"{where}: no test, or one that is gone: {kept.tests}"
        if kept.parameters is None:  # an attribute: on an instance, or set by the class's code later (Server.servers)
            assert hasattr(instance, kept.name) or f"self.{kept.name} =" in inspect.getsource(cls), f"{where} is gone"
            continue
        method = getattr(cls, kept.name, None)
        assert callable(method), f"{where}() is gone"
        assert parameters(method) == list(kept.parameters), f"{where}() now takes {parameters(method)}"
        if ours is not None and kept.name in vars(ours):
            assert parameters(getattr(ours, kept.name)) == list(kept.parameters), f"our override of {where} differs"
    # every override in the room is in the table (a new one cannot come in unchecked)
    listed = {(kept.owner, kept.name) for kept in KEPT}
    for cls_name, (cls, _, ours) in classes.items():
        if ours is not None:
            overrides = {name for name in vars(ours) if callable(vars(ours)[name]) and hasattr(cls, name)}
            assert overrides <= {name for c, name in listed if c == cls_name} | {"__init__"}, (cls_name, overrides)


class _NullTransport:
    """Enough of an asyncio transport for a protocol to be made, parse one request and answer it."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8000) if name in ("sockname", "peername") else default

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass
