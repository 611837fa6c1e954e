"""What goes wrong reading a corpus: one error for the job's set-up, one for a record."""

from __future__ import annotations


class CorpusError(Exception):
    """The inputs, the plan or the worker set-up cannot work; the message says what to change."""


class BadRecord(CorpusError):
    """One record cannot be read as a document. ``where`` names it (``path:line``, or ``path row N`` for
    Parquet), ``reason`` says what is wrong with it."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason

    def __reduce__(self) -> tuple[type[BadRecord], tuple[str, str]]:
        return type(self), (self.where, self.reason)
