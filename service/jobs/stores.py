"""How a job reaches its stores: fsspec filesystems made from ``--storage-options`` (one per scheme and process, a
missing package named with its extra), every request through the retry loop (:mod:`.retrying`), and remote inputs
read in ranged GETs that resume where they stopped; what it promises (whole writes, ranged reads, retries,
refusals): docs/guides/pretokenize.md#from-and-to-object-storage.
Local paths need the standard library only: fsspec for them too, as datatrove's ``DataFolder`` does, would remove
no code (a local commit still needs its fsync, rename and partial files cleared) and make local jobs need fsspec.
"""

from __future__ import annotations

import io
import json
import pickle
import types
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from .errors import StorageError
from .folders import Folder, LocalFolder, ObjectFolder
from .progress import Log
from .retrying import DEFAULT_RETRY_DEADLINE, call_with_retries
from .spools import process_spool
from .store_errors import describe_error
from .urls import EXTRAS, is_url, local_path, url_scheme

T = TypeVar("T")

#: The environment variable the server reads ``serve --model URL``'s storage options from (JSON).
STORAGE_OPTIONS_ENV = "TOKENIZER_SERVICE_STORAGE_OPTIONS"
#: Bytes fetched per ranged GET of a remote input, and the read buffer of any input.
READ_BLOCK = 4 << 20


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
        protocol = url_scheme(url)
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
        return call_with_retries(what, action, writing=writing, retry_deadline=self.retry_deadline, log=self.log)

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
        return process_spool()


def _picklable(value: object) -> bool:
    try:
        pickle.dumps(value)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


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
    """Azure and GCS, as S3 above: one try per request, so that the job's own retry, which says so, is the one that
    runs. adlfs passes no retry option on (its azure-storage-blob client tried 15 s, 18 s and 24 s apart, ~60 s past
    a short deadline): this sets the client's retry policy. gcsfs takes none either, and retries each request 6
    times over ~35 s (its ``retry_request`` decorator, bound when the class is made): this instance calls the
    undecorated methods (the decorator keeps them as ``__wrapped__``); where a release has none, its retries stay."""
    policy = getattr(getattr(getattr(fs, "service_client", None), "_config", None), "retry_policy", None)
    if policy is not None and hasattr(policy, "total_retries"):
        policy.total_retries = 0
    if type(fs).__module__.startswith("gcsfs."):
        for name in GCSFS_RETRYING:
            once = getattr(getattr(type(fs), name, None), "__wrapped__", None)
            if once is not None:
                setattr(fs, name, types.MethodType(once, fs))


#: gcsfs's methods under its ``retry_request``: every request (``_request``) and both kinds of download.
GCSFS_RETRYING = ("_request", "_get_file_request", "_get_file_concurrent")


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
