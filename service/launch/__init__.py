"""A private tokenizer service on this machine, started, shared, relaunched and stopped for a training job: what
``TokenizerClient.launch()`` builds an ordinary client on, as its transport. Below the SDK, on
:mod:`service.transport`, in the order they depend on each other: :mod:`.rendezvous` (where a machine's processes
find the service: lock and socket files), :mod:`.command` (what runs: the ``serve`` command, its environment and
launch key), :mod:`.launched` (what a client knows of the service: its replicas, sockets and logs), :mod:`.starting`
(starting the servers by exec, or attaching to those running), :mod:`.ownership` (what this process holds, and the
hooks its first launch installs), :mod:`.recovery` (relaunching a dead replica), :mod:`.transport` (the clients'
transports). The servers are stopped and probed with :mod:`service.processes`, which ``serve --replicas`` uses too.
POSIX only (Unix sockets, flock). Importing it starts nothing and registers nothing.
"""

from .launched import LaunchedService
from .transport import AsyncLaunchedTransport, Launch, LaunchedTransport, launch

__all__ = ["launch", "Launch", "LaunchedService", "LaunchedTransport", "AsyncLaunchedTransport"]
