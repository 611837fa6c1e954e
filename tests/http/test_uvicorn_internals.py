"""The uvicorn internals that service/http/server/ relies on, checked against the installed uvicorn.

The server's room for uvicorn (service/http/server/) overrides and calls internals uvicorn does not promise
to keep; pyproject.toml caps uvicorn below its next minor release, and this fails first on a uvicorn whose
internals moved, before a silently broken override (a renamed method is simply never called) reaches a
server.
"""

from __future__ import annotations

from typing import Any


def test_the_uvicorn_internals_the_server_relies_on_are_still_there():
    """service/http/server/ overrides and calls uvicorn internals (protocol.py and running.py list them);
    pyproject.toml caps uvicorn below its next minor release. This fails on a uvicorn whose internals moved,
    before a silently broken override (a renamed method is simply never called) reaches a server."""
    import asyncio
    import inspect

    import uvicorn
    from uvicorn.protocols.http import httptools_impl
    from uvicorn.server import ServerState

    from service.http.server import protocol, running

    def parameters(function) -> list[str]:
        return list(inspect.signature(function).parameters)

    documented = (protocol.__doc__ or "") + (running.__doc__ or "")
    cls = httptools_impl.HttpToolsProtocol
    methods = {
        "connection_made": ["self", "transport"],
        "connection_lost": ["self", "exc"],
        "data_received": ["self", "data"],
        "on_message_begin": ["self"],
        "on_headers_complete": ["self"],
        "on_body": ["self", "body"],
        "on_message_complete": ["self"],
        "on_response_complete": ["self"],
        "shutdown": ["self"],
        "pause_writing": ["self"],
        "resume_writing": ["self"],
        "_start_asgi_task": ["self", "cycle", "app"],
        "_unset_keepalive_if_required": ["self"],
        "timeout_keep_alive_handler": ["self"],
    }
    for name, expected in methods.items():
        assert parameters(getattr(cls, name)) == expected, f"HttpToolsProtocol.{name} changed"
        assert f"``{name}" in documented, f"{name} is used but not listed in protocol.py's docstring"

    async def made() -> Any:
        config = uvicorn.Config(lambda scope, receive, send: None, ws="none", lifespan="off")
        config.load()
        made = cls(config=config, server_state=ServerState(), app_state={})
        made.connection_made(_NullTransport())
        made.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0)
        return made

    connection = asyncio.run(made())
    attributes = ["transport", "flow", "parser", "pipeline", "cycle", "url", "headers", "loop", "server_state"]
    attributes += ["timeout_keep_alive", "timeout_keep_alive_task"]
    for name in attributes:
        assert hasattr(connection, name), f"HttpToolsProtocol instances no longer have {name!r}"
        assert f"``{name}" in documented, f"{name} is used but not listed in protocol.py's docstring"
    assert isinstance(connection.server_state.total_requests, int)
    for name in ("read_paused", "write_paused", "pause_reading", "resume_reading"):
        assert hasattr(connection.flow, name), f"uvicorn's FlowControl no longer has {name!r}"
    cycle = connection.cycle
    assert isinstance(cycle, httptools_impl.RequestResponseCycle)
    for name in ("transport", "keep_alive", "response_started", "response_complete", "disconnected", "more_body"):
        assert hasattr(cycle, name), f"RequestResponseCycle no longer has {name!r}"
    assert isinstance(cycle.message_event, asyncio.Event)

    # running.py: the server's signal handler, listeners, connections and graceful-shutdown timeout
    assert parameters(uvicorn.Server.handle_exit) == ["self", "sig", "frame"]
    assert parameters(uvicorn.Server.serve) == parameters(uvicorn.Server.run) == ["self", "sockets"]
    server = uvicorn.Server(uvicorn.Config(lambda scope, receive, send: None))
    assert isinstance(server.server_state.connections, set) and server.should_exit is False
    assert "self.servers" in inspect.getsource(uvicorn.Server.startup)
    shutdown = inspect.getsource(uvicorn.Server.shutdown)
    assert "self.servers" in shutdown and "self.config.timeout_graceful_shutdown" in shutdown
    for name in ("run", "serve", "handle_exit", "servers", "server_state.connections", "should_exit"):
        assert f"``Server.{name}" in documented, name
    assert "``Config.timeout_graceful_shutdown``" in documented


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
