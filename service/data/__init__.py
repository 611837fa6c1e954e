"""The SDK's data tools for training code: tokenizing through the service where training code already tokenizes.

    from service.client import TokenizerClient
    from service.data import TokenizeFunction, ChatTokenizeFunction, TokenizedStream

    client = TokenizerClient.launch()                          # or TokenizerClient("http://...")
    tokenized = dataset.map(TokenizeFunction(client, "text", truncation=True, max_length=512),
                            batched=True, num_proc=4)           # datasets' cache keyed on the served tokenizer
    sft_ready = conversations.map(ChatTokenizeFunction(client), batched=True)   # TRL's SFTTrainer takes it as is
    loader = DataLoader(TokenizedStream(documents, TokenizeFunction(client)), num_workers=4)  # sharded, resumable

- :mod:`.protocol`: what these tools call of a tokenizer (:class:`TokenizerLike`): they type against it and never
  import the client, which makes them through its conveniences (``client.collator()``, ``client.chat_collator()``,
  ``client.tokenize_function()``, ``client.chat_tokenize_function()``);
- :mod:`.mapping`: the functions for ``datasets.Dataset.map`` (texts and conversations), hashed by datasets'
  cache on the served tokenizer and the options, never the URL;
- :mod:`.streaming`: a torch ``IterableDataset`` sharded over DataLoader workers and ranks, resumable;
- :mod:`.collate`: the collators a DataLoader's ``collate_fn`` takes (:class:`Collator`, :class:`ChatCollator`);
- :mod:`.sampling`: batch samplers under a token budget (:class:`TokenBudgetBatchSampler`);
- :mod:`.packing`: padding-free packed batches, as transformers' ``DataCollatorWithFlattening`` makes them;
- :mod:`.sft`: TRL's SFT preparation of conversations (labels from assistant masks) and its collation.

It never imports the client, the engine, the server or the tokenizer stack; ``datasets``, ``numpy`` and
``torch`` are imported only by what needs them.
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
