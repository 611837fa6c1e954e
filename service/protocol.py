"""Request bodies of the HTTP contract. Field names, defaults and meanings follow a transformers
tokenizer call; unknown fields are rejected so a typo never silently changes the output."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from .encoding import EncodeOptions

SAFETENSORS_MEDIA_TYPE = "application/vnd.safetensors"
FINGERPRINT_HEADER = "X-Tokenizer-Fingerprint"
_U32 = 2**32 - 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class EncodeRequest(_Strict):
    """``POST /encode``: the arguments of ``tokenizer(texts, text_pairs, **options)``."""

    texts: list[str] = Field(description="The texts to encode (the first sequences of pairs).")
    text_pairs: list[str] | None = Field(None, description="Second sequences, one per text.")
    add_special_tokens: bool = True
    padding: Union[bool, Literal["longest", "max_length", "do_not_pad"]] = False
    truncation: Union[bool, Literal["longest_first", "only_first", "only_second", "do_not_truncate"], None] = None
    max_length: int | None = Field(None, ge=0, le=_U32)
    stride: int = Field(0, ge=0, le=_U32)
    pad_to_multiple_of: int | None = Field(None, ge=1, le=_U32)
    padding_side: Literal["left", "right"] | None = None
    return_token_type_ids: bool | None = None
    return_attention_mask: bool | None = None
    return_overflowing_tokens: bool = False
    return_special_tokens_mask: bool = False
    return_offsets_mapping: bool = False
    return_length: bool = False

    def options(self) -> EncodeOptions:
        return EncodeOptions(**self.model_dump(exclude={"texts", "text_pairs"}))


class TokenizeRequest(_Strict):
    """``POST /tokenize``: ``tokenizer.tokenize(text, add_special_tokens=...)`` for each text."""

    texts: list[str]
    add_special_tokens: bool = False


class DecodeRequest(_Strict):
    """``POST /decode``: ``tokenizer.batch_decode(ids, ...)``."""

    ids: list[list[Annotated[int, Field(ge=0, le=_U32)]]] = Field(
        description="Token id lists; ids the vocabulary lacks decode as in-process (skipped)."
    )
    skip_special_tokens: bool = False
    clean_up_tokenization_spaces: bool | None = None
