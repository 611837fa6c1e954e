"""The engine: one fast tokenizer on one dedicated thread, behind one bounded queue. No HTTP in here.

    engine = Engine(load_tokenizer("path/or/hub-id"), threads=4)
    await engine.astart()
    batch = await engine.encode(["a text"], options=EncodeOptions(padding=True))
    await engine.astop()

The web layer (``service.http``) only translates requests into these calls and errors into statuses.
"""

from .batching import BatchingConfig, BatchObserver
from .encoding import EncodedBatch, EncodeOptions, LengthOptions
from .engine import Engine, EngineLimits, TokenizedBatch
from .errors import ErrorKind, ServiceError
from .loading import DEFAULT_TOKENIZER_DIR, LoadedTokenizer, TokenizerLoadError, fingerprint, load_tokenizer
from .parallelism import ForkGuard, available_cpus, configure_rust_parallelism

__all__ = [
    "Engine",
    "EngineLimits",
    "EncodeOptions",
    "LengthOptions",
    "EncodedBatch",
    "TokenizedBatch",
    "BatchingConfig",
    "BatchObserver",
    "ErrorKind",
    "ServiceError",
    "LoadedTokenizer",
    "TokenizerLoadError",
    "load_tokenizer",
    "fingerprint",
    "DEFAULT_TOKENIZER_DIR",
    "ForkGuard",
    "available_cpus",
    "configure_rust_parallelism",
]
