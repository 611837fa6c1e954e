"""The wire contract (service/wire.py) is the one source: the server's request models and the engine's options
are derived from its option sets, the clients' spelled-out signatures must agree with them and send every
option they take, and the declarations must agree with transformers. A drift in option names, order,
defaults or allowed values fails here."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import types
import typing
from typing import Any, Literal, Union

import pytest

from service import engine, wire
from service.client import (
    AsyncTokenizerClient,
    InvalidRequest,
    RetriesExhausted,
    RetryPolicy,
    TokenizerClient,
    TokenizerServiceError,
)
from service.data import Collator
from service.http.models import DecodeRequest, EncodeRequest, LengthsRequest, TokenizeRequest
from service.http.settings import Settings
from service.transport import MockTransport, Response

OPTIONS = list(wire.ENCODE_OPTIONS)
LENGTH_OPTIONS = list(wire.LENGTHS_OPTIONS)


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


def test_the_engine_takes_the_wire_declarations_themselves():
    """Derived, not copied: the engine's option classes are the wire's, and each request model gives one."""
    assert engine.EncodeOptions is wire.EncodeOptions and engine.LengthOptions is wire.LengthOptions
    assert engine.TokenizeOptions is wire.TokenizeOptions and engine.DecodeOptions is wire.DecodeOptions
    for model, option_set, body in (
        (EncodeRequest, wire.EncodeOptions, {"texts": ["a"], "padding": "longest", "max_length": 3}),
        (LengthsRequest, wire.LengthOptions, {"texts": ["a"], "stride": 2}),
        (TokenizeRequest, wire.TokenizeOptions, {"texts": ["a"], "return_sequence_ids": True}),
        (DecodeRequest, wire.DecodeOptions, {"ids": [[1]], "skip_special_tokens": True}),
    ):
        options = model.model_validate(body).options()
        assert type(options) is option_set
        assert wire.changed_options(options) == {k: v for k, v in body.items() if k not in ("texts", "ids")}


def test_server_request_models_follow_the_wire():
    for model, option_set in (
        (EncodeRequest, wire.EncodeOptions),
        (LengthsRequest, wire.LengthOptions),
        (TokenizeRequest, wire.TokenizeOptions),
        (DecodeRequest, wire.DecodeOptions),
    ):
        fields = {name: f for name, f in model.model_fields.items() if name not in ("texts", "text_pairs", "ids")}
        assert list(fields) == [f.name for f in dataclasses.fields(option_set)], model
        assert {name: f.default for name, f in fields.items()} == wire.option_defaults(option_set), model
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


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_client_tokenize_takes_exactly_the_wire_options(client_class):
    defaults = keyword_defaults(client_class.tokenize)
    assert list(defaults) == list(wire.TOKENIZE_OPTIONS) and defaults == dict(wire.TOKENIZE_OPTIONS)
    assert list(inspect.signature(client_class.tokenize).parameters)[1:3] == ["text", "pair"]  # as tokenizer.tokenize


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_encode_ragged_takes_exactly_the_wire_options(client_class):
    defaults = keyword_defaults(client_class.encode_ragged)
    assert list(defaults) == OPTIONS and defaults == dict(wire.ENCODE_OPTIONS)


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
@pytest.mark.parametrize("method", ["decode", "batch_decode"])
def test_client_decode_takes_exactly_the_wire_options(client_class, method):
    defaults = keyword_defaults(getattr(client_class, method))
    assert list(defaults) == list(wire.DECODE_OPTIONS) and defaults == dict(wire.DECODE_OPTIONS)


# A value other than the default for every option whose default is not a bool (those are flipped).
NOT_DEFAULT = {
    "padding": "longest",
    "truncation": "only_first",
    "max_length": 7,
    "stride": 3,
    "pad_to_multiple_of": 8,
    "padding_side": "left",
    "return_token_type_ids": True,
    "return_attention_mask": False,
    "clean_up_tokenization_spaces": True,
}


def not_default(name: str, default: Any) -> Any:
    return not default if isinstance(default, bool) else NOT_DEFAULT[name]


CALLS = [  # client method, its input, the option set it sends
    ("encode", ["a text"], wire.EncodeOptions),
    ("encode_ragged", ["a text"], wire.EncodeOptions),
    ("lengths", ["a text"], wire.LengthOptions),
    ("tokenize", ["a text"], wire.TokenizeOptions),
    ("decode", [5, 6], wire.DecodeOptions),
    ("batch_decode", [[5, 6]], wire.DecodeOptions),
]


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
@pytest.mark.parametrize("method, inputs, option_set", CALLS, ids=[c[0] for c in CALLS])
def test_every_option_a_client_method_takes_reaches_the_body(client_class, method, inputs, option_set):
    """The signatures are spelled out for IDEs; what they send is built from the declaration, by name: an
    option forgotten or renamed on the way would be sent as its default (or not at all) and fail here."""
    sent: list[dict] = []

    def handler(request):
        sent.append(json.loads(request.body))
        return Response(422, {"content-type": "application/json"}, b'{"error": "recorded", "error_type": "x"}')

    options = {name: not_default(name, default) for name, default in wire.option_defaults(option_set).items()}
    client = client_class("http://a:1", transport=MockTransport(handler))
    call = getattr(client, method)
    with pytest.raises(InvalidRequest, match="recorded"):
        if client_class is AsyncTokenizerClient:
            asyncio.run(call(inputs, **options))
        else:
            call(inputs, **options)
    body = sent[0]
    assert {name: body.get(name) for name in options} == options
    assert wire.changed_options(option_set(**options)) == options  # each value is one to send


def test_ragged_layout_names_are_not_output_keys():
    assert wire.RAGGED_ROW_LENGTHS not in wire.OUTPUT_KEYS
    assert set(wire.PER_ROW_KEYS) < set(wire.OUTPUT_KEYS)
    assert wire.RAGGED_MEDIA_TYPE != wire.SAFETENSORS_MEDIA_TYPE
    assert wire.SAFETENSORS_MEDIA_TYPE not in wire.RAGGED_MEDIA_TYPE  # an older server's Accept check misses it


def test_client_sends_only_what_differs_from_the_wire_defaults():
    assert wire.changed_options(wire.EncodeOptions()) == {}
    assert wire.changed_options(wire.EncodeOptions(padding=0, stride=0)) == {"padding": 0}  # 0 is not False
    assert wire.changed_options(wire.TokenizeOptions(add_special_tokens=False)) == {}  # tokenize's own default
    with pytest.raises(TypeError, match="paddding"):
        wire.EncodeOptions(paddding=True)


def test_collator_takes_exactly_the_wire_options():
    Collator(object(), **dict(wire.ENCODE_OPTIONS))
    with pytest.raises(TypeError, match="unexpected keyword argument 'paddding'; did you mean 'padding'"):
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


# -- /lengths ---------------------------------------------------------------------------------------------


def test_length_options_are_encode_options_with_their_defaults():
    assert LENGTH_OPTIONS == [name for name in OPTIONS if name in wire.LENGTHS_OPTIONS]  # a subset, same order
    assert all(wire.LENGTHS_OPTIONS[name] == wire.ENCODE_OPTIONS[name] for name in LENGTH_OPTIONS)
    assert not {"padding", "pad_to_multiple_of", "padding_side"} & set(LENGTH_OPTIONS)  # a count is unpadded


def test_length_options_are_those_of_the_unpadded_encode():
    # a count is the length of the unpadded encode with the same options
    LengthOptions = wire.LengthOptions
    assert dataclasses.asdict(LengthOptions().as_encode_options()) == dict(wire.ENCODE_OPTIONS)
    custom = LengthOptions(False, "only_first", 9, 2, True)
    assert {k: v for k, v in dataclasses.asdict(custom.as_encode_options()).items() if k in LENGTH_OPTIONS} == (
        dataclasses.asdict(custom)
    )


def test_server_lengths_model_follows_the_wire():
    fields = {name: f for name, f in LengthsRequest.model_fields.items() if name not in ("texts", "text_pairs")}
    assert list(fields) == LENGTH_OPTIONS
    assert {name: f.default for name, f in fields.items()} == dict(wire.LENGTHS_OPTIONS)
    assert allowed_values(fields["truncation"].annotation) == set(wire.TRUNCATION_VALUES)
    encode_fields = EncodeRequest.model_fields
    for name in LENGTH_OPTIONS:  # the same types and bounds as /encode's
        assert fields[name].annotation == encode_fields[name].annotation, name
        assert fields[name].metadata == encode_fields[name].metadata, name


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_client_lengths_signatures_follow_the_wire(client_class):
    defaults = keyword_defaults(client_class.lengths)
    server_limit = Settings.model_fields["max_texts_per_request"].default
    assert defaults.pop("batch_size") == wire.LENGTHS_BATCH_TEXTS == server_limit  # one request by default
    assert list(defaults) == LENGTH_OPTIONS
    assert defaults == dict(wire.LENGTHS_OPTIONS)


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_the_clients_collator_factories_spell_out_the_collators_own_defaults(client_class):
    """``client.collator(...)`` spells its keywords out with the collator's own defaults; ``client.chat_collator``
    hands every keyword to ``ChatCollator`` (declared there once), whose SFT defaults are ``SFT_OPTIONS``; the two
    ``batch_sampler`` and ``TokenBudgetBatchSampler.from_client`` count alike by default."""
    from service.data import ChatCollator, TokenBudgetBatchSampler
    from service.data.sft import SFT_OPTIONS

    assert keyword_defaults(client_class.collator) == keyword_defaults(Collator.__init__)
    assert [p.kind for p in inspect.signature(client_class.chat_collator).parameters.values()][1:] == [
        inspect.Parameter.VAR_KEYWORD
    ]
    chat = keyword_defaults(ChatCollator.__init__)
    assert {name: chat[name] for name in SFT_OPTIONS} == dict(SFT_OPTIONS)
    sampling = keyword_defaults(Collator.batch_sampler)
    assert sampling == keyword_defaults(ChatCollator.batch_sampler)
    assert sampling["count_chunk_size"] == keyword_defaults(TokenBudgetBatchSampler.from_client)["count_chunk_size"]


def test_shared_options_are_declared_once_with_their_values_and_bounds():
    """/lengths and /tokenize take some of /encode's options: declared there, so the same values and bounds."""
    encode = {f.name: f for f in dataclasses.fields(wire.EncodeOptions)}
    for option_set in (wire.LengthOptions, wire.TokenizeOptions):
        for declared in dataclasses.fields(option_set):
            if declared.name in encode:
                assert {k: v for k, v in declared.metadata.items() if k != wire.DOC} == dict(
                    encode[declared.name].metadata
                ), declared.name
    assert wire.TOKENIZE_OPTIONS["add_special_tokens"] is False  # tokenize's default, not __call__'s


