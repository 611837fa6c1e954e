"""Pre-tokenization through the service, and reading its shards back in training.

Client side: it talks to the service with :mod:`service.client` and reads the corpus with
:mod:`service.corpus`; it never imports tokenizers, transformers or the server.

- ``tokenizer-service pretokenize`` (:mod:`.cli`) or :func:`pretokenize` (a :class:`PretokenizeConfig`):
  one worker's share of a corpus, written as token shards; worker 0 writes the manifest.
- :func:`read_manifest`: what a finished run holds.
- :class:`TokenizedDocuments` and :class:`TokenBlocks` (torch, imported when first asked for): map-style
  datasets over a manifest, safe in forked or spawned DataLoader workers.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .encoders import Encoder, ServiceEncoder, TextsRefused, TokenizerFacts
from .manifest import MANIFEST_NAME, Manifest, OutputConflict, read_manifest
from .runner import Summary, pretokenize
from .settings import OUTPUT_FORMATS, PretokenizeConfig

if TYPE_CHECKING:
    from .training import TokenBlocks, TokenizedDocuments

__all__ = [
    "PretokenizeConfig",
    "OUTPUT_FORMATS",
    "pretokenize",
    "Summary",
    "Encoder",
    "ServiceEncoder",
    "TextsRefused",
    "TokenizerFacts",
    "MANIFEST_NAME",
    "Manifest",
    "read_manifest",
    "OutputConflict",
    "TokenizedDocuments",
    "TokenBlocks",
]

_LAZY = {"TokenizedDocuments": "service.pipeline.training", "TokenBlocks": "service.pipeline.training"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
