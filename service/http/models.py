"""Request bodies, their option fields derived from :mod:`service.wire`; unknown fields are refused (a typo
must not silently change the output), naming the closest known one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import typing
from typing import Annotated, Any, Generic, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, create_model

from ..engine.errors import ErrorKind, ServiceError
from ..suggestions import closest
from ..wire import (
    CHAT_TOKENIZER_KWARGS,
    DOC,
    ENCODE_OPTIONS,
    MAX_U32,
    MINIMUM,
    VALUES,
    ChatOptions,
    DecodeOptions,
    EncodeOptions,
    LengthOptions,
    TokenizeOptions,
)

Model = TypeVar("Model", bound=BaseModel)
Options = TypeVar("Options")
RequestModel = TypeVar("RequestModel", bound="OptionsRequest[Any]")


class OptionsRequest(BaseModel, Generic[Options]):
    """A request body: its inputs, then the options of one :mod:`service.wire` option set."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    #: The option set the option fields are derived from, and its names.
    option_set: typing.ClassVar[type[Any]]
    option_names: typing.ClassVar[tuple[str, ...]]
    #: The option values of bodies already validated, by the options as sent (the fast path of parse_body).
    validated_options: typing.ClassVar[dict[tuple[Any, ...], dict[str, Any]]]

    def options(self) -> Options:
        values = self.__dict__
        result: Options = self.option_set(**{name: values[name] for name in self.option_names})
        return result


class TextsRequest(OptionsRequest[Options]):
    """A body of texts (or pairs), and the options of one option set."""

    texts: list[str] = Field(description="The texts (the first sequences of pairs).")
    text_pairs: list[str] | None = Field(None, description="Second sequences, one per text.")


class IdsRequest(OptionsRequest[Options]):
    """A body of id lists, and the options of one option set."""

    ids: list[list[Annotated[int, Field(ge=0, le=MAX_U32)]]] = Field(
        description="Token id lists; ids the vocabulary lacks decode as in-process (skipped)."
    )


#: A message, as the schema shows it: an object with a role, its other fields passed to the template untouched.
Message = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "description": "A message: its role, its content (a string, a list of parts, or null) and any other "
            "field the template reads (tool_calls, name, reasoning_content...), passed to it untouched.",
            "properties": {
                "role": {"type": "string"},
                "content": {
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}, {"type": "null"}]
                },
            },
            "required": ["role"],
            "additionalProperties": True,
        }
    ),
]


class ConversationsRequest(OptionsRequest[Options]):
    """A body of conversations, and the options of one option set."""

    conversations: list[list[Message]] = Field(
        description="The conversations: each a list of messages (transformers' batched `conversation`)."
    )


def _annotation(declared: dataclasses.Field[Any], hints: dict[str, Any]) -> Any:
    """The pydantic type of a declared option: its closed set of values as ``bool``/``Literal``/``None``
    parts, else its declared type."""
    values = declared.metadata.get(VALUES)
    if values is None:
        return hints[declared.name]
    strings = tuple(v for v in values if isinstance(v, str))
    parts: list[Any] = []
    if True in values and False in values:
        parts.append(bool)
    if strings:
        parts.append(Literal[strings])
    if None in values:
        parts.append(type(None))
    return functools.reduce(operator.or_, parts)


def _option_fields(option_set: type[Any]) -> dict[str, Any]:
    """pydantic field definitions of an option set, in declaration order."""
    hints = typing.get_type_hints(option_set)
    definitions: dict[str, Any] = {}
    for declared in dataclasses.fields(option_set):
        constraints: dict[str, Any] = {}
        if MINIMUM in declared.metadata:
            constraints.update(ge=declared.metadata[MINIMUM], le=MAX_U32)
        if DOC in declared.metadata:
            constraints["description"] = declared.metadata[DOC]
        field = Field(declared.default, **constraints) if constraints else declared.default
        definitions[declared.name] = (_annotation(declared, hints), field)
    return definitions


