"""What the data tools call of a tokenizer, as a Protocol (vLLM's ``TokenizerLike``): this package types against it
and never imports the client."""

from __future__ import annotations

from typing import Any, Final, Protocol

#: The chat options of the SFT tools (a chat collator, a conversation map): those of TRL's tokenize step, one value for
#: every row. The rest are the tools' own doing: unpadded rows, assistant masks by ``assistant_only_loss``.
SFT_CHAT_OPTIONS: Final = (
    "tools",
    "documents",
    "chat_template",
    "chat_template_kwargs",
    "assistant_masks_from",
    "truncation",
    "max_length",
)


class TokenizerLike(Protocol):
    """A remote tokenizer the data tools call synchronously, with the arguments of
    :class:`~service.client.TokenizerClient`'s methods of the same names (it is one; so is a test double)."""

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
