"""What one pre-tokenization run is asked to do: :class:`PretokenizeConfig`, with the part of it that shapes the
output (recorded by every shard, so that shards made differently are never mixed)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from typing import Any

from ..jobs import JobConfig
from ..jobs.flags import flag
from ..wire import API_KEY_ENV, ASSISTANT_MASK_SOURCES, FINGERPRINT_SCHEME, URL_ENV

#: Output formats, each the layout a trainer reads itself (see ``--format`` and :mod:`.shards`).
OUTPUT_FORMATS = ("parquet", "flat", "megatron")


def _urls(values: list[str]) -> tuple[str, ...]:
    """``--url`` given once or more, each maybe comma-separated."""
    return tuple(part for value in values for part in value.split(",") if part.strip())


def _json_object(value: str) -> dict[str, object]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("must be a JSON object of template variables")
    return parsed


@dataclass(frozen=True, kw_only=True)
class PretokenizeConfig(JobConfig):
    """Every knob of ``tokenizer-service pretokenize``, each field a flag (the shared ones :class:`JobConfig`'s).
    A document's ids equal ``tokenizer(text, **options)["input_ids"]`` (then the eos id with ``append_eos``), a
    conversation's ``apply_chat_template(messages, ...)["input_ids"]``, with its ``assistant_masks`` beside."""

    url: str | tuple[str, ...] | None = field(
        default=None,
        metadata=flag(
            "service URL; repeat or comma-separate for several",
            action="append",
            metavar="URL",
            convert=_urls,
            default_text=f"${URL_ENV}",
        ),
    )
    output_format: str = field(
        default="parquet",
        metadata=flag(
            "parquet: ids, position and kept fields per document (needs the pipeline extra); flat: datatrove's .ds "
            "+ .ds.index + .ds.metadata (one uint16/uint32 token array per shard); megatron: Megatron-LM's .bin + "
            ".idx",
            name="--format",
            choices=OUTPUT_FORMATS,
        ),
    )
    keep_fields: tuple[str, ...] = field(
        default=(),
        metadata=flag(
            "a field to carry into the Parquet output; repeat for several",
            name="--keep-field",
            action="append",
            metavar="FIELD",
            convert=tuple,
        ),
    )
    add_special_tokens: bool = field(
        default=True,
        metadata=flag(
            "encode with add_special_tokens=False (no [CLS]/<s>...)",
            name="--no-add-special-tokens",
            action="store_false",
        ),
    )
    truncation: bool | None = field(
        default=None, metadata=flag("truncation=True (with --max-length)", action="store_true")
    )
    max_length: int | None = field(
        default=None, metadata=flag("truncate every document to this many ids", parse=int, metavar="N")
    )
    append_eos: bool = field(
        default=False, metadata=flag("append the tokenizer's eos id after each document", action="store_true")
    )
    eos_token_id: int | None = field(
        default=None,
        metadata=flag(
            "the id --append-eos appends", name="--eos-id", parse=int, metavar="ID", default_text="eos_token's"
        ),
    )
    concurrency: int = field(default=8, metadata=flag("requests in flight", parse=int, metavar="N"))
    request_texts: int = field(default=256, metadata=flag("most documents per request", parse=int, metavar="N"))
    request_chars: int = field(default=256 * 1024, metadata=flag("most characters per request", parse=int, metavar="N"))
    api_key: str | None = field(
        default=None, metadata=flag("the service's API key", metavar="KEY", default_text=f"${API_KEY_ENV}")
    )
    expected_fingerprint: str | None = field(
        default=None,
        metadata=flag(
            "refuse a service whose tokenizer has another fingerprint (whole, or its first 12 or more hex digits, as "
            "serve logs it)",
            metavar="SHA",
        ),
    )
    messages_field: str | None = field(
        default=None, metadata=flag("the JSON field or Parquet column holding each conversation", metavar="FIELD")
    )
    chat_template: str | None = field(
        default=None, metadata=flag("one of the tokenizer's named templates (GET /info)", metavar="NAME")
    )
    chat_template_kwargs: dict[str, Any] | None = field(
        default=None,
        metadata=flag(
            "template variables, as a JSON object (e.g. '{\"enable_thinking\": false}')",
            parse=_json_object,
            metavar="JSON",
        ),
    )
    assistant_masks_from: str = field(
        default="generation",
        metadata=flag(
            "generation: the template's {% generation %} markers (a template without them is refused, never an "
            "all-zero mask); turns: each assistant message's rendered turn (exact, or the conversation is refused)",
            choices=ASSISTANT_MASK_SOURCES,
        ),
    )
    loss_masks: bool = field(
        default=True, metadata=flag("write the ids of conversations only", name="--no-loss-masks", action="store_false")
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.chat:
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
        for name in ("concurrency", "request_texts", "request_chars", "max_length"):
            if (value := getattr(self, name)) is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")

    def check_installed(self) -> None:
        """Before any work, a CorpusError naming the extra to install when the output format needs pyarrow."""
        if self.output_format == "parquet":
            from .shards import import_pyarrow

            import_pyarrow()

    def call_options(self) -> dict[str, Any]:
        """The options of the tokenizer call each document's ids equal."""
        return {
            "add_special_tokens": self.add_special_tokens,
            "truncation": self.truncation,
            "max_length": self.max_length,
        }

    def encode_options(self) -> dict[str, Any]:
        """The ``/encode`` options of every request: the call's, with only ``input_ids`` back."""
        return {**self.call_options(), "return_attention_mask": False, "return_token_type_ids": False}

    @property
    def chat(self) -> bool:
        return self.messages_field is not None

    @property
    def writes_masks(self) -> bool:
        return self.chat and self.loss_masks

    def chat_options(self) -> dict[str, Any]:
        """The ``/chat/encode`` options of every request (``service.wire.ChatOptions``): truncation off unless asked
        for, as ``apply_chat_template`` takes it, with only the ids and masks back."""
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
        """What decides a shard's bytes besides its input, recorded in every ``.done`` record and the manifest."""
        return {
            "tokenizer": fingerprint,
            "fingerprint_scheme": FINGERPRINT_SCHEME,
            "format": self.output_format,
            "text_field": self.text_field,
            "keep_fields": list(self.keep_fields),
            "encode": self.call_options(),
            "append_eos": self.append_eos,
            "eos_token_id": eos_token_id,
            **({"chat": {"messages_field": self.messages_field, **self.chat_options()}} if self.chat else {}),
            "on_bad_record": self.on_bad_record,
            "unit_bytes": self.unit_bytes,
        }
