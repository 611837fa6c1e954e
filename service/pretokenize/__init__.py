"""Pre-tokenization through the service (client side: never tokenizers, transformers or the server), and reading
its shards back in training. ``tokenizer-service pretokenize`` or :func:`pretokenize` writes one worker's share of
a corpus as token shards and worker 0 the manifest; :class:`TokenizedDocuments` and :class:`TokenBlocks`
(imported when first asked for: torch) read them in DataLoaders.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ..extras import require_module
from .encoders import Encoder, ServedTokenizer, ServiceEncoder, TextsRefused
from .manifest import MANIFEST_NAME, Manifest, ShardStats, read_manifest
from .runner import Summary, pretokenize
from .settings import OUTPUT_FORMATS, PretokenizeConfig

if TYPE_CHECKING:
    from .torch_datasets import TokenBlocks, TokenizedDocuments

__all__ = [
    "PretokenizeConfig",
    "OUTPUT_FORMATS",
    "pretokenize",
    "Summary",
    "Encoder",
    "ServiceEncoder",
    "TextsRefused",
    "ServedTokenizer",
    "MANIFEST_NAME",
    "Manifest",
    "ShardStats",
    "read_manifest",
    "TokenizedDocuments",
    "TokenBlocks",
]


def __getattr__(name: str) -> Any:
    if name in ("TokenizedDocuments", "TokenBlocks"):
        require_module("torch", "torch", f"service.pretokenize.{name}")
        return getattr(importlib.import_module("service.pretokenize.torch_datasets"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
