"""Calibrations kept on disk, one per key: what determines a calibration (the CPU model, the cores this process may
use, the tokenizer's fingerprint, the package versions of the interpreter that serves), never where the tokenizer
came from. A record holds its key and a checksum of its body: a record whose key differs (stale) or whose checksum
or shape is wrong (damaged) is ignored, and the caller calibrates again. Written whole (a temporary file renamed);
one calibration per key at a time (a lock beside it), so that the ranks of one node calibrate once."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sizing import cpu_model
from ..wire import ENV_PREFIX
from .measure import Calibration

__all__ = ["CALIBRATION_DIR_ENV", "SCHEMA", "Kept", "Key", "default_folder", "kept", "keep", "locked"]

#: Where calibrations are kept (default: ``$XDG_CACHE_HOME/tokenizer-service/calibrations``).
CALIBRATION_DIR_ENV = ENV_PREFIX + "CALIBRATION_DIR"
#: The record's layout; a record of another is stale.
SCHEMA = 1


@dataclass(frozen=True)
class Key:
    """What determines a calibration."""

    cpu_model: str
    cores: int
    fingerprint: str
    versions: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, calibration: Calibration) -> Key:
        return cls.here(calibration.cores, calibration.fingerprint, calibration.versions, calibration.cpu_model)

    @classmethod
    def here(cls, cores: int, fingerprint: str, versions: dict[str, str], cpu: str | None = None) -> Key:
        """The key of a calibration on ``cores`` of this machine's CPUs (``cpu``: its model, default this one's)."""
        return cls(cpu_model() if cpu is None else cpu, cores, fingerprint, tuple(sorted(versions.items())))

    def as_json(self) -> dict[str, Any]:
        return {"cpu_model": self.cpu_model, "cores": self.cores, "fingerprint": self.fingerprint,
                "versions": dict(self.versions)}  # fmt: skip

    @property
    def name(self) -> str:
        return hashlib.sha256(_canonical(self.as_json())).hexdigest()[:32]


@dataclass(frozen=True)
class Kept:
    """A kept calibration and where it lies; or why none could be used (``calibration`` None)."""

    path: Path
    calibration: Calibration | None
    ignored: str | None = None  # why a record there was not used


def default_folder() -> Path:
    given = os.environ.get(CALIBRATION_DIR_ENV)
    if given:
        return Path(given).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "tokenizer-service" / "calibrations"


def path_of(key: Key, folder: Path | None = None) -> Path:
    return (folder or default_folder()) / f"{key.name}.json"


def kept(key: Key, folder: Path | None = None) -> Kept:
    """The calibration kept for ``key``, if there is a sound one."""
    path = path_of(key, folder)
    try:
        record = json.loads(path.read_bytes())
    except FileNotFoundError:
        return Kept(path, None)
    except (OSError, ValueError) as exc:
        return Kept(path, None, f"damaged ({exc.__class__.__name__}: {exc})")
    try:
        body = record["body"]
        if record["checksum"] != hashlib.sha256(_canonical(body)).hexdigest():
            return Kept(path, None, "damaged (its checksum does not match its content)")
        if body["schema"] != SCHEMA or body["key"] != key.as_json():
            return Kept(path, None, "stale (made for another machine, tokenizer or package versions)")
        calibration = Calibration.from_json(body["calibration"])
    except (KeyError, TypeError, ValueError) as exc:
        return Kept(path, None, f"damaged ({exc.__class__.__name__}: {exc})")
    if Key.of(calibration) != key:
        return Kept(path, None, "stale (its measurement names another key)")
    return Kept(path, calibration)


def keep(calibration: Calibration, folder: Path | None = None) -> Path:
    """Keep ``calibration`` under its key; its path."""
    key = Key.of(calibration)
    path = path_of(key, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"schema": SCHEMA, "key": key.as_json(), "calibration": calibration.to_json()}
    record = {"checksum": hashlib.sha256(_canonical(body)).hexdigest(), "body": body}
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".partial")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(record, out, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


@contextlib.contextmanager
def locked(key: Key, folder: Path | None = None) -> Iterator[None]:
    """Hold ``key``'s lock: one calibration of it at a time on this machine."""
    path = path_of(key, folder).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
