"""Counts in words: ``1 Rust thread``, ``2 Rust threads``. Standard library only (the launcher and the server
both say counts)."""

from __future__ import annotations


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` and the noun, singular for exactly one (``plural`` default: ``singular + "s"``)."""
    return f"{count} {singular if count == 1 else plural or singular + 's'}"
