"""Request bodies of the HTTP contract, and how a body becomes one.

Field names, defaults and meanings follow a transformers tokenizer call (``service.wire.ENCODE_OPTIONS``,
which ``tests/test_wire.py`` holds these models to); unknown fields are rejected so a typo never silently
changes the output.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..engine.encoding import EncodeOptions, LengthOptions
from ..engine.errors import ErrorKind, ServiceError
from ..wire import MAX_U32

Model = TypeVar("Model", bound=BaseModel)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class EncodeRequest(_Strict):
    """``POST /encode``: the arguments of ``tokenizer(texts, text_pairs, **options)``."""

    texts: list[str] = Field(description="The texts to encode (the first sequences of pairs).")
    text_pairs: list[str] | None = Field(None, description="Second sequences, one per text.")
    add_special_tokens: bool = True
    padding: bool | Literal["longest", "max_length", "do_not_pad"] = False
    truncation: bool | Literal["longest_first", "only_first", "only_second", "do_not_truncate"] | None = None
    max_length: int | None = Field(None, ge=0, le=MAX_U32)
    stride: int = Field(0, ge=0, le=MAX_U32)
    pad_to_multiple_of: int | None = Field(None, ge=1, le=MAX_U32)
    padding_side: Literal["left", "right"] | None = None
    return_token_type_ids: bool | None = None
    return_attention_mask: bool | None = None
    return_overflowing_tokens: bool = False
    return_special_tokens_mask: bool = False
    return_offsets_mapping: bool = False
    return_length: bool = False

    def options(self) -> EncodeOptions:
        return EncodeOptions(**self.model_dump(exclude={"texts", "text_pairs"}))


class LengthsRequest(_Strict):
    """``POST /lengths``: the token count of each text (or pair) under ``tokenizer(texts, text_pairs, **options)``,
    without the ids."""

    texts: list[str] = Field(description="The texts to count (the first sequences of pairs).")
    text_pairs: list[str] | None = Field(None, description="Second sequences, one per text.")
    add_special_tokens: bool = True
    truncation: bool | Literal["longest_first", "only_first", "only_second", "do_not_truncate"] | None = None
    max_length: int | None = Field(None, ge=0, le=MAX_U32)
    stride: int = Field(0, ge=0, le=MAX_U32)
    return_overflowing_tokens: bool = Field(
        False, description="Count every row: each entry becomes the list of its rows' counts (first, then overflow)."
    )

    def options(self) -> LengthOptions:
        return LengthOptions(**self.model_dump(exclude={"texts", "text_pairs"}))


class TokenizeRequest(_Strict):
    """``POST /tokenize``: ``tokenizer.tokenize(text, pair, add_special_tokens=...)`` for each text; with
    truncation, the tokens of the encoding ``/encode`` makes with the same options, one per id."""

    texts: list[str] = Field(description="The texts to split (the first sequences of pairs).")
    text_pairs: list[str] | None = Field(None, description="Second sequences, one per text.")
    add_special_tokens: bool = False
    truncation: bool | Literal["longest_first", "only_first", "only_second", "do_not_truncate"] | None = None
    max_length: int | None = Field(None, ge=0, le=MAX_U32)
    return_sequence_ids: bool = Field(
        False, description="Also answer sequence_ids: per token None (special), 0 (text) or 1 (pair)."
    )


class DecodeRequest(_Strict):
    """``POST /decode``: ``tokenizer.batch_decode(ids, ...)``."""

    ids: list[list[Annotated[int, Field(ge=0, le=MAX_U32)]]] = Field(
        description="Token id lists; ids the vocabulary lacks decode as in-process (skipped)."
    )
    skip_special_tokens: bool = False
    clean_up_tokenization_spaces: bool | None = None


class ErrorBody(BaseModel):
    """Every error answer: what to fix, and the kind of error (``service.wire.ERROR_FIELD`` and
    ``ERROR_TYPE_FIELD``). 429 and 503 carry ``Retry-After``; 401 carries ``WWW-Authenticate``."""

    error: str = Field(description="What went wrong and what to change.")
    error_type: str = Field(description="The kind of error (service.engine.errors.ErrorKind).")


def parse_body(body: bytes | bytearray, model: type[Model]) -> Model:
    """Validate ``body`` (JSON bytes) as ``model``, or raise INVALID_REQUEST naming the fields to fix."""
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        if any(err["type"] == "json_invalid" and "escape" in err["msg"] for err in exc.errors()):
            # pydantic-core refuses JSON that Python's json accepts (e.g. a lone surrogate "\ud800"):
            # such a text reaches the tokenizer, which refuses it exactly as it would in-process.
            try:
                return model.model_validate(json.loads(body))
            except (ValueError, ValidationError, RecursionError):
                pass
        raise ServiceError(ErrorKind.INVALID_REQUEST, describe_validation_error(exc)) from None


def describe_validation_error(exc: ValidationError, most: int = 5) -> str:
    """The first few problems, each as ``field: what is wrong``."""
    errors = exc.errors(include_url=False)
    parts = [f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in errors[:most]]
    more = len(errors) - most
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
