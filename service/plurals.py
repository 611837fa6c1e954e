"""Counts in words: ``1 Rust thread``, ``2 Rust threads``, ``1,024 records``. Standard library only (the launcher,
the server and the jobs all say counts)."""

from __future__ import annotations


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` and the noun, singular for exactly one (``plural`` default: ``singular + "s"``)."""
    return f"{count:,} {singular if count == 1 else plural or singular + 's'}"
