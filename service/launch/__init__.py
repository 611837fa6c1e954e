"""A private tokenizer service on this machine, started, shared, relaunched and stopped for a training job: what
``TokenizerClient.launch()`` builds an ordinary client on, as its transport. Below the SDK, on
:mod:`service.transport`: :mod:`.supervisor` (the service, its servers, their ownership and relaunch),
:mod:`.rendezvous` (where a machine's processes find it: lock and socket files), :mod:`.transport` (the clients'
transports). POSIX only (Unix sockets, flock).
"""

from .supervisor import LaunchedService
from .transport import AsyncLaunchedTransport, Launch, LaunchedTransport, launch

__all__ = ["launch", "Launch", "LaunchedService", "LaunchedTransport", "AsyncLaunchedTransport"]
