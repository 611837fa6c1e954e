"""What a launched client knows of its service: :class:`LaunchedService`, where the replicas, their sockets, records
and logs are, and the command that starts them. Picklable (a DataLoader worker gets a copy) and holding no lock or
process: this process's hold on the service is :mod:`.ownership`'s, relaunching a dead replica :mod:`.recovery`'s."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..processes import process_alive
from .command import ServeCommand
from .rendezvous import Record, ServicePaths

__all__ = ["LaunchedService"]


@dataclass
class LaunchedService:
    """Where a launched service's replicas and their logs are; picklable (a DataLoader worker gets a copy), holding
    no lock or process. :attr:`pids` are the servers running now, relaunched or not; ``url``, ``socket_path``,
    ``log_path`` and :attr:`pid` are the first replica's (the only one's, without replicas)."""

    urls: tuple[str, ...]  # one per replica, as the client spreads its calls over them
    fingerprint: str
    first_pids: tuple[int, ...]  # the servers' when this process launched or attached to them
    launched: bool  # whether this process started them (else it attached to running ones)
    startup_seconds: float  # from the call to launch() to a ready service
    key: str
    command: ServeCommand = field(repr=False)
    paths: tuple[ServicePaths, ...] = field(repr=False)
    start_timeout: float = field(repr=False)

    @property
    def replicas(self) -> int:
        return len(self.paths)

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def socket_path(self) -> str:
        return self.paths[0].socket

    @property
    def log_path(self) -> str:
        return self.paths[0].log  # every launch of the replica writes here, relaunches appended

    @property
    def log_paths(self) -> tuple[str, ...]:
        return tuple(paths.log for paths in self.paths)

    @property
    def pids(self) -> tuple[int, ...]:
        """The servers' pids now: after a relaunch, by whichever process, the relaunched one's (as recorded)."""
        return tuple(self.pid_of(replica) for replica in range(self.replicas))

    @property
    def pid(self) -> int:
        return self.pid_of(0)

    def pid_of(self, replica: int) -> int:
        """The server's pid now for ``replica`` (as recorded: relaunched or not)."""
        record = Record.read(self.paths[replica].record)
        return record.pid if record is not None else self.first_pids[replica]

    def describe(self, owner: str) -> str:
        if self.replicas == 1:
            return f"{owner}({self.socket_path!r}, pid={self.pid}, log={self.log_path!r})"
        folder = os.path.dirname(self.socket_path)
        return f"{owner}({self.replicas} replicas in {folder!r}, pids={list(self.pids)}, logs={list(self.log_paths)})"

    def replica_at(self, url: str) -> int:
        return next((i for i, base in enumerate(self.urls) if url.startswith(base + "/") or url == base), 0)

    def others_running(self, replica: int) -> bool:
        """Whether a replica but ``replica`` runs (to take the calls meanwhile)."""
        for other, paths in enumerate(self.paths):
            if other != replica and (record := Record.read(paths.record)) is not None:
                if process_alive(record.pid, paths.socket):
                    return True
        return False