def _request_model(name: str, doc: str, base: type[RequestModel], option_set: type[Any]) -> type[RequestModel]:
    model = create_model(name, __base__=base, __doc__=doc, __module__=__name__, **_option_fields(option_set))
    model.option_set = option_set
    model.option_names = tuple(f.name for f in dataclasses.fields(option_set))
    model.validated_options = {}
    return model


EncodeRequest = _request_model(
    "EncodeRequest",
    "``POST /encode``: the arguments of ``tokenizer(texts, text_pairs, **options)``.",
    TextsRequest[EncodeOptions],
    EncodeOptions,
)
LengthsRequest = _request_model(
    "LengthsRequest",
    "``POST /lengths``: the token count of each text (or pair) under ``tokenizer(texts, text_pairs, **options)``, "
    "without the ids.",
    TextsRequest[LengthOptions],
    LengthOptions,
)
TokenizeRequest = _request_model(
    "TokenizeRequest",
    "``POST /tokenize``: ``tokenizer.tokenize(text, pair, add_special_tokens=...)`` for each text; with "
    "truncation, the tokens of the encoding ``/encode`` makes with the same options, one per id.",
    TextsRequest[TokenizeOptions],
    TokenizeOptions,
)
DecodeRequest = _request_model(
    "DecodeRequest",
    "``POST /decode``: ``tokenizer.batch_decode(ids, **options)``.",
    IdsRequest[DecodeOptions],
    DecodeOptions,
)

ChatRequest = _request_model(
    "ChatRequest",
    "``POST /chat/encode`` and ``/chat/render``: the arguments of ``tokenizer.apply_chat_template(conversations, "
    "**options)`` (``tokenize=True, return_dict=True`` for the encode, ``tokenize=False`` for the render).",
    ConversationsRequest[ChatOptions],
    ChatOptions,
)


class ErrorBody(BaseModel):
    """Every error answer: what to fix, and the kind of error (``service.wire.ERROR_FIELD`` and
    ``ERROR_TYPE_FIELD``). 429 and 503 carry ``Retry-After``; 401 carries ``WWW-Authenticate``."""

    error: str = Field(description="What went wrong and what to change.")
    error_type: str = Field(description="The kind of error (service.wire.ERROR_TYPES lists them all).")


def parse_body(body: bytes | bytearray, model: type[Model]) -> Model:
    """``body`` (JSON bytes) as ``model``, in effect as :func:`validate_body`: a body of texts on the fast path
    when it takes it."""
    fast: Model | None = _parse_texts(body, model) if issubclass(model, TextsRequest) else None
    return validate_body(body, model) if fast is None else fast


def validate_body(body: bytes | bytearray, model: type[Model]) -> Model:
    """``body`` validated by ``model`` itself, or INVALID_REQUEST naming the fields to fix."""
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
        raise ServiceError(ErrorKind.INVALID_REQUEST, describe_validation_error(exc, model)) from None


#: Distinct option sets remembered per request model, beyond which they are forgotten (clients send a few).
MOST_REMEMBERED_OPTIONS = 1024
_ABSENT = object()


