"""What one pre-tokenization run is asked to do: :class:`PretokenizeConfig`, and the part of it that shapes
the output (which every shard records, so that shards made differently are never mixed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..corpus import JobConfig
from ..wire import ASSISTANT_MASK_SOURCES

#: Output formats, each the layout a trainer reads itself: Parquet (a list column of ids per document, the
#: document's position, kept fields), flat (datatrove's ``.ds`` + ``.ds.index`` + ``.ds.metadata``) and
#: megatron (Megatron-LM's indexed dataset, ``.bin`` + ``.idx``).
OUTPUT_FORMATS = ("parquet", "flat", "megatron")


@dataclass(frozen=True, kw_only=True)
class PretokenizeConfig(JobConfig):
    """Every knob of ``tokenizer-service pretokenize``; the CLI flags map one to one (see ``--help``). The
    fields shared with every sharded job (inputs, out, workers, storage, progress) are :class:`JobConfig`'s.

    Encode options are those of a transformers tokenizer call (``add_special_tokens``, ``truncation``,
    ``max_length``): each document's ids equal ``tokenizer(text, **options)["input_ids"]``, followed by the
    end-of-sequence id when ``append_eos`` is set (``eos_token_id``, default the tokenizer's ``eos_token``).

    Conversations (``messages_field``: the field holding each record's messages, instead of ``text_field``):
    each document's ids equal ``tokenizer.apply_chat_template(messages, chat_template=..., truncation=...,
    max_length=..., **chat_template_kwargs)["input_ids"]`` and, with ``loss_masks`` (the default), its loss mask
    -- 1 where the token counts toward the loss -- its ``assistant_masks`` (``assistant_masks_from``: the
    template's generation markers, refused where it has none, or the rendered turns), written beside the ids.
    """

    url: str | tuple[str, ...] | None = None  # None: $TOKENIZER_SERVICE_URL
    output_format: str = "parquet"
    keep_fields: tuple[str, ...] = ()
    add_special_tokens: bool = True
    truncation: bool | None = None
    max_length: int | None = None
    append_eos: bool = False
    eos_token_id: int | None = None
    # how hard the service is driven
    concurrency: int = 8
    request_texts: int = 256
    request_chars: int = 256 * 1024
    api_key: str | None = None
    expected_fingerprint: str | None = None
    # conversations
    messages_field: str | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    assistant_masks_from: str = "generation"
    loss_masks: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.messages_field is not None:
            if not self.add_special_tokens:
                raise ValueError(
                    "--no-add-special-tokens does not apply to conversations: the chat template writes the special "
                    "tokens (apply_chat_template never adds any)"
                )
            if self.append_eos:
                raise ValueError(
                    "--append-eos does not apply to conversations: the chat template writes how each turn ends"
                )
        elif self.chat_template is not None or self.chat_template_kwargs is not None:
            raise ValueError("--chat-template and --chat-template-kwargs apply to conversations: add --messages-field")
        if self.assistant_masks_from not in ASSISTANT_MASK_SOURCES:
            raise ValueError(
                f"assistant_masks_from must be one of {ASSISTANT_MASK_SOURCES}, not {self.assistant_masks_from!r}"
            )
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(f"format must be one of {OUTPUT_FORMATS}, not {self.output_format!r}")
        if self.keep_fields and self.output_format != "parquet":
            raise ValueError("kept fields need --format parquet: the flat and megatron formats hold token ids only")
        if self.eos_token_id is not None and not self.append_eos:
            raise ValueError("an eos token id is only used with append_eos")
        for name in ("concurrency", "request_texts", "request_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be at least 1, not {self.max_length}")

    def check_installed(self) -> None:
        if self.output_format == "parquet":
            from .shards import import_pyarrow

            import_pyarrow()

    def encode_options(self) -> dict[str, Any]:
        """The ``/encode`` options every request carries: the call's options, and only ``input_ids`` back."""
        return {
            "add_special_tokens": self.add_special_tokens,
            "truncation": self.truncation,
            "max_length": self.max_length,
            "return_attention_mask": False,
            "return_token_type_ids": False,
        }

    @property
    def chat(self) -> bool:
        """Whether the documents are conversations."""
        return self.messages_field is not None

    @property
    def writes_masks(self) -> bool:
        """Whether the shards hold loss masks beside the ids."""
        return self.chat and self.loss_masks

    def chat_options(self) -> dict[str, Any]:
        """The ``/chat/encode`` options every request of a conversations run carries (those of
        ``service.wire.ChatOptions``): the template, its variables, truncation as ``apply_chat_template`` takes
        it (off unless asked for), the masks, and only the ids and masks back."""
        return {
            "chat_template": self.chat_template,
            "chat_template_kwargs": self.chat_template_kwargs,
            "truncation": bool(self.truncation),
            "max_length": self.max_length,
            "return_assistant_tokens_mask": self.loss_masks,
            "assistant_masks_from": self.assistant_masks_from,
            "return_attention_mask": False,
        }

    def output_settings(self, fingerprint: str, eos_token_id: int | None) -> dict[str, Any]:
        """What decides the bytes of a shard besides its input: the tokenizer and the settings; recorded in
        every ``.done`` record and the manifest; a shard made with another is never mixed in."""
        return {
            "tokenizer": fingerprint,
            "format": self.output_format,
            "text_field": self.text_field,
            "keep_fields": list(self.keep_fields),
            "encode": {
                "add_special_tokens": self.add_special_tokens,
                "truncation": self.truncation,
                "max_length": self.max_length,
            },
            "append_eos": self.append_eos,
            "eos_token_id": eos_token_id,
            **({"chat": {"messages_field": self.messages_field, **self.chat_options()}} if self.chat else {}),
            "on_bad_record": self.on_bad_record,
            "unit_bytes": self.unit_bytes,
        }