def test_the_documented_error_body_has_the_wire_fields():
    from service.http.models import ErrorBody

    assert list(ErrorBody.model_fields) == [wire.ERROR_FIELD, wire.ERROR_TYPE_FIELD]


# -- the one status table: error kind -> status -> client exception ------------------------------------------
def test_the_servers_error_kinds_are_the_status_tables():
    """Every kind the engine or the web layer raises is in the table, nothing else is, and each answers with the
    table's status."""
    from service.engine.errors import ErrorKind
    from service.http.errors import HttpErrorKind
    from service.http.responses import STATUS_BY_KIND

    assert sorted(kind.value for kind in (*ErrorKind, *HttpErrorKind)) == sorted(wire.ERROR_TYPES)
    assert {kind.value: status for kind, status in STATUS_BY_KIND.items()} == {
        error_type: error.status for error_type, error in wire.ERROR_TYPES.items()
    }


def test_the_clients_exceptions_are_the_status_tables():
    """Each named exception is a public RequestRejected of the client whose docstring states its statuses, and
    a status has one exception (so the fallback by status is unambiguous)."""
    from service.client import answers
    from service.transport import exceptions

    for error_type, error in wire.ERROR_TYPES.items():
        rejected = getattr(exceptions, error.exception)
        assert issubclass(rejected, exceptions.RequestRejected) and error.exception in exceptions.__all__
        assert answers.REJECTION_BY_ERROR_TYPE[error_type] is rejected
    for status, name in wire.EXCEPTION_BY_STATUS.items():
        assert {e.exception for e in wire.ERROR_TYPES.values() if e.status == status} <= {name}, status
        assert answers.REJECTION_BY_STATUS[status] is getattr(exceptions, name)
        if name != "RequestRejected":
            assert str(status) in (getattr(exceptions, name).__doc__ or ""), (name, status)


