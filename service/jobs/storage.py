"""Where an offline job reads and writes: a local directory or an object store's prefix (fsspec), one interface;
what it promises (whole writes, ranged reads, retries, refusals): docs/guides/pretokenize.md#from-and-to-object-storage.
Local paths need the standard library only: fsspec for them too, as datatrove's ``DataFolder`` does, would remove
no code (a local commit still needs its fsync, rename and partial files cleared) and make local jobs need fsspec.
"""

from __future__ import annotations

import atexit
import glob
import io
import json
import os
import pickle
import random
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from .errors import CorpusError, StorageError
from .progress import Log

T = TypeVar("T")

#: The environment variable the server reads ``serve --model URL``'s storage options from (JSON).
STORAGE_OPTIONS_ENV = "TOKENIZER_SERVICE_STORAGE_OPTIONS"
#: The extra that installs each store's package (``fsspec`` comes with every one of them).
EXTRAS = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
    "hf": "server",
}
#: Bytes fetched per ranged GET of a remote input, and the read buffer of any input.
READ_BLOCK = 4 << 20
#: Bytes per part of an upload to S3 or GCS, and the parts s3fs sends at once (not its 10): an upload's memory.
UPLOAD_PART = 8 << 20
UPLOAD_PARTS_AT_ONCE = 2
_UPLOAD_OPTIONS: dict[str, dict[str, int]] = {  # by extra
    "s3": {"chunksize": UPLOAD_PART, "max_concurrency": UPLOAD_PARTS_AT_ONCE},
    "gcs": {"chunksize": UPLOAD_PART},
}
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
# Errors that retrying cannot cure, whatever their store: what a refusal is translated to by fsspec's stores.
_PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError, ValueError)
#: The stores' own errors about credentials, by (module, class): matched without importing packages a job may lack.
_CREDENTIAL_ERRORS = frozenset(
    {
        ("botocore.exceptions", "NoCredentialsError"),
        ("botocore.exceptions", "PartialCredentialsError"),
        ("botocore.exceptions", "CredentialRetrievalError"),
        ("botocore.exceptions", "UnknownCredentialError"),
        ("azure.core.exceptions", "ClientAuthenticationError"),
        ("azure.identity._exceptions", "CredentialUnavailableError"),
        ("google.auth.exceptions", "DefaultCredentialsError"),
    }
)
#: ... and about the set-up (no region, a parameter the store's API refuses): refusals too, without a credentials hint.
_SETUP_ERRORS = frozenset({("botocore.exceptions", "NoRegionError"), ("botocore.exceptions", "ParamValidationError")})
# Client errors (4xx) that retrying may cure: a request timeout, throttling.
_TRANSIENT_CLIENT_STATUSES = (408, 429)
_CLIENT_MODULES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "google", "azure", "s3fs", "gcsfs")


def is_url(location: str | Path) -> bool:
    """Whether ``location`` names a store (``scheme://...``) rather than a local path (``file://`` is local)."""
    match = _URL.match(str(location))
    return match is not None and match.group(1).lower() != "file"


def local_path(location: str | Path) -> Path:
    text = str(location)
    return Path(text[len("file://") :] if text.lower().startswith("file://") else text)


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


def join(location: str, name: str) -> str:
    """``location/name`` for a URL or a local path (``name`` is ``/``-separated)."""
    if not name:
        return location
    return f"{location.rstrip('/')}/{name}" if is_url(location) else str(Path(location) / name)


def http_status(exc: BaseException) -> int | None:
    """The HTTP status a store's client raised untranslated: azure-core's ``HttpResponseError.status_code``
    (adlfs passes most on), gcsfs's ``HttpError.code``, aiohttp's ``ClientResponseError.status``."""
    for attribute in ("status_code", "code", "status"):
        value = getattr(exc, attribute, None)
        if isinstance(value, int) and 100 <= value <= 599:
            return value
    return None


def _missing(exc: BaseException) -> bool:
    """A missing object, bucket or container, or a 404 its client (adlfs) did not translate."""
    return isinstance(exc, FileNotFoundError) or http_status(exc) == 404


def transient(exc: BaseException) -> bool:
    """Whether retrying may cure ``exc``: a dropped or refused connection, a timeout, throttling, a server error."""
    if isinstance(exc, _PERMANENT) or _missing(exc) or _one_of(exc, _CREDENTIAL_ERRORS | _SETUP_ERRORS):
        return False
    status = http_status(exc)
    if status is not None and 400 <= status < 500 and status not in _TRANSIENT_CLIENT_STATUSES:
        return False  # a refusal (401, 403...) answered as such, whatever the client's exception
    if isinstance(exc, (OSError, ConnectionError, TimeoutError)):
        return True
    return type(exc).__module__.split(".")[0] in _CLIENT_MODULES


