"""The engine: one fast tokenizer on one dedicated thread, behind one bounded queue. No HTTP in here.

    engine = Engine(load_tokenizer("path/or/hub-id"), threads=4)
    await engine.astart()
    batch = await engine.submit_encode(["a text"], options=EncodeOptions(padding=True))
    await engine.astop()

Every operation is a ``submit_*`` call returning a future (cancel it to withdraw the request); the modules are
named in ``docs/explanations/how-it-works.md``.
"""

from ..embedded import DEFAULT_TOKENIZER_DIR
from ..wire import ChatOptions, DecodeOptions, EncodeOptions, LengthOptions, TokenizeOptions
from .batching import BatchingConfig, BatchObserver
from .bounds import BodyKind
from .encoding import EncodedBatch
from .engine import Engine
from .errors import ErrorKind, ServiceError
from .limits import EngineLimits
from .loading import LoadedTokenizer, TokenizerLoadError, fingerprint, load_tokenizer
from .parallelism import ForkGuard, available_cpus, configure_rust_parallelism
from .tokenizer_thread import TokenizedBatch

__all__ = [
    "Engine",
    "EngineLimits",
    "EncodeOptions",
    "LengthOptions",
    "TokenizeOptions",
    "DecodeOptions",
    "ChatOptions",
    "EncodedBatch",
    "TokenizedBatch",
    "BatchingConfig",
    "BodyKind",
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
