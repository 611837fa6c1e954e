"""A request to a store, retried with backoff while it fails transiently, until a deadline from its first failure;
what is not worth retrying is raised at once, said as the store said it (:mod:`.store_errors`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from .errors import StorageError
from .progress import Log
from .store_errors import CREDENTIALS_HINT, about_credentials, describe_error, missing_object, transient

T = TypeVar("T")

#: Seconds a failing request (to a store, or to the service) is retried from its first failure (``--retry-deadline``).
DEFAULT_RETRY_DEADLINE = 300.0


def call_with_retries(
    what: str, action: Callable[[], T], *, writing: bool, retry_deadline: float, log: Log | None
) -> T:
    """``action()`` on the URL ``what``, retried with backoff while it fails transiently, until ``retry_deadline``
    s after its first failure; then a StorageError, or FileNotFoundError for a missing object unless ``writing``.
    Retry lines go to ``log``."""
    first_failure: float | None = None
    last_line = 0.0
    attempt = 0
    while True:
        started = time.monotonic()
        try:
            return action()
        except Exception as exc:  # every store's errors: sorted by missing_object() and transient() below
            if missing_object(exc):
                if writing:
                    raise StorageError(
                        f"{what}: cannot write there ({describe_error(exc)}): does the bucket exist?"
                    ) from None
                if isinstance(exc, FileNotFoundError):
                    raise
                raise FileNotFoundError(f"{what}: {describe_error(exc)}") from None
            if not transient(exc):
                hint = CREDENTIALS_HINT if isinstance(exc, PermissionError) or about_credentials(exc) else ""
                raise StorageError(f"{what}: the store refused: {describe_error(exc)}{hint}") from None
            now = time.monotonic()
            first_failure = started if first_failure is None else first_failure
            left = retry_deadline - (now - first_failure)
            if left <= 0:
                raise StorageError(
                    f"{what}: failed after retrying for {retry_deadline:.0f} s (--retry-deadline): "
                    f"{describe_error(exc)}"
                ) from None
            if log is not None and (attempt == 0 or now - last_line >= 10):
                last_line = now
                log(f"storage: {what}: {describe_error(exc)}; retrying, {left:.0f} s left (--retry-deadline)")
            time.sleep(min(left, min(5.0, 0.25 * 2**attempt) * (0.5 + random.random() / 2)))
            attempt += 1
