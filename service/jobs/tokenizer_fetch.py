"""``serve --model URL``: a tokenizer under an object-store URL, copied to a private local directory (removed at
exit) for the loader, with the options of ``$TOKENIZER_SERVICE_STORAGE_OPTIONS``."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from .errors import StorageError
from .folders import ObjectFolder
from .stores import STORAGE_OPTIONS_ENV, Storage, storage_options_from_json


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
