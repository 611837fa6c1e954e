"""The SDK's data tools for training code, tokenizing through the service where training code already tokenizes:
map functions for ``datasets``, a resumable stream, collators and a token-budget sampler for DataLoaders.

The tools type against what they call of a tokenizer (:class:`TokenizerLike`, :mod:`.protocol`) and never import the
client, which makes them through its conveniences (``client.collator()``, ``client.tokenize_function()``...); nor
the engine, the server or the tokenizer stack. ``datasets``, ``numpy`` and ``torch`` are imported only by what needs
them. The modules: docs/explanations/how-it-works.md.
"""

from typing import TYPE_CHECKING, Any

from .mapping import ChatTokenizeFunction, MapInputError, TokenizeFunction
from .protocol import TokenizerLike

if TYPE_CHECKING:
    from .collate import ChatCollator, Collator
    from .sampling import TokenBudgetBatchSampler
    from .streaming import TokenizedStream

__all__ = [
    "TokenizerLike",
    "TokenizeFunction",
    "ChatTokenizeFunction",
    "MapInputError",
    "TokenizedStream",
    "Collator",
    "ChatCollator",
    "TokenBudgetBatchSampler",
]

#: Imported when first asked for (torch, where they use it).
_LAZY = {
    "TokenizedStream": "streaming",
    "Collator": "collate",
    "ChatCollator": "collate",
    "TokenBudgetBatchSampler": "sampling",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        if name == "TokenizedStream":  # a torch IterableDataset: without torch, said with the fix
            from ..extras import require_module

            require_module("torch", "torch", "service.data.TokenizedStream")
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
