"""What ``serve`` says when it cannot listen on its port (``serve`` and ``serve --replicas`` alike): the reason, what
listens there when it is a tokenizer-service (its ``/info``, asked with a short timeout), and how to pick another
port."""

from __future__ import annotations

import contextlib
import errno
import json
import socket
from typing import Any

from ..transport.base import Request, Timeout
from ..transport.exceptions import TransportError
from ..transport.stdlib import HTTPTransport
from ..wire import ERROR_TYPE_FIELD, ERROR_TYPES, FINGERPRINT_PREFIX, INFO_PATH

#: How long ``serve`` waits on what holds its port to say what it is: never long enough to matter to a failed start.
PROBE_TIMEOUT = Timeout(connect=0.5, read=1.0)
#: How many ports above a taken one are tried for a free one to suggest.
PORTS_TRIED = 100


def local_host(host: str) -> str:
    """Where to reach a server listening on ``host`` from this machine (a wildcard host: the loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def cannot_listen(prog: str, host: str, port: int, exc: OSError) -> str:
    """The error ``serve`` prints when binding ``host``:``port`` failed with ``exc``: one line, then for a port in use
    what listens there (when it says) and how to pick another."""
    said = f"{prog}: cannot listen on {host}:{port}: {exc.strerror or exc}"
    if exc.errno != errno.EADDRINUSE:
        return said
    lines = [said]
    there = _what_listens(host, port)
    lines.append(f"  listening there: {there or 'no tokenizer-service (nothing there answered /info as one)'}")
    free = _free_port_above(host, port)
    other = f"--port {free}" if free is not None else "--port <another>"
    lines.append(
        f"  pick another port: {prog} {other} (in a checkout: make serve ARGS='{other}'), or --port 0 for any free one"
    )
    return "\n".join(lines)


def _what_listens(host: str, port: int) -> str | None:
    """What the server on ``port`` serves, from its ``/info``, when it is a tokenizer-service; else None."""
    target = local_host(host)
    url = f"http://{f'[{target}]' if ':' in target else target}:{port}"
    transport = HTTPTransport()
    try:
        response = transport.handle_request(Request("GET", url + INFO_PATH, {}, timeout=PROBE_TIMEOUT))
        info: Any = json.loads(bytes(response.body))
    except (TransportError, ValueError):
        return None
    finally:
        transport.close()
    if response.status == ERROR_TYPES["unauthorized"].status and isinstance(info, dict):
        if info.get(ERROR_TYPE_FIELD) == "unauthorized":
            return f"a tokenizer-service that asks for an API key (its /info says no more): use it at {url}, or stop it"
    fingerprint = info.get("fingerprint") if isinstance(info, dict) else None
    if not isinstance(fingerprint, str) or not fingerprint.startswith(FINGERPRINT_PREFIX):
        return None
    versions = info.get("versions") if isinstance(info.get("versions"), dict) else {}
    revision = f" at revision {info['revision']}" if info.get("revision") else ""
    return (
        f"a tokenizer-service {versions.get('service', '(version unknown)')} serving {info.get('source')}{revision} "
        f"({fingerprint[: len(FINGERPRINT_PREFIX) + 12]}): use it at {url}, or stop it"
    )


def _free_port_above(host: str, port: int) -> int | None:
    """The first port above ``port`` that ``host`` can bind now (a suggestion: it may be taken by the next start)."""
    for candidate in range(port + 1, min(port + 1 + PORTS_TRIED, 65536)):
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.bind((host, candidate))
            return candidate
    return None
