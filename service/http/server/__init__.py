"""The room where uvicorn's internals are used: everything else in ``service.http`` is plain ASGI.

uvicorn has no public API for what a production tokenizer server needs (bounded header blocks and read
deadlines, a drain that loses nothing, a server that lives exactly as long as its owners), so these modules
override or call its internals; pyproject.toml caps uvicorn below its next minor release and
``tests/http/test_uvicorn_internals.py`` fails on a uvicorn whose internals moved.

- :mod:`.running`: running the app under uvicorn with a graceful drain on SIGTERM;
- :mod:`.protocol`: uvicorn's httptools protocol with the HTTP/1.1 limits it lacks;
- :mod:`.listening`: closing a listener without resetting accepted connections;
- :mod:`.owners`: a private server that stops when the processes it works for are gone.

The serve command uses this room through the names below only.
"""

from .listening import SocketFile
from .owners import CHECK_SECONDS as OWNERS_CHECK_SECONDS
from .owners import OwnersWatch
from .protocol import ConnectionGuard
from .running import bind_listener, bind_unix_listener, connection_guard, run

__all__ = [
    "run",
    "bind_listener",
    "bind_unix_listener",
    "connection_guard",
    "ConnectionGuard",
    "SocketFile",
    "OwnersWatch",
    "OWNERS_CHECK_SECONDS",
]
