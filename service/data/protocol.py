"""What the data tools call of a tokenizer: the few methods of the SDK's client they use, as a Protocol (vLLM's
``TokenizerLike``), so that this package types against what it calls and never imports the client.
:class:`~service.client.TokenizerClient` is one; so is any object with these methods (a test double, a client of
another transport)."""

from __future__ import annotations

from typing import Any, Protocol


class TokenizerLike(Protocol):
    """A remote tokenizer the collators, map functions, streams and samplers call (synchronously: DataLoader
    workers and datasets call them so), with the arguments of :class:`~service.client.TokenizerClient`'s methods of
    the same names (typed loosely here: any signature that takes those calls will do)."""

    def encode(self, *args: Any, **options: Any) -> Any:
        """``tokenizer(text, text_pair, **options)``'s keys and values (``return_tensors`` among the options)."""

    def encode_ragged(self, *args: Any, **options: Any) -> Any:
        """The same, as flat arrays and row lengths (``.tolist()`` gives the lists)."""

    def lengths(self, *args: Any, **options: Any) -> Any:
        """Token counts without the ids: an int per text (or pair, or conversation)."""

    def chat_encode_ragged(self, *args: Any, **options: Any) -> Any:
        """``apply_chat_template(conversations, tokenize=True, return_dict=True, **options)`` as flat arrays."""

    def info(self, *args: Any, **options: Any) -> Any:
        """What is served: the tokenizer's ``fingerprint``, special token ids, limits."""