def rejected_by(status: int, body: bytes) -> Exception:
    """What a client raises for one error answer (tried once: no retry)."""
    client = TokenizerClient(
        "http://test",
        retry=RetryPolicy(max_attempts=1),
        transport=MockTransport(lambda request: Response(status, {"content-type": wire.JSON_MEDIA_TYPE}, body)),
    )
    with pytest.raises(TokenizerServiceError) as info:
        client.tokenize("x")
    error = info.value
    return error.last_error if isinstance(error, RetriesExhausted) else error  # type: ignore[return-value]


@pytest.mark.parametrize("error_type", list(wire.ERROR_TYPES))
def test_the_client_raises_by_error_type_whatever_the_status(error_type):
    """Sent with a status whose own exception is another one, the body's error_type decides."""
    expected = wire.ERROR_TYPES[error_type].exception
    status = 413 if expected == "InvalidRequest" else 422
    body = json.dumps({wire.ERROR_FIELD: "what to fix", wire.ERROR_TYPE_FIELD: error_type}).encode()
    error = rejected_by(status, body)
    assert type(error).__name__ == expected and error.error_type == error_type and error.status == status


@pytest.mark.parametrize("status", [*wire.EXCEPTION_BY_STATUS, 418])
def test_an_answer_without_a_known_error_type_is_read_by_its_status(status):
    """A proxy's page (no error_type), or a kind this client does not know: the status decides."""
    expected = wire.EXCEPTION_BY_STATUS.get(status, "RequestRejected")
    assert type(rejected_by(status, b"<html>bad gateway</html>")).__name__ == expected
    unknown = json.dumps({wire.ERROR_FIELD: "?", wire.ERROR_TYPE_FIELD: "a_kind_from_the_future"}).encode()
    assert type(rejected_by(status, unknown)).__name__ == expected