def _parse_texts(body: bytes | bytearray, model: type[Any]) -> Any:
    """A body of texts as the model without validating each text (pydantic's check of a string costs more than
    parsing it), or None for the model's own validation: when ``texts`` (and ``text_pairs``) are lists of strings
    and the options JSON scalars, validated once per distinct set (a refused set falls back, for its message).
    orjson refuses what the model's parser does (lone surrogates too) and keeps the last of repeated keys."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict:
        return None
    texts = data.pop("texts", _ABSENT)
    pairs = data.pop("text_pairs", None)
    if type(texts) is not list or not _all_strings(texts):
        return None
    if pairs is not None and (type(pairs) is not list or not _all_strings(pairs)):
        return None
    try:  # the type is part of the key: True == 1 and hash(True) == hash(1)
        key = tuple((name, type(value), value) for name, value in data.items())
        options = model.validated_options.get(key)
    except TypeError:  # an unhashable value (a list, an object): not a scalar option
        return None
    if options is None:
        try:
            valid = model.model_validate_json(orjson.dumps({"texts": [], **data}))
        except ValidationError:
            return None
        options = {name: getattr(valid, name) for name in model.option_names}
        if len(model.validated_options) >= MOST_REMEMBERED_OPTIONS:
            model.validated_options.clear()
        model.validated_options[key] = options
    return model.model_construct(texts=texts, text_pairs=pairs, **options)


def _all_strings(values: list[Any]) -> bool:
    return set(map(type, values)) <= {str}


def describe_validation_error(exc: ValidationError, model: type[BaseModel], most: int = 5) -> str:
    """The first few problems, each as ``field: what is wrong``: an unknown field with the closest known name,
    a field of a closed set with its values (once, not once per part of its type)."""
    known = list(model.model_fields)
    option_set = getattr(model, "option_set", None)
    declared = dataclasses.fields(option_set) if option_set else ()
    allowed = {f.name: f.metadata[VALUES] for f in declared if VALUES in f.metadata}
    parts: list[str] = []
    seen: set[str] = set()
    for err in exc.errors(include_url=False):
        location = err["loc"]
        name = str(location[0]) if location else ""
        where = ".".join(str(p) for p in location) or "body"
        if err["type"] == "extra_forbidden" and len(location) == 1:
            parts.append(f"{where}: {_unknown_field(name, known, option_set)}")
        elif name == "conversations" and err["type"] in ("list_type", "dict_type"):
            parts.append(_conversations_problem(location))
        elif name in allowed:
            if name in seen:
                continue
            seen.add(name)
            values = ", ".join(map(_shown, allowed[name]))
            parts.append(f"{name}: must be one of {values}, not {_shown(err.get('input'))}")
        else:
            parts.append(f"{where}: {err['msg']}")
    shown = parts[:most]
    more = len(parts) - most
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def _unknown_field(name: str, known: list[str], option_set: type[Any] | None = None) -> str:
    if option_set is ChatOptions:
        hint = _CHAT_FIELD_HINTS.get(name)
        if hint is not None:
            return hint
    if name in ENCODE_OPTIONS:  # an option this route leaves out on purpose (a count is never padded...)
        return f"not an option of this route (it is one of /encode's); the fields are {', '.join(known)}"
    meant = closest(name, known)
    if meant is not None:
        return f"unknown field; did you mean `{meant}`?"
    return f"unknown field; the fields are {', '.join(known)}"


#: Fields of transformers' ``apply_chat_template`` call that the chat routes spell otherwise.
_CHAT_FIELD_HINTS = {
    "conversation": "unknown field; send `conversations`: a list of conversations (one conversation is a list of one)",
    "messages": "unknown field; send `conversations`: a list of conversations, each a list of messages",
    "tokenizer_kwargs": f"not a field here: its keys are options of their own ({', '.join(CHAT_TOKENIZER_KWARGS)})",
    "tokenize": "not a field here: POST /chat/encode tokenizes, POST /chat/render does not",
    "return_dict": "not a field here: /chat/encode always answers the dict (input_ids, attention_mask, ...)",
    "return_tensors": "not a field here: ask for tensors with Accept (application/vnd.safetensors), as /encode",
    "sanitize_control_tokens": "not supported yet: control tokens in messages are encoded as the template writes them",
}


def _conversations_problem(location: tuple[Any, ...]) -> str:
    """A conversation that is not a list, or a message that is not an object, named by its indices."""
    where = "conversations" + "".join(f"[{i}]" for i in location[1:])
    if len(location) <= 1:
        return "conversations: must be a list of conversations, each a list of messages"
    if len(location) == 2:
        return f"{where} must be a list of messages"
    return f'{where} is not an object: a message is {{"role": ..., "content": ...}}'


def _shown(value: Any) -> str:
    """A value as the JSON body writes it."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
