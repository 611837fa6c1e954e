"""A job's outputs and records in one interface, whatever holds them: a local directory (temporary name, fsync,
rename) or a store's prefix (objects uploaded whole); every write is whole or absent. Object stores have no
rename: a commit marker written last is the transaction (:mod:`.executor`)."""

from __future__ import annotations

import glob
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from .errors import CorpusError
from .spools import process_spool
from .urls import EXTRAS, is_url, join, local_path

T = TypeVar("T")

#: Bytes per part of an upload to S3 or GCS, and the parts s3fs sends at once (not its 10): an upload's memory.
UPLOAD_PART = 8 << 20
UPLOAD_PARTS_AT_ONCE = 2
_UPLOAD_OPTIONS: dict[str, dict[str, int]] = {  # by extra
    "s3": {"chunksize": UPLOAD_PART, "max_concurrency": UPLOAD_PARTS_AT_ONCE},
    "gcs": {"chunksize": UPLOAD_PART},
}


class Store(Protocol):
    """What an :class:`ObjectFolder` calls of its store access (a :class:`~service.jobs.stores.Storage`)."""

    def filesystem(self, url: str) -> tuple[Any, str]: ...

    def call(self, what: str, action: Callable[[], T], *, writing: bool = False) -> T: ...


def check_output_folder(flag: str, location: str | Path) -> None:
    """Refuse a local output folder that cannot be one: a file at or above its path, or a folder not writable."""
    if is_url(location):
        return
    path = local_path(location)
    existing = next(candidate for candidate in (path, *path.absolute().parents) if candidate.exists())
    if not existing.is_dir():
        raise CorpusError(
            f"{flag} {location}: {existing} is a file, not a folder; {flag} names the folder the job writes its "
            "outputs in: give another path, or move the file away"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CorpusError(f"{flag} {location}: this user may not write in {existing}; give a folder it can write in")


class Folder:
    """A local directory or a store's prefix holding a job's outputs and records, by ``/``-separated names
    relative to it; every write is whole or absent."""

    location: str

    def url(self, name: str = "") -> str:
        return join(self.location, name)

    def listing(self) -> dict[str, int]:
        """Every file under the folder (recursively), by name, with its size; {} when the folder is absent."""
        raise NotImplementedError

    def size(self, name: str) -> int | None:
        raise NotImplementedError

    def read_bytes(self, name: str) -> bytes:
        """The content of ``name``; FileNotFoundError when it does not exist."""
        raise NotImplementedError

    def write_bytes(self, name: str, data: bytes) -> None:
        with self.writer(name) as stream:
            stream.write(data)

    def writer(self, name: str) -> Any:
        """A context manager: a binary stream whose content appears at ``name`` whole, or not at all on an error."""
        raise NotImplementedError

    def fetch(self, name: str, target: Path) -> Path:
        """A local file holding ``name``: the file itself on a local disk, else a download into ``target``."""
        raise NotImplementedError

    def remove(self, name: str) -> None:
        """Remove ``name`` (nothing when it does not exist)."""
        raise NotImplementedError

    def remove_partial(self, names: list[str]) -> None:
        """Remove ``names`` and whatever an interrupted writer left of them."""
        for name in names:
            self.remove(name)


_PARTIAL_MARK = ".partial-"


class LocalFolder(Folder):
    """A local directory (shared file systems included): temporary name in the final directory, then rename."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)

    def file(self, name: str) -> Path:
        return self.path / name

    def listing(self) -> dict[str, int]:
        if not self.path.is_dir():
            return {}
        found = {}
        for root, _, names in os.walk(self.path):
            for file_name in names:
                full = Path(root) / file_name
                with suppress(FileNotFoundError):  # renamed away meanwhile (another worker's temporary file)
                    found[full.relative_to(self.path).as_posix()] = full.stat().st_size
        return found

    def size(self, name: str) -> int | None:
        try:
            return self.file(name).stat().st_size
        except FileNotFoundError:
            return None

    def read_bytes(self, name: str) -> bytes:
        return self.file(name).read_bytes()

    @contextmanager
    def writer(self, name: str) -> Iterator[IO[bytes]]:
        path = self.file(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}{_PARTIAL_MARK}{os.getpid()}")
        try:  # opened inside: an interrupt (SIGTERM) right after the open still removes the partial file
            with open(partial, "wb") as stream:
                yield stream
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    def fetch(self, name: str, target: Path) -> Path:
        return self.file(name)

    def remove(self, name: str) -> None:
        self.file(name).unlink(missing_ok=True)

    def remove_partial(self, names: list[str]) -> None:
        for name in names:
            path = self.file(name)
            path.unlink(missing_ok=True)
            if path.parent.is_dir():
                for leftover in path.parent.glob(f".{glob.escape(path.name)}{_PARTIAL_MARK}*"):
                    leftover.unlink(missing_ok=True)


class ObjectFolder(Folder):
    """A store's prefix, through fsspec: objects uploaded whole, every request retried per its :class:`Store`."""

    def __init__(self, location: str, storage: Store) -> None:
        self.location = location
        self.storage = storage
        self._fs: Any = None
        self._root = ""

    def __reduce__(self) -> tuple[type[ObjectFolder], tuple[str, Store]]:
        return type(self), (self.location, self.storage)

    def _call(self, name: str, action: Callable[[Any, str], T], *, writing: bool = False) -> T:
        if self._fs is None:
            self._fs, root = self.storage.filesystem(self.location)
            self._root = root.rstrip("/")
        path = f"{self._root}/{name}" if name else self._root
        return self.storage.call(self.url(name), lambda: action(self._fs, path), writing=writing)

    def listing(self) -> dict[str, int]:
        def find(fs: Any, root: str) -> dict[str, int]:
            fs.invalidate_cache(root)
            try:
                found = fs.find(root, detail=True)
            except FileNotFoundError:
                return {}
            prefix = root + "/"
            return {
                path[len(prefix) :]: int(info.get("size") or 0)
                for path, info in found.items()
                if path.startswith(prefix) and info.get("type") != "directory"
            }

        return self._call("", find)

    def size(self, name: str) -> int | None:
        def info(fs: Any, path: str) -> int | None:
            fs.invalidate_cache(path)
            try:
                return int(fs.info(path)["size"])
            except FileNotFoundError:
                return None

        return self._call(name, info)

    def read_bytes(self, name: str) -> bytes:
        return self._call(name, lambda fs, path: bytes(fs.cat_file(path)))

    def write_bytes(self, name: str, data: bytes) -> None:
        self._call(name, lambda fs, path: fs.pipe_file(path, data), writing=True)

    @contextmanager
    def writer(self, name: str) -> Iterator[IO[bytes]]:
        spool = process_spool() / uuid.uuid4().hex
        try:
            with open(spool, "wb") as stream:
                yield stream
            self.upload(spool, name)
        finally:
            spool.unlink(missing_ok=True)

    def upload(self, local: Path, name: str) -> None:
        """Upload ``local`` to ``name`` whole (multipart, aborted on failure, for a large one); S3 and GCS in parts
        of :data:`UPLOAD_PART` (their packages would read a file of up to 100 MiB whole)."""
        parts = _UPLOAD_OPTIONS.get(EXTRAS.get(self.location.split("://", 1)[0].lower(), ""), {})
        self._call(name, lambda fs, path: fs.put_file(str(local), path, **parts), writing=True)

    def fetch(self, name: str, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        self._call(name, lambda fs, path: fs.get_file(path, str(target)))
        return target

    def remove(self, name: str) -> None:
        def remove(fs: Any, path: str) -> None:
            with suppress(FileNotFoundError):
                fs.rm_file(path)

        self._call(name, remove)
