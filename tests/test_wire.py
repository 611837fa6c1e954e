"""The wire contract (service/wire.py) is the one source: every typed copy of it must agree with it, and it
must agree with transformers. A drift in option names, order, defaults or allowed values fails here."""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Any, Literal, Union

import pytest

from service import wire
from service.client import AsyncTokenizerClient, Collator, TokenizerClient
from service.engine.encoding import EncodeOptions
from service.http.models import EncodeRequest, TokenizeRequest

OPTIONS = list(wire.ENCODE_OPTIONS)


def keyword_defaults(function: Any) -> dict[str, Any]:
    parameters = inspect.signature(function).parameters.values()
    return {p.name: p.default for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


def allowed_values(annotation: Any) -> set[Any]:
    """Every value an annotation admits, when it is made of bool, None and Literals."""
    if annotation is bool:
        return {True, False}
    if annotation is type(None):
        return {None}
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return set(typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        return set().union(*(allowed_values(arg) for arg in typing.get_args(annotation)))
    raise AssertionError(f"not an enumerable annotation: {annotation!r}")


def test_wire_defaults_are_transformers_defaults():
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    call = inspect.signature(PreTrainedTokenizerBase.__call__).parameters
    for name, default in wire.ENCODE_OPTIONS.items():
        assert name in call, f"transformers' __call__ has no option {name!r}"
        assert call[name].default == default and type(call[name].default) is type(default), name
    assert "return_tensors" in call  # the client's, never sent


def test_engine_options_follow_the_wire():
    fields = dataclasses.fields(EncodeOptions)
    assert [f.name for f in fields] == OPTIONS
    assert {f.name: f.default for f in fields} == dict(wire.ENCODE_OPTIONS)


def test_server_request_model_follows_the_wire():
    fields = {name: f for name, f in EncodeRequest.model_fields.items() if name not in ("texts", "text_pairs")}
    assert list(fields) == OPTIONS
    assert {name: f.default for name, f in fields.items()} == dict(wire.ENCODE_OPTIONS)
    assert allowed_values(fields["padding"].annotation) == set(wire.PADDING_VALUES)
    assert allowed_values(fields["truncation"].annotation) == set(wire.TRUNCATION_VALUES)
    assert allowed_values(fields["padding_side"].annotation) == {*wire.PADDING_SIDES, None}


def test_tokenize_request_model_follows_the_wire():
    fields = {name: f for name, f in TokenizeRequest.model_fields.items() if name not in ("texts", "text_pairs")}
    assert list(fields) == list(wire.TOKENIZE_OPTIONS)
    assert {name: f.default for name, f in fields.items()} == dict(wire.TOKENIZE_OPTIONS)
    # the options it shares with /encode take the same values
    assert allowed_values(fields["truncation"].annotation) == set(wire.TRUNCATION_VALUES)
    assert fields["max_length"].metadata == EncodeRequest.model_fields["max_length"].metadata


def test_tokenize_defaults_are_transformers_tokenize_defaults():
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    parameters = inspect.signature(TokenizersBackend.tokenize).parameters
    assert parameters["add_special_tokens"].default is wire.TOKENIZE_OPTIONS["add_special_tokens"]
    assert "pair" in parameters  # what text_pairs carries


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_client_signatures_follow_the_wire(client_class):
    defaults = keyword_defaults(client_class.encode)
    assert defaults.pop("return_tensors") is None
    assert list(defaults) == OPTIONS, "encode's keyword options must be the wire's, in its order"
    assert defaults == dict(wire.ENCODE_OPTIONS)
    assert client_class.__call__ is client_class.encode


def test_client_sends_only_what_differs_from_the_wire_defaults():
    assert wire.non_default_options(dict(wire.ENCODE_OPTIONS)) == {}
    assert wire.non_default_options({"padding": 0, "stride": 0}) == {"padding": 0}  # 0 is not False
    with pytest.raises(TypeError, match="unknown encode option"):
        wire.non_default_options({"paddding": True})


def test_collator_takes_exactly_the_wire_options():
    Collator(object(), **dict(wire.ENCODE_OPTIONS))
    with pytest.raises(TypeError, match="unknown encode option"):
        Collator(object(), paddding=True)


def test_output_key_order_is_transformers_batch_encoding_order(reference_tokenizers):
    tokenizer = reference_tokenizers["wordpiece_default"]
    every_key = tokenizer(
        ["a text", "another"],
        ["a pair", "b"],
        padding=True,
        truncation=True,
        max_length=8,
        stride=1,
        return_token_type_ids=True,
        return_attention_mask=True,
        return_overflowing_tokens=True,
        return_special_tokens_mask=True,
        return_offsets_mapping=True,
        return_length=True,
    )
    assert tuple(every_key) == wire.OUTPUT_KEYS
