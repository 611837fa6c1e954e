"""The wire contract between client and server, which both import and nothing else of each other: route paths,
every route's options (declared once, as dataclasses: names, transformers' defaults, values and bounds), output
key order, media types, headers, the error table and environment variables. Standard library only. The request
models and the engine's options derive from these declarations; ``tests/client/test_wire.py`` fails when the
clients' signatures drift from them. Beside it, standard library too: where a service is (:mod:`service.addresses`:
URLs, Unix sockets), how settings become ``serve``'s flags (:mod:`service.serve_flags`) and fingerprint pins
(:mod:`service.fingerprint_pins`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final

# -- routes ----------------------------------------------------------------------------------------------
ENCODE_PATH: Final = "/encode"
TOKENIZE_PATH: Final = "/tokenize"
DECODE_PATH: Final = "/decode"
LENGTHS_PATH: Final = "/lengths"
#: Conversations: ``apply_chat_template(..., tokenize=True, return_dict=True)``, and its rendered texts alone.
CHAT_ENCODE_PATH: Final = "/chat/encode"
CHAT_RENDER_PATH: Final = "/chat/render"
INFO_PATH: Final = "/info"
HEALTH_PATH: Final = "/healthz"
READY_PATH: Final = "/readyz"
METRICS_PATH: Final = "/metrics"
#: The tokenizer playground, an HTML page for people (also served at ``/``); it calls the routes above.
PLAYGROUND_PATH: Final = "/playground"

# -- the options of every POST route: declared once ------------------------------------------------------
#: The values transformers accepts for the two strategy options, and for ``padding_side``.
PADDING_VALUES: Final = (False, True, "longest", "max_length", "do_not_pad")
TRUNCATION_VALUES: Final = (None, False, True, "longest_first", "only_first", "only_second", "do_not_truncate")
PADDING_SIDES: Final = ("left", "right")
#: What ``return_tensors`` may ask for on the client; the server answers lists (JSON) or a binary blob.
RETURN_TENSORS: Final = (None, "pt", "np")
#: Ids, lengths and character offsets are unsigned 32-bit in the tokenizers library.
MAX_U32: Final = 2**32 - 1

# Keys of an option's field metadata: its closed set of values, its least int (ints also take at most MAX_U32),
# and a sentence for the API docs.
VALUES: Final = "values"
MINIMUM: Final = "minimum"
DOC: Final = "doc"


def _option(default: Any, *, values: tuple[Any, ...] | None = None, minimum: int | None = None, doc: str = "") -> Any:
    metadata = {VALUES: values, MINIMUM: minimum, DOC: doc or None}
    return field(default=default, metadata={key: value for key, value in metadata.items() if value is not None})


def _as_in(options: type[Any], name: str, **changes: Any) -> Any:
    """The option ``name`` as declared in another option set, but for ``changes`` (another ``default``, say)."""
    declared = {f.name: f for f in fields(options)}[name]
    return _option(changes.pop("default", declared.default), **{**dict(declared.metadata), **changes})


@dataclass(frozen=True)
class EncodeOptions:
    """The options of ``POST /encode``: those of ``tokenizer(texts, text_pairs, **options)``, with transformers'
    defaults, in its ``__call__`` order. A client sends only those that differ (:func:`changed_options`)."""

    add_special_tokens: bool = True
    padding: bool | str = _option(False, values=PADDING_VALUES)
    truncation: bool | str | None = _option(None, values=TRUNCATION_VALUES)
    max_length: int | None = _option(None, minimum=0)
    stride: int = _option(0, minimum=0)
    pad_to_multiple_of: int | None = _option(None, minimum=1)
    padding_side: str | None = _option(None, values=(*PADDING_SIDES, None))
    return_token_type_ids: bool | None = None
    return_attention_mask: bool | None = None
    return_overflowing_tokens: bool = False
    return_special_tokens_mask: bool = False
    return_offsets_mapping: bool = False
    return_length: bool = False


@dataclass(frozen=True)
class LengthOptions:
    """The options of ``POST /lengths`` (beside ``texts`` and ``text_pairs``): those of :class:`EncodeOptions` that
    change how many tokens a text becomes (never padding: a length is the unpadded count)."""

    add_special_tokens: bool = _as_in(EncodeOptions, "add_special_tokens")
    truncation: bool | str | None = _as_in(EncodeOptions, "truncation")
    max_length: int | None = _as_in(EncodeOptions, "max_length")
    stride: int = _as_in(EncodeOptions, "stride")
    return_overflowing_tokens: bool = _as_in(
        EncodeOptions,
        "return_overflowing_tokens",
        doc="Count every row: each entry becomes the list of its rows' counts (first, then overflow).",
    )

    def as_encode_options(self) -> EncodeOptions:
        """The encode these counts are the lengths of (no padding)."""
        return EncodeOptions(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class TokenizeOptions:
    """The options of ``POST /tokenize`` (beside ``texts`` and ``text_pairs``): those of
    ``tokenizer.tokenize(text, pair, add_special_tokens)`` (default False), :class:`EncodeOptions`' truncation, and
    ``return_sequence_ids``. Without truncation the tokens are ``tokenizer.tokenize``'s; with it, ``/encode``'s for
    the same texts and options (``BatchEncoding.tokens()``, one per id), and ``sequence_ids`` is
    ``BatchEncoding.sequence_ids()``."""

    add_special_tokens: bool = _as_in(EncodeOptions, "add_special_tokens", default=False)
    truncation: bool | str | None = _as_in(EncodeOptions, "truncation")
    max_length: int | None = _as_in(EncodeOptions, "max_length")
    return_sequence_ids: bool = _option(
        False, doc="Also answer sequence_ids: per token None (special), 0 (text) or 1 (pair)."
    )

    def as_encode_options(self) -> EncodeOptions:
        """The encode whose tokens these are (truncation resolves as an encode's)."""
        return EncodeOptions(
            add_special_tokens=self.add_special_tokens, truncation=self.truncation, max_length=self.max_length
        )


@dataclass(frozen=True)
class DecodeOptions:
    """The options of ``POST /decode``, beside ``ids``: ``tokenizer.batch_decode``'s, with its defaults."""

    skip_special_tokens: bool = False
    clean_up_tokenization_spaces: bool | None = None


def option_defaults(options: type[Any]) -> Mapping[str, Any]:
    return MappingProxyType({f.name: f.default for f in fields(options)})


#: Name -> default of each option set, in declaration order (read-only).
ENCODE_OPTIONS: Final = option_defaults(EncodeOptions)
LENGTHS_OPTIONS: Final = option_defaults(LengthOptions)
TOKENIZE_OPTIONS: Final = option_defaults(TokenizeOptions)
DECODE_OPTIONS: Final = option_defaults(DecodeOptions)


def changed_options(options: Any) -> dict[str, Any]:
    """The options of ``options`` (an option set) that differ from their default, by value or by type (``0`` is not
    ``False``), in declaration order: what a client sends."""
    sent = {}
    for declared in fields(options):
        value = getattr(options, declared.name)
        default = declared.default
        if value != default or type(value) is not type(default):
            sent[declared.name] = value
    return sent


# -- conversations: POST /chat/encode and /chat/render -------------------------------------------------
#: Where assistant masks come from: the template's ``{% generation %}`` markers, or the rendered turns.
ASSISTANT_MASK_SOURCES: Final = ("generation", "turns")
#: The key of the assistant masks in a ``/chat/encode`` answer (after the other keys, as transformers adds it).
ASSISTANT_MASKS_KEY: Final = "assistant_masks"
#: The options transformers 5's ``apply_chat_template`` takes in ``tokenizer_kwargs=`` (as plain keywords they would
#: be template variables): on the wire, options of their own.
CHAT_TOKENIZER_KWARGS: Final = ("pad_to_multiple_of", "padding_side", "return_attention_mask")


@dataclass(frozen=True)
class ChatOptions:
    """The options of ``POST /chat/encode`` and ``/chat/render``, beside ``conversations``: those of
    ``apply_chat_template(conversations, tokenize=True, return_dict=True, ...)`` with transformers 5's names and
    defaults, in its signature's order, then :data:`CHAT_TOKENIZER_KWARGS` and ``chat_template_kwargs`` (its
    ``**kwargs``: template variables); ``assistant_masks_from`` sits beside ``return_assistant_tokens_mask``."""

    tools: Sequence[Mapping[str, Any]] | None = _option(
        None, doc="Tools (JSON schemas) the template may show the model; with tools, a tool_use template is chosen."
    )
    documents: Sequence[Mapping[str, Any]] | None = _option(
        None, doc="Documents (e.g. title and text) for RAG templates."
    )
    chat_template: str | None = _option(
        None,
        doc="The name of one of the tokenizer's chat templates (GET /info lists them); a template body only where "
        "the server allows bodies (--allow-chat-template-bodies).",
    )
    add_generation_prompt: bool = _option(False, doc="End with the cue that opens an assistant message.")
    continue_final_message: bool | str = _option(
        False,
        doc="Leave the final (assistant) message open to be continued; a string names the field to continue "
        "(e.g. reasoning_content).",
    )
    padding: bool | str = _as_in(EncodeOptions, "padding")
    truncation: bool | str | None = _as_in(EncodeOptions, "truncation", default=False)
    max_length: int | None = _as_in(EncodeOptions, "max_length")
    return_assistant_tokens_mask: bool = _option(
        False, doc="Also answer assistant_masks: 1 for each token the assistant wrote, else 0."
    )
    assistant_masks_from: str = _option(
        "generation",
        values=ASSISTANT_MASK_SOURCES,
        doc="generation: the template's {% generation %} markers (refused without them, where transformers would "
        "answer all zeros); turns: each assistant message's rendered turn (exact, or refused where the template "
        "rewrites earlier turns).",
    )
    pad_to_multiple_of: int | None = _as_in(EncodeOptions, "pad_to_multiple_of")
    padding_side: str | None = _as_in(EncodeOptions, "padding_side")
    return_attention_mask: bool | None = _as_in(EncodeOptions, "return_attention_mask")
    chat_template_kwargs: Mapping[str, Any] | None = _option(
        None, doc="Variables the template reads (e.g. enable_thinking): transformers' **kwargs."
    )

    def as_encode_options(self) -> EncodeOptions:
        """The encode of the rendered texts, as ``apply_chat_template`` calls it: no special tokens added (the
        template wrote them), offsets when masks are made from them."""
        return EncodeOptions(
            add_special_tokens=False,
            padding=self.padding,
            truncation=self.truncation,
            max_length=self.max_length,
            pad_to_multiple_of=self.pad_to_multiple_of,
            padding_side=self.padding_side,
            return_attention_mask=self.return_attention_mask,
            return_offsets_mapping=self.return_assistant_tokens_mask,
        )


#: Name -> default of the chat options, in declaration order.
CHAT_OPTIONS: Final = option_defaults(ChatOptions)


# -- what /encode answers --------------------------------------------------------------------------------
#: Output keys, in the order transformers' ``BatchEncoding`` holds them (a result holds a subset).
OUTPUT_KEYS: Final = (
    "input_ids",
    "token_type_ids",
    "attention_mask",
    "special_tokens_mask",
    "offset_mapping",
    "length",
    "overflow_to_sample_mapping",
)

# -- POST /lengths: token counts without the ids --------------------------------------------------------
#: The answer's one key: per text (or pair), ``len(tokenizer(text, text_pair, **options)["input_ids"])``; with
#: ``return_overflowing_tokens``, the list of its rows' counts (first window, then each overflow window).
LENGTHS_KEY: Final = "lengths"
#: The server's default ``max_texts_per_request`` (``GET /info`` reports its own): the most texts (or pairs), id
#: lists or conversations in one request. Here because a client relies on it too.
MAX_TEXTS_PER_REQUEST: Final = 4096
#: Texts per ``/lengths`` request a client sends by default: one request at the server's default limit.
LENGTHS_BATCH_TEXTS: Final = MAX_TEXTS_PER_REQUEST

# -- media types and headers -----------------------------------------------------------------------------
JSON_MEDIA_TYPE: Final = "application/json"
#: ``Accept`` this for a safetensors blob of int64 arrays (a rectangular result only).
SAFETENSORS_MEDIA_TYPE: Final = "application/vnd.safetensors"
#: The safetensors dtypes an answer's arrays may have -> numpy's name of each (little-endian, as the format is).
SAFETENSORS_DTYPES: Final = MappingProxyType({"I64": "<i8", "I32": "<i4", "BOOL": "?", "U8": "u1"})
#: ``Accept`` this (opt-in) for any result, ragged too, as safetensors int64 arrays: each per-token key's rows
#: concatenated, plus :data:`RAGGED_ROW_LENGTHS` (:data:`PER_ROW_KEYS` stay one value per row). A server that
#: predates it answers JSON.
RAGGED_MEDIA_TYPE: Final = "application/vnd.tokenizer-service.ragged+safetensors"
#: The entry of a ragged answer holding each row's length (not a transformers key, so it cannot collide).
RAGGED_ROW_LENGTHS: Final = "row_lengths"
#: Output keys with one value per row (not per token): a ragged answer keeps them as ``[rows]`` arrays.
PER_ROW_KEYS: Final = ("length", "overflow_to_sample_mapping")
#: Sent with every encode, tokenize and decode answer: the served tokenizer's fingerprint.
FINGERPRINT_HEADER: Final = "X-Tokenizer-Fingerprint"
#: What a fingerprint covers, by version (``/info`` reports it; job records store it beside the fingerprint).
#: 1: tokenizer.json and the encode's config. 2: also every chat template, the special tokens they see, the
#: tokenizer class and decode's settings (so every fingerprint changed).
FINGERPRINT_SCHEME: Final = 2
#: The form of a fingerprint: ``sha256:`` and 64 hex digits.
FINGERPRINT_PREFIX: Final = "sha256:"
RETRY_AFTER_HEADER: Final = "Retry-After"
AUTHORIZATION_HEADER: Final = "Authorization"
AUTH_SCHEME: Final = "Bearer"

# -- errors ----------------------------------------------------------------------------------------------
#: Every error answer is a JSON object with these two fields: what to fix, and the kind of error.
ERROR_FIELD: Final = "error"
ERROR_TYPE_FIELD: Final = "error_type"


@dataclass(frozen=True)
class ErrorType:
    """One kind of error answer: its status, the client exception it becomes (named: a class of
    ``service.transport.exceptions``), and what a caller does about it (the API docs' description)."""

    status: int
    exception: str
    advice: str


#: The one status table: ``error_type`` -> status, client exception, advice. The server's error kinds (the
#: engine's, then the web layer's) are these keys; the client raises by a body's ``error_type``, by status only for
#: a body without one (:data:`EXCEPTION_BY_STATUS`).
ERROR_TYPES: Final[Mapping[str, ErrorType]] = MappingProxyType(
    {
        "invalid_request": ErrorType(422, "InvalidRequest", "Malformed JSON, or a wrong or unknown field."),
        "tokenizer": ErrorType(422, "InvalidRequest", "Options or input the tokenizer refuses, as transformers would."),
        "too_large": ErrorType(
            413,
            "PayloadTooLarge",
            "Over a limit (body, texts, characters, response tokens) or over the whole memory budget.",
        ),
        "overloaded": ErrorType(
            429, "ServerBusy", "The queue is full or the memory budget has no room now: retry after Retry-After."
        ),
        "unavailable": ErrorType(
            503,
            "ServerBusy",
            "Not ready, or draining: retry after Retry-After, elsewhere (the connection is closed).",
        ),
        "timeout": ErrorType(504, "ServerBusy", "Waited past the queue deadline."),
        "internal": ErrorType(
            500,
            "RequestRejected",
            "Report it: the server logged the error's type and stack, never the request's content.",
        ),
        "malformed_http": ErrorType(
            400,
            "RequestRejected",
            "Not HTTP/1.1 the server can parse (the connection is closed after the answers before it).",
        ),
        "headers_too_large": ErrorType(
            431, "RequestRejected", "The request line and headers are over the limit (the connection is closed)."
        ),
        "request_timeout": ErrorType(
            408,
            "RequestTimeout",
            "The request's headers or body took too long to arrive (the connection is closed).",
        ),
        "unauthorized": ErrorType(401, "Unauthorized", "Missing or wrong API key (when the server has one)."),
        "not_found": ErrorType(404, "RequestRejected", "Fix the path (the route table lists every route)."),
        "method_not_allowed": ErrorType(405, "RequestRejected", "Use the method the route table gives the route."),
        "not_acceptable": ErrorType(
            406, "NotAcceptable", "A ragged result asked for as safetensors: ask for padding, or accept JSON."
        ),
        "unsupported_media_type": ErrorType(415, "RequestRejected", "The body is not uncompressed UTF-8 JSON."),
        # nginx's "client closed request": the client left before its answer, so it is sent to nobody
        "client_gone": ErrorType(499, "RequestRejected", "Nothing: the client left before its answer."),
    }
)
#: The exception for an answer naming no known ``error_type`` (a proxy's page): by status, plus a proxy's 502 (a
#: replica restarting) as busy.
EXCEPTION_BY_STATUS: Final[Mapping[int, str]] = MappingProxyType(
    {**{error.status: error.exception for error in ERROR_TYPES.values()}, 502: "ServerBusy"}
)

# -- environment -----------------------------------------------------------------------------------------
#: Prefix of every server setting's environment variable (``TOKENIZER_SERVICE_MAX_BODY_BYTES``...).
ENV_PREFIX: Final = "TOKENIZER_SERVICE_"
#: The client's base URL(s), comma-separated, when none is passed.
URL_ENV: Final = ENV_PREFIX + "URL"
#: The API key: the server requires it when set, the client sends it when set.
API_KEY_ENV: Final = ENV_PREFIX + "API_KEY"
