"""The room where uvicorn's internals are used (everything else in ``service.http`` is plain ASGI), for what
uvicorn has no public option for: :mod:`.protocol` (bounded header blocks, read deadlines), :mod:`.running` and
:mod:`.listening` (a lossless drain), :mod:`.owners` (a server that lives as long as its owners). Each internal is
kept only because a real-server test fails without it: :data:`.internals.KEPT` lists them (where each lives in
uvicorn, what the room does with it, the tests that fail without it) and :data:`.internals.UVICORN_RELEASES` the
releases they are known to work on; ``tests/http/test_uvicorn_internals.py`` checks that table against the
installed uvicorn, and ``serve`` refuses a release outside the range at start-up.

Public options used: ``timeout_keep_alive``, ``timeout_graceful_shutdown`` (bounds uvicorn's own shutdown),
``http=`` the guarded protocol and ``ws="none"``, ``h11_max_incomplete_event_size`` (h11, comparison only). Not
enough: ``limit_concurrency`` answers 503 in its own shape on an accepted connection (idle ones still take
descriptors without bound); h11's size limit bounds only its header block (a 400, no deadlines, ~5x the CPU);
``timeout_graceful_shutdown`` alone closes the listener at once (resetting its accept queue), with no 503 window
and the signal raised again at exit.

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
