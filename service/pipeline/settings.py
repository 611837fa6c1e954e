"""What one pre-tokenization run is asked to do: :class:`PretokenizeConfig`, and the part of it that shapes
the output (which every shard records, so that shards made differently are never mixed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..corpus import BAD_RECORD_POLICIES, DEFAULT_UNIT_BYTES
from ..corpus.progress import PROGRESS_MODES

#: Output formats: Parquet (a list column of ids per document, the document's position, kept fields) or
#: flat (one memory-mappable token array plus document ends per shard: datatrove's ``.ds`` layout).
OUTPUT_FORMATS = ("parquet", "flat")


@dataclass(frozen=True)
class PretokenizeConfig:
    """Every knob of ``tokenizer-service pretokenize``; the CLI flags map one to one (see ``--help``).

    Encode options are those of a transformers tokenizer call (``add_special_tokens``, ``truncation``,
    ``max_length``): each document's ids equal ``tokenizer(text, **options)["input_ids"]``, followed by the
    end-of-sequence id when ``append_eos`` is set (``eos_token_id``, default the tokenizer's ``eos_token``).
    """

    inputs: tuple[str, ...]
    out: Path
    url: str | tuple[str, ...] | None = None  # None: $TOKENIZER_SERVICE_URL
    output_format: str = "parquet"
    text_field: str = "text"
    keep_fields: tuple[str, ...] = ()
    add_special_tokens: bool = True
    truncation: bool | None = None
    max_length: int | None = None
    append_eos: bool = False
    eos_token_id: int | None = None
    on_bad_record: str = "error"
    # how the work is cut and spread
    unit_bytes: int = DEFAULT_UNIT_BYTES
    shard_index: int | None = None
    num_shards: int | None = None
    # how hard the service is driven
    concurrency: int = 8
    request_texts: int = 256
    request_chars: int = 256 * 1024
    api_key: str | None = None
    expected_fingerprint: str | None = None
    retry_deadline: float = 300.0
    # index 0: how long to wait, without any shard finishing, for the other workers before giving up
    wait_seconds: float = 600.0
    progress: str = "auto"
    log_every: float = 10.0
    environ: dict[str, str] | None = field(default=None, compare=False)  # None: os.environ (tests pass one)

    def __post_init__(self) -> None:
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(f"format must be one of {OUTPUT_FORMATS}, not {self.output_format!r}")
        if self.on_bad_record not in BAD_RECORD_POLICIES:
            raise ValueError(f"on_bad_record must be one of {BAD_RECORD_POLICIES}, not {self.on_bad_record!r}")
        if self.progress not in PROGRESS_MODES:
            raise ValueError(f"progress must be one of {PROGRESS_MODES}, not {self.progress!r}")
        if self.keep_fields and self.output_format != "parquet":
            raise ValueError("kept fields need --format parquet: the flat format holds token ids only")
        if self.eos_token_id is not None and not self.append_eos:
            raise ValueError("an eos token id is only used with append_eos")
        for name in ("concurrency", "request_texts", "request_chars", "unit_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be at least 1, not {self.max_length}")

    def encode_options(self) -> dict[str, Any]:
        """The ``/encode`` options every request carries: the call's options, and only ``input_ids`` back."""
        return {
            "add_special_tokens": self.add_special_tokens,
            "truncation": self.truncation,
            "max_length": self.max_length,
            "return_attention_mask": False,
            "return_token_type_ids": False,
        }

    def output_settings(self, eos_token_id: int | None) -> dict[str, Any]:
        """What decides the bytes of a shard besides its input and the tokenizer: recorded in every ``.done``
        record and the manifest; a shard made with other settings is never mixed in."""
        return {
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
            "on_bad_record": self.on_bad_record,
            "unit_bytes": self.unit_bytes,
        }
