"""Where a service is: its URL (``http://``, ``https://`` or ``http+unix://`` for a Unix domain socket), read into
what a connection needs, and the limits of a socket's path. Standard library only: the client's transports, the
launcher and the server all read it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Final
from urllib.parse import quote, unquote, urlsplit

#: A service on a Unix socket: ``http+unix://``, the socket's path percent-encoded (``/`` as ``%2F``), then a route:
#: ``http+unix://%2Ftmp%2Fts.sock/encode``. requests-unixsocket's and Docker's convention: a base URL plus a route
#: stays a URL, and a comma-separated list of them stays one.
UNIX_SCHEME: Final = "http+unix"
#: The ``Host`` header sent to a service on a Unix socket (it has no host name).
UNIX_HOST: Final = "localhost"
#: The longest Unix socket path, in bytes: ``sun_path`` holds 108 with its final NUL on Linux (104 on macOS).
MAX_SOCKET_PATH_BYTES: Final = 107


@dataclass(frozen=True)
class ServiceAddress:
    """Where one request goes (:func:`parse_service_url`)."""

    scheme: str  # "http", "https" or UNIX_SCHEME
    host: str  # the host name (UNIX_HOST for a socket): what the Host header names
    port: int  # the TCP port (0 for a socket)
    socket_path: str | None  # the Unix socket's path, or None for TCP
    target: str  # path and query ("/" when the URL has none)

    @property
    def origin(self) -> tuple[str, str, int]:
        """What a connection pool keys on: connections to the same origin are interchangeable."""
        return (self.scheme, self.socket_path or self.host, self.port)


def unix_socket_url(path: str) -> str:
    """The base URL of a service listening on the Unix socket at ``path`` (made absolute)."""
    return f"{UNIX_SCHEME}://{quote(os.path.abspath(path), safe='')}"


@lru_cache(maxsize=256)
def parse_service_url(url: str) -> ServiceAddress:
    """Read an absolute ``http://``, ``https://`` or ``http+unix://`` URL; ValueError saying what to write instead
    (a socket's path written otherwise gets its ``http+unix://`` form)."""
    parts = urlsplit(url)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    if parts.scheme == UNIX_SCHEME and parts.netloc:
        path = unquote(parts.netloc)
        if not path.startswith("/"):
            raise ValueError(f"{url!r}: the socket path must be absolute, as in {unix_socket_url(path)!r}")
        return ServiceAddress(UNIX_SCHEME, UNIX_HOST, 0, path, target)
    if parts.scheme in ("http", "https") and parts.hostname:
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise ValueError(f"{url!r}: {exc}") from None
        return ServiceAddress(parts.scheme, parts.hostname, port, None, target)
    socket_path = _socket_path_written_otherwise(url, parts.scheme)
    if socket_path is not None:
        raise ValueError(
            f"{url!r} is not a service URL: a Unix socket is written {UNIX_SCHEME}://<its path percent-encoded>, "
            f"here {unix_socket_url(socket_path)!r}"
        )
    raise ValueError(
        f"not a service URL: {url!r}; write http://HOST:PORT, https://HOST:PORT or "
        f"{UNIX_SCHEME}://<socket path percent-encoded>"
    )


def _socket_path_written_otherwise(url: str, scheme: str) -> str | None:
    """The socket path of ``unix:/p``, ``unix:///p``, ``http+unix:///p`` or a bare ``/p``, else None."""
    if scheme in ("unix", UNIX_SCHEME):
        rest = url.split(":", 1)[1]
        path = "/" + rest.lstrip("/") if rest.startswith("/") else rest
        return path if path.strip("/") else None
    return url if url.startswith("/") else None
