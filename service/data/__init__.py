"""The SDK's data tools for training code, a layer above the HTTP SDK (:mod:`service.client`): tokenizing
through the service where training code already tokenizes.

    from service.client import TokenizerClient
    from service.data import TokenizeFunction, ChatTokenizeFunction, TokenizedStream

    client = TokenizerClient.launch()                          # or TokenizerClient("http://...")
    tokenized = dataset.map(TokenizeFunction(client, "text", truncation=True, max_length=512),
                            batched=True, num_proc=4)           # datasets' cache keyed on the served tokenizer
    sft_ready = conversations.map(ChatTokenizeFunction(client), batched=True)   # TRL's SFTTrainer takes it as is
    loader = DataLoader(TokenizedStream(documents, TokenizeFunction(client)), num_workers=4)  # sharded, resumable

- :mod:`.mapping`: the functions for ``datasets.Dataset.map`` (texts and conversations), hashed by datasets'
  cache on the served tokenizer and the options, never the URL;
- :mod:`.streaming`: a torch ``IterableDataset`` sharded over DataLoader workers and ranks, resumable;
- :mod:`.collate`: the collators a DataLoader's ``collate_fn`` takes (``client.collator()``,
  ``client.chat_collator()``);
- :mod:`.sampling`: batch samplers under a token budget;
- :mod:`.packing`: padding-free packed batches, as transformers' ``DataCollatorWithFlattening`` makes them;
- :mod:`.sft`: TRL's SFT preparation of conversations (labels from assistant masks) and its collation.

The SDK never imports this package but from its doors (``client.collator()``, ``client.chat_collator()``,
``client.tokenize_function()``, ``client.chat_tokenize_function()``), when they are called. It never imports
the engine, the server or the tokenizer stack; ``datasets``, ``numpy`` and ``torch`` are imported only by what
needs them.
"""

from typing import TYPE_CHECKING, Any

from .mapping import ChatTokenizeFunction, MapInputError, TokenizeFunction

if TYPE_CHECKING:
    from .streaming import TokenizedStream

__all__ = ["TokenizeFunction", "ChatTokenizeFunction", "MapInputError", "TokenizedStream"]


def __getattr__(name: str) -> Any:
    if name == "TokenizedStream":  # torch, only when asked for
        from ..extras import require_module

        require_module("torch", "torch", "service.data.TokenizedStream")
        from .streaming import TokenizedStream

        return TokenizedStream
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
