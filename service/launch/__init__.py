"""A private tokenizer service on this machine, started, shared, relaunched and stopped for a training job.

``TokenizerClient.launch()`` (and ``AsyncTokenizerClient.launch()``) are the user-facing doors: they build an
ordinary client on the transport this package makes. It is a layer below the SDK (:mod:`service.client`
imports it when ``launch`` is called; it never imports the client), on the transports (:mod:`service.transport`):

- :mod:`.supervisor`: the launched service -- its command, its one set of server processes (one, or
  ``replicas``) per tokenizer and settings per machine, the shares of its ownership, relaunching a server when
  it dies;
- :mod:`.rendezvous`: where the processes of one machine find the service (lock and socket files);
- :mod:`.transport`: the transport of a client bound to a launched service (:class:`LaunchedTransport` and its
  async twin): the service, this client's share of it, calls moved off a replica that died.

POSIX only (Unix sockets, flock).
"""

from .supervisor import LaunchedService
from .transport import AsyncLaunchedTransport, Launch, LaunchedTransport, launch

__all__ = ["launch", "Launch", "LaunchedService", "LaunchedTransport", "AsyncLaunchedTransport"]
