"""Data tools for training code that tokenizes through the service where it already tokenizes.

    from service.client import TokenizerClient
    from service.data import TokenizeFunction, ChatTokenizeFunction, TokenizedStream

    client = TokenizerClient.launch()                          # or TokenizerClient("http://...")
    tokenized = dataset.map(TokenizeFunction(client, "text", truncation=True, max_length=512),
                            batched=True, num_proc=4)           # datasets' cache keyed on the served tokenizer
    sft_ready = conversations.map(ChatTokenizeFunction(client), batched=True)   # TRL's SFTTrainer takes it as is
    loader = DataLoader(TokenizedStream(documents, TokenizeFunction(client)), num_workers=4)  # sharded, resumable

This package is a client of the service: it imports :mod:`service.client` and never the engine, the server or
the tokenizer stack; ``datasets`` and ``torch`` are imported only by what needs them (``TokenizedStream``: torch).
"""

from typing import TYPE_CHECKING, Any

from .mapping import ChatTokenizeFunction, MapInputError, TokenizeFunction

if TYPE_CHECKING:
    from .streaming import TokenizedStream

__all__ = ["TokenizeFunction", "ChatTokenizeFunction", "MapInputError", "TokenizedStream"]


def __getattr__(name: str) -> Any:
    if name == "TokenizedStream":  # torch, only when asked for
        from .streaming import TokenizedStream

        return TokenizedStream
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
