"""What goes wrong in an offline job: one root, :class:`JobError`, whose message always says what to change. The
command-line skeleton (:mod:`.cli`) maps them to exit codes: :class:`UnitsMissing` 3, the others 1."""

from __future__ import annotations


class JobError(Exception):
    """An offline job cannot go on; the message says what to change."""


class CorpusError(JobError):
    """The inputs, the plan or the worker set-up cannot work."""


class BadRecord(CorpusError):
    """One record cannot be a document: ``where`` names it (``path:line``, ``path row N``), ``reason`` says why."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason

    def __reduce__(self) -> tuple[type[BadRecord], tuple[str, str]]:
        return type(self), (self.where, self.reason)


class OutputConflict(JobError):
    """The work folder holds another run's outputs (tokenizer, settings or inputs); the message names one."""


class UnitsMissing(JobError):
    """Worker 0 stopped waiting: some units are not done; the message names them (and their workers)."""

    def __init__(self, message: str, missing: list[str]) -> None:
        super().__init__(message)
        self.missing = missing

    def __reduce__(self) -> tuple[type[UnitsMissing], tuple[str, list[str]]]:
        return type(self), (str(self), self.missing)


class StorageError(JobError):
    """A store refused a request (no credentials, access denied, no such bucket) or stayed unreachable past
    the retry deadline; the message names the URL and what the store answered, never a secret."""
