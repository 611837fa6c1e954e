"""A private tokenizer service on this machine, started, shared, relaunched and stopped for a training job, behind
``TokenizerClient.launch()`` (and ``AsyncTokenizerClient.launch()``), which build an ordinary client on the
transport this package makes. A layer below the SDK (it never imports the client), on :mod:`service.transport`:

- :mod:`.supervisor`: the launched service -- its command, its server processes (one, or ``replicas``) per
  tokenizer and settings per machine, the shares of its ownership, relaunching a server when it dies;
- :mod:`.rendezvous`: where the processes of one machine find the service (lock and socket files);
- :mod:`.transport`: the transport of a client bound to a launched service, and its async twin.

POSIX only (Unix sockets, flock).
"""

from .supervisor import LaunchedService
from .transport import AsyncLaunchedTransport, Launch, LaunchedTransport, launch

__all__ = ["launch", "Launch", "LaunchedService", "LaunchedTransport", "AsyncLaunchedTransport"]