# -- conversations: /chat/encode and /chat/render ---------------------------------------------------------
CHAT_OPTIONS = list(wire.CHAT_OPTIONS)


def apply_chat_template_parameters() -> dict[str, inspect.Parameter]:
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    return dict(inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters)


def test_chat_options_are_apply_chat_templates_with_its_defaults():
    """Every chat option is apply_chat_template's (its own argument, or a key of its tokenizer_kwargs, or its
    **kwargs as chat_template_kwargs), with its default, in its order; plus assistant_masks_from, ours."""
    theirs = apply_chat_template_parameters()
    in_signature = [name for name in CHAT_OPTIONS if name in theirs]
    assert in_signature == [name for name in theirs if name in wire.CHAT_OPTIONS]  # the same order
    for name in in_signature:
        assert theirs[name].default == wire.CHAT_OPTIONS[name], name
        assert type(theirs[name].default) is type(wire.CHAT_OPTIONS[name]), name
    rest = set(CHAT_OPTIONS) - set(in_signature)
    assert rest == {*wire.CHAT_TOKENIZER_KWARGS, "chat_template_kwargs", "assistant_masks_from"}
    call = inspect.signature(__import__("transformers").PreTrainedTokenizerBase.__call__).parameters
    for name in wire.CHAT_TOKENIZER_KWARGS:  # tokenizer_kwargs: the tokenizer call's, with its defaults
        assert call[name].default == wire.CHAT_OPTIONS[name], name
    assert wire.ASSISTANT_MASK_SOURCES[0] == wire.CHAT_OPTIONS["assistant_masks_from"]


def test_chat_request_model_follows_the_wire():
    from service.http.models import ChatRequest

    fields = {name: f for name, f in ChatRequest.model_fields.items() if name != "conversations"}
    assert list(fields) == CHAT_OPTIONS
    assert {name: f.default for name, f in fields.items()} == dict(wire.CHAT_OPTIONS)
    assert allowed_values(fields["assistant_masks_from"].annotation) == set(wire.ASSISTANT_MASK_SOURCES)
    for name in ("padding", "max_length", "pad_to_multiple_of", "padding_side", "return_attention_mask"):
        assert fields[name].annotation == EncodeRequest.model_fields[name].annotation, name
        assert fields[name].metadata == EncodeRequest.model_fields[name].metadata, name
    assert allowed_values(fields["truncation"].annotation) == set(wire.TRUNCATION_VALUES)
    body = {"conversations": [[{"role": "user", "content": "hi"}]], "tools": [], "padding_side": "left"}
    options = ChatRequest.model_validate(body).options()
    assert type(options) is wire.ChatOptions and options is not None
    assert wire.changed_options(options) == {"tools": [], "padding_side": "left"}  # [] is not None: tool_use


def test_the_engine_takes_the_chat_declaration_itself():
    from service.engine import chat

    assert engine.ChatOptions is wire.ChatOptions and chat.ChatOptions is wire.ChatOptions
    assert chat.ASSISTANT_MASK_SOURCES is wire.ASSISTANT_MASK_SOURCES
    masked = wire.ChatOptions(return_assistant_tokens_mask=True, padding="longest", max_length=9, truncation=True)
    encode = masked.as_encode_options()
    assert encode.add_special_tokens is False and encode.return_offsets_mapping is True  # the template wrote them
    assert (encode.padding, encode.truncation, encode.max_length) == ("longest", True, 9)


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_client_apply_chat_template_has_transformers_signature(client_class):
    """Drop-in: the same parameters, kinds, order and defaults as transformers 5's apply_chat_template, plus
    assistant_masks_from (keyword-only)."""
    theirs = apply_chat_template_parameters()
    ours = dict(inspect.signature(client_class.apply_chat_template).parameters)
    assert ours.pop("assistant_masks_from").kind is inspect.Parameter.KEYWORD_ONLY
    described = [(p.name, p.kind, p.default) for p in ours.values()]
    assert described == [(p.name, p.kind, p.default) for p in theirs.values()]


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_chat_encode_ragged_takes_exactly_the_wire_options(client_class):
    defaults = keyword_defaults(client_class.chat_encode_ragged)
    assert list(defaults) == CHAT_OPTIONS and defaults == dict(wire.CHAT_OPTIONS)


