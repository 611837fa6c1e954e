"""A fingerprint pin (``expected_fingerprint=``): its form checked, and whether it names the fingerprint a service
answers (the whole ``sha256:`` fingerprint, or a prefix of it). Standard library only; the fingerprint's form is the
wire's (:data:`service.wire.FINGERPRINT_PREFIX`)."""

from __future__ import annotations

from typing import Final

from .wire import FINGERPRINT_PREFIX

#: The fewest hex digits a pin may give (``sha256:abb08fd1451a``): 48 bits name one tokenizer in practice.
MIN_FINGERPRINT_DIGITS: Final = 12


def check_fingerprint_pin(expected: str) -> str:
    """``expected`` as a pin (a whole fingerprint, or at least its first :data:`MIN_FINGERPRINT_DIGITS` hex digits),
    or a ValueError saying the form."""
    digits = expected[len(FINGERPRINT_PREFIX) :] if expected.startswith(FINGERPRINT_PREFIX) else None
    if digits is None or len(digits) < MIN_FINGERPRINT_DIGITS or len(digits) > 64:
        raise ValueError(
            f"expected_fingerprint={expected!r} is not a fingerprint: it is {FINGERPRINT_PREFIX!r} and 64 hex digits "
            f"(GET /info reports it), or the first {MIN_FINGERPRINT_DIGITS} or more of them"
        )
    if digits.strip("0123456789abcdef"):
        raise ValueError(f"expected_fingerprint={expected!r}: a fingerprint's digits are lowercase hex (0-9, a-f)")
    return expected


def fingerprint_matches(expected: str, actual: str | None) -> bool:
    """Whether a pin (a whole fingerprint or a prefix: :func:`check_fingerprint_pin`) names ``actual``."""
    return actual is not None and actual.startswith(expected) and len(expected) >= len(FINGERPRINT_PREFIX)