#: What a refusal about credentials or permissions adds: where the credentials come from.
CREDENTIALS_HINT = (
    "; check the credentials (the store's own chain: environment variables, a profile, the instance's or pod's "
    "identity) and that they may access this URL"
)


def _one_of(exc: BaseException, classes: frozenset[tuple[str, str]]) -> bool:
    return any((kind.__module__, kind.__name__) in classes for kind in type(exc).__mro__)


def _about_credentials(exc: BaseException) -> bool:
    return _one_of(exc, _CREDENTIAL_ERRORS) or http_status(exc) in (401, 403)


def describe_error(exc: BaseException) -> str:
    """What the store answered, in one line: class and first line of the message (never the options)."""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


#: Seconds a failing request (to a store, or to the service) is retried from its first failure (``--retry-deadline``).
DEFAULT_RETRY_DEADLINE = 300.0


@dataclass
class Storage:
    """How a job reaches its stores: the filesystem options (``--storage-options``), how long a failing request
    is retried and where retry lines go. Picklable: filesystems are made again in each process."""

    options: Mapping[str, Any] = field(default_factory=dict)
    retry_deadline: float = DEFAULT_RETRY_DEADLINE
    log: Log | None = None
    _filesystems: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        # A log that cannot be pickled (a lambda) stays here: the other process retries without its lines.
        return {**self.__dict__, "_filesystems": {}, "log": self.log if _picklable(self.log) else None}

    def filesystem(self, url: str) -> tuple[Any, str]:
        """``(fsspec filesystem, path within it)`` for ``url``; a missing package is named with its extra."""
        protocol = _URL.match(url).group(1).lower()  # type: ignore[union-attr]
        extra = EXTRAS.get(protocol, "s3")
        try:
            from fsspec.core import url_to_fs
        except ImportError:
            raise StorageError(
                f"{url}: reading and writing {protocol}:// needs fsspec and the store's package: "
                f"pip install 'tokenizer-service[{extra}]'"
            ) from None
        fs = self._filesystems.get(protocol)
        try:
            if fs is None:
                fs, path = url_to_fs(url, **_defaults(protocol, dict(self.options)))
                _try_once(fs)
                self._filesystems[protocol] = fs
            else:
                path = fs._strip_protocol(url)
        except ImportError as exc:
            raise StorageError(
                f"{url}: {protocol}:// needs a package that is not installed ({exc}): "
                f"pip install 'tokenizer-service[{extra}]'"
            ) from None
        except (ValueError, TypeError) as exc:
            raise StorageError(
                f"{url}: cannot open this store ({describe_error(exc)}); check --storage-options"
            ) from None
        return fs, str(path)

    def call(self, what: str, action: Callable[[], T], *, writing: bool = False) -> T:
        """``action()`` on the URL ``what``, retried with backoff while it fails transiently, until ``retry_deadline``
        s after its first failure; then a StorageError, or FileNotFoundError for a missing object unless ``writing``."""
        first_failure: float | None = None
        last_line = 0.0
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                return action()
            except Exception as exc:  # every store's errors: sorted by _missing() and transient() below
                if _missing(exc):
                    if writing:
                        raise StorageError(
                            f"{what}: cannot write there ({describe_error(exc)}): does the bucket exist?"
                        ) from None
                    if isinstance(exc, FileNotFoundError):
                        raise
                    raise FileNotFoundError(f"{what}: {describe_error(exc)}") from None
                if not transient(exc):
                    hint = CREDENTIALS_HINT if isinstance(exc, PermissionError) or _about_credentials(exc) else ""
                    raise StorageError(f"{what}: the store refused: {describe_error(exc)}{hint}") from None
                now = time.monotonic()
                first_failure = started if first_failure is None else first_failure
                left = self.retry_deadline - (now - first_failure)
                if left <= 0:
                    raise StorageError(
                        f"{what}: failed after retrying for {self.retry_deadline:.0f} s (--retry-deadline): "
                        f"{describe_error(exc)}"
                    ) from None
                if self.log is not None and (attempt == 0 or now - last_line >= 10):
                    last_line = now
                    self.log(f"storage: {what}: {describe_error(exc)}; retrying, {left:.0f} s left (--retry-deadline)")
                time.sleep(min(left, min(5.0, 0.25 * 2**attempt) * (0.5 + random.random() / 2)))
                attempt += 1

    def folder(self, location: str | Path) -> Folder:
        if is_url(location):
            return ObjectFolder(str(location).rstrip("/"), self)
        return LocalFolder(local_path(location))

    def open_input(self, location: str) -> IO[bytes]:
        """A buffered, seekable binary stream over an input file (ranged GETs for a remote one)."""
        if not is_url(location):
            return io.BufferedReader(io.FileIO(location, "rb"), buffer_size=READ_BLOCK // 4)
        fs, path = self.filesystem(location)
        size = self.call(location, lambda: int(fs.size(path)))
        return io.BufferedReader(_ResumingReader(self, fs, path, size, location), buffer_size=READ_BLOCK // 4)

    def spool(self) -> Path:
        """This process's private directory for files on their way to a store (removed at exit)."""
        spool = _SPOOL.get(os.getpid())
        if spool is None:
            _remove_orphan_spools()
            spool = Path(tempfile.mkdtemp(prefix=f"{_SPOOL_PREFIX}{os.getpid()}-"))
            _SPOOL[os.getpid()] = spool
            atexit.register(shutil.rmtree, spool, True)
        return spool


def _picklable(value: object) -> bool:
    try:
        pickle.dumps(value)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


_SPOOL: dict[int, Path] = {}
_SPOOL_PREFIX = "tokenizer-service-spool-"


def _remove_orphan_spools() -> None:
    """Remove the spool directories (named after their process ids) of processes gone, e.g. killed by SIGKILL."""
    for path in Path(tempfile.gettempdir()).glob(f"{_SPOOL_PREFIX}*-*"):
        pid = path.name[len(_SPOOL_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:  # another user's live process
            pass


def _defaults(protocol: str, options: dict[str, Any]) -> dict[str, Any]:
    """S3, unless ``--storage-options`` says otherwise: connecting gives up after 10 s and botocore tries once (s3fs
    still retries within ~2 s), so the job's own retry, which says so, runs instead of a silent minute of backoff."""
    if protocol in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", 10)
        config.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
        options["config_kwargs"] = config
    return options


def _try_once(fs: Any) -> None:
    """Azure, as S3 above: one try per request, not silent tries 15 s, 18 s and 24 s apart (~60 s, past a short
    deadline). adlfs passes no retry option on, so this sets the retry policy of its azure-storage-blob client."""
    policy = getattr(getattr(getattr(fs, "service_client", None), "_config", None), "retry_policy", None)
    if policy is not None and hasattr(policy, "total_retries"):
        policy.total_retries = 0


def storage_options_from_json(text: str | None) -> dict[str, Any]:
    """``--storage-options`` (or ``$TOKENIZER_SERVICE_STORAGE_OPTIONS``) parsed: a JSON object."""
    if not text:
        return {}
    try:
        options = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--storage-options is not JSON ({exc.args[0]})") from None
    if not isinstance(options, dict):
        raise ValueError('--storage-options must be a JSON object, e.g. \'{"endpoint_url": "http://..."}\'')
    return options


class _ResumingReader(io.RawIOBase):
    """A remote file read by ranged GETs of READ_BLOCK; a transient failure resumes at the byte it stopped at."""

    def __init__(self, storage: Storage, fs: Any, path: str, size: int, url: str) -> None:
        super().__init__()
        self._storage, self._fs, self._path, self._size, self._url = storage, fs, path, size, url
        self._position = 0
        self._stream: Any = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), max(0, self._size - self._position))
        if want == 0:
            return 0

        def read() -> bytes:
            try:
                if self._stream is None:
                    self._stream = self._fs.open(self._path, "rb", block_size=READ_BLOCK, cache_type="readahead")
                self._stream.seek(self._position)
                return bytes(self._stream.read(want))
            except BaseException:
                self._drop()
                raise

        data = self._storage.call(self._url, read)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def _drop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with suppress(Exception):  # a broken connection's file: nothing to keep
                stream.close()

    def close(self) -> None:
        self._drop()
        super().close()


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
    """A store's prefix, through fsspec: objects uploaded whole, every request retried per the :class:`Storage`."""

    def __init__(self, location: str, storage: Storage) -> None:
        self.location = location
        self.storage = storage
        self._fs: Any = None
        self._root = ""

    def __reduce__(self) -> tuple[type[ObjectFolder], tuple[str, Storage]]:
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
        spool = self.storage.spool() / uuid.uuid4().hex
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


def fetch_tokenizer(url: str, storage: Storage | None = None) -> str:
    """The local copy (mode 0700, removed at exit) of a tokenizer under an object-store URL: a prefix, or one
    ``tokenizer.json``. Options from ``storage``, else ``$TOKENIZER_SERVICE_STORAGE_OPTIONS``."""
    if storage is None:
        storage = Storage(storage_options_from_json(os.environ.get(STORAGE_OPTIONS_ENV)))
    folder = storage.folder(url)
    if not isinstance(folder, ObjectFolder):
        return url
    target = Path(tempfile.mkdtemp(prefix="tokenizer-service-model-"))
    atexit.register(shutil.rmtree, target, True)
    files = folder.listing()
    if not files:  # not a prefix: a single object
        name = url.rstrip("/").rsplit("/", 1)[-1]
        parent = ObjectFolder(url.rstrip("/").rsplit("/", 1)[0], storage)
        if parent.size(name) is None:
            raise StorageError(f"{url}: no such object, and no object under it")
        return str(parent.fetch(name, target / name))
    for name in files:
        folder.fetch(name, target / name)
    return str(target)