CHAT_NOT_DEFAULT = {
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "documents": [{"title": "t", "text": "x"}],
    "chat_template": "llama3",
    "continue_final_message": "reasoning_content",
    "chat_template_kwargs": {"enable_thinking": False},
    "assistant_masks_from": "turns",
    "padding": "longest",
    "truncation": "only_first",
    "max_length": 7,
    "pad_to_multiple_of": 8,
    "padding_side": "left",
    "return_attention_mask": False,
}


def chat_not_default(name: str, default: Any) -> Any:
    return not default if isinstance(default, bool) else CHAT_NOT_DEFAULT[name]


def recorded_bodies() -> tuple[list[dict], MockTransport]:
    sent: list[dict] = []

    def handler(request):
        sent.append(json.loads(request.body))
        return Response(422, {"content-type": "application/json"}, b'{"error": "recorded", "error_type": "x"}')

    return sent, MockTransport(handler)


def called(client: Any, method: str, *args: Any, **kwargs: Any) -> None:
    call = getattr(client, method)
    with pytest.raises(InvalidRequest, match="recorded"):
        if isinstance(client, AsyncTokenizerClient):
            asyncio.run(call(*args, **kwargs))
        else:
            call(*args, **kwargs)


CONVERSATION = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_every_chat_option_reaches_the_body(client_class):
    """chat_encode_ragged sends each option by its wire name; apply_chat_template maps transformers' arguments
    to the same body: its own as they are, tokenizer_kwargs as options of their own, other keywords as template
    variables -- the mapping transformers itself makes."""
    sent, transport = recorded_bodies()
    client = client_class("http://a:1", transport=transport)
    options = {name: chat_not_default(name, default) for name, default in wire.CHAT_OPTIONS.items()}
    called(client, "chat_encode_ragged", [CONVERSATION], **options)
    assert {name: sent[-1].get(name) for name in options} == options
    assert sent[-1]["conversations"] == [CONVERSATION]
    assert wire.changed_options(wire.ChatOptions(**options)) == options  # each value is one to send

    tokenizer_kwargs = {name: options[name] for name in wire.CHAT_TOKENIZER_KWARGS}
    ours = ("chat_template_kwargs", "assistant_masks_from", *wire.CHAT_TOKENIZER_KWARGS)
    own = {name: value for name, value in options.items() if name not in ours}
    called(
        client,
        "apply_chat_template",
        CONVERSATION,
        **own,
        tokenizer_kwargs=tokenizer_kwargs,
        assistant_masks_from="turns",
        **options["chat_template_kwargs"],
    )
    assert sent[-1]["conversations"] == [CONVERSATION]  # one conversation: a batch of one
    assert {name: sent[-1].get(name) for name in options} == options


@pytest.mark.parametrize("client_class", [TokenizerClient, AsyncTokenizerClient])
def test_apply_chat_template_refuses_what_the_service_cannot_do_as_transformers_does(client_class):
    client = client_class("http://a:1", transport=MockTransport(lambda request: Response(500, {}, b"")))

    def run(*args: Any, **kwargs: Any) -> Any:
        call = client.apply_chat_template(*args, **kwargs)
        return asyncio.run(call) if client_class is AsyncTokenizerClient else call

    with pytest.raises(ValueError, match="empty conversation"):
        run([])
    with pytest.raises(ValueError, match="requires `return_dict=True` and `tokenize=True`"):
        run(CONVERSATION, tokenize=False, return_assistant_tokens_mask=True)
    with pytest.raises(ValueError, match="sanitize_control_tokens is not supported"):
        run(CONVERSATION, sanitize_control_tokens=True)
    with pytest.raises(ValueError, match=r"tokenizer_kwargs \['stride'\] are not supported"):
        run(CONVERSATION, tokenizer_kwargs={"stride": 2})
    with pytest.raises(TypeError, match="tools\\[0\\] is a function"):
        run(CONVERSATION, tools=[len])
