"""A private tokenizer service on this machine, started, shared, relaunched and stopped for a training job.

``TokenizerClient.launch()`` (and ``AsyncTokenizerClient.launch()``) are the user-facing doors; this package
is the process supervisor behind them, a layer above the HTTP SDK (:mod:`service.client`, which never
imports it but from those two methods, when they are called):

- :mod:`.supervisor`: the launched service -- its command, its one set of server processes (one, or
  ``replicas``) per tokenizer and settings per machine, the shares of its ownership, relaunching a server when
  it dies;
- :mod:`.rendezvous`: where the processes of one machine find the service (lock and socket files);
- :mod:`.client` and :mod:`.async_client`: the clients bound to a launched service.

POSIX only (Unix sockets, flock).
"""
