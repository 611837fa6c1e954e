"""The calls a client makes, without I/O: request bodies from tokenizer-style arguments, and how a successful
answer is read into a result (an error answer: :mod:`.answers`). Shared by the sync and async clients; the contract
itself is ``service.wire``."""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, overload

from ..transport import Response
from ..transport.exceptions import ProtocolError
from ..wire import (
    CHAT_ENCODE_PATH,
    CHAT_RENDER_PATH,
    CHAT_TOKENIZER_KWARGS,
    DECODE_PATH,
    ENCODE_PATH,
    INFO_PATH,
    JSON_MEDIA_TYPE,
    LENGTHS_KEY,
    LENGTHS_PATH,
    RAGGED_MEDIA_TYPE,
    RETURN_TENSORS,
    SAFETENSORS_MEDIA_TYPE,
    TOKENIZE_PATH,
    ChatOptions,
    DecodeOptions,
    EncodeOptions,
    LengthOptions,
    TokenizeOptions,
    changed_options,
)
from .results import (
    EncodeResult,
    RaggedResult,
    arrays_from_safetensors,
    lists_as_transformers_gives,
    ragged_from_safetensors,
    to_torch,
)

json_loads: Callable[[bytes | bytearray], Any]
try:  # orjson where installed: faster (it is on the server side)
    from orjson import loads as json_loads
except ImportError:  # pragma: no cover - depends on the environment
    json_loads = json.loads


T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One logical call: what to send, and how to read a successful answer."""

    method: str
    path: str
    body: bytes | None
    parse: Callable[[Response, str], T]
    accept: str = JSON_MEDIA_TYPE  # the media type asked for: JSON, safetensors or the ragged binary
    fingerprint_in_body: bool = False  # /info reports it in its JSON; the others in X-Tokenizer-Fingerprint

    @property
    def what(self) -> str:
        return f"{self.method} {self.path}"


def _dumps(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _json_body(response: Response, url: str, key: str | None = None) -> Any:
    """The JSON object of the answer, which must hold ``key``; else ProtocolError."""
    try:
        body = json_loads(response.body)
    except ValueError as exc:
        raise ProtocolError(f"{url}: the answer is not JSON ({exc})", url=url) from exc
    if not isinstance(body, dict) or (key is not None and key not in body):
        want = f"an object with {key!r}" if key else "an object"
        raise ProtocolError(f"{url}: expected {want}, got {bytes(response.body[:100])!r}", url=url)
    return body


def _listed(body: dict[str, Any], key: str, count: int, what: str, url: str, entry: type | None = None) -> list[Any]:
    values = body.get(key)
    if not isinstance(values, list) or len(values) != count or (entry and not all(type(v) is entry for v in values)):
        raise ProtocolError(f"{url}: expected {count} {what} under {key!r}, got {values!r:.200}", url=url)
    return values


def split_inputs(text: Any, text_pair: Any) -> tuple[list[str], list[str] | None, bool]:
    """(texts, pairs, batched) as transformers' ``__call__`` reads its first two arguments."""
    if isinstance(text, str):
        if text_pair is not None and not isinstance(text_pair, str):
            raise TypeError("a single text takes a single str as text_pair, not " + type(text_pair).__name__)
        # transformers: `[(text, text_pair)] if text_pair else [text]` -- an empty pair means no pair
        return [text], ([text_pair] if text_pair else None), False
    if not isinstance(text, (list, tuple)):
        raise TypeError(f"text must be a str, or a list or tuple of str (a batch), not {type(text).__name__}")
    if isinstance(text_pair, str):
        raise TypeError("when encoding a batch, text_pair must be a list or tuple with one entry per text")
    if text_pair is not None:
        if not isinstance(text_pair, (list, tuple)):
            raise TypeError(f"text_pair must be a list or tuple of str, not {type(text_pair).__name__}")
        if len(text_pair) != len(text):
            raise ValueError(
                f"batch length of text: {len(text)} does not match batch length of text_pair: {len(text_pair)}"
            )
        texts, pairs = list(text), list(text_pair)
    elif text and all(isinstance(item, (list, tuple)) and len(item) == 2 for item in text):
        texts, pairs = [item[0] for item in text], [item[1] for item in text]  # a batch of (text, pair)
    else:
        texts, pairs = list(text), None
    for name, values in (("text", texts), ("text_pair", pairs or ())):
        for i, value in enumerate(values):
            if not isinstance(value, str):
                raise TypeError(
                    f"{name}[{i}] is a {type(value).__name__}; the service encodes str only "
                    "(pre-tokenized input is not supported)"
                )
    return texts, pairs, True


def _texts_body(texts: list[str], pairs: list[str] | None, options: Any) -> bytes:
    payload: dict[str, Any] = {"texts": texts}
    if pairs is not None:
        payload["text_pairs"] = pairs
    payload.update(changed_options(options))
    return _dumps(payload)


def encode_call(text: Any, text_pair: Any, options: EncodeOptions, return_tensors: str | None) -> Call[EncodeResult]:
    if return_tensors not in RETURN_TENSORS:
        raise ValueError(f"return_tensors must be one of {RETURN_TENSORS}, not {return_tensors!r}")
    texts, pairs, batched = split_inputs(text, text_pair)
    body = _texts_body(texts, pairs, options)
    return encode_call_for(body, ENCODE_PATH, batched, bool(options.return_overflowing_tokens), return_tensors)


def encode_call_for(
    body: bytes, path: str, batched: bool, overflowing: bool, return_tensors: str | None
) -> Call[EncodeResult]:
    """An encode of ``body`` on ``path``: JSON lists shaped as transformers gives them (``batched``: a batch was asked
    for), or a safetensors blob as numpy arrays or torch tensors."""
    if return_tensors == "pt":  # said before the request, not after its answer
        from ..extras import require_module

        require_module("torch", "torch", 'return_tensors="pt"')
    if return_tensors is None:

        def parse(response: Response, url: str) -> EncodeResult:
            return EncodeResult(
                lists_as_transformers_gives(_json_body(response, url, "input_ids"), batched, overflowing)
            )
    else:

        def parse(response: Response, url: str) -> EncodeResult:
            if not response.headers.get("content-type", "").startswith(SAFETENSORS_MEDIA_TYPE):
                raise ProtocolError(
                    f"{url}: asked for {SAFETENSORS_MEDIA_TYPE}, got {response.headers.get('content-type')!r}", url=url
                )
            arrays = arrays_from_safetensors(response.body, url)
            return EncodeResult(to_torch(arrays) if return_tensors == "pt" else arrays)

    accept = JSON_MEDIA_TYPE if return_tensors is None else SAFETENSORS_MEDIA_TYPE
    return Call("POST", path, body, parse, accept=accept)


def encode_ragged_call(text: Any, text_pair: Any, options: EncodeOptions) -> Call[RaggedResult]:
    texts, pairs, _ = split_inputs(text, text_pair)  # always rows: a single text is a batch of one
    return ragged_call_for(_texts_body(texts, pairs, options), ENCODE_PATH)


def ragged_call_for(body: bytes, path: str) -> Call[RaggedResult]:
    """An encode of ``body`` on ``path`` answered in the ragged binary layout (a JSON answer, from a server that
    predates it, is read as rows)."""

    def parse(response: Response, url: str) -> RaggedResult:
        content_type = response.headers.get("content-type", "")
        if content_type.startswith(RAGGED_MEDIA_TYPE):
            return ragged_from_safetensors(response.body, url)
        if content_type.startswith(JSON_MEDIA_TYPE):
            return RaggedResult.from_lists(_json_body(response, url, "input_ids"))
        raise ProtocolError(f"{url}: asked for {RAGGED_MEDIA_TYPE}, got {content_type!r}", url=url)

    return Call("POST", path, body, parse, accept=RAGGED_MEDIA_TYPE)


def lengths_calls(
    text: Any, text_pair: Any, options: LengthOptions, batch_size: int
) -> tuple[list[Call[list[Any]]], bool]:
    """The ``/lengths`` requests for ``text`` (read as ``encode`` reads it), ``batch_size`` texts at most each, and
    whether it was a batch."""
    _checked_batch_size(batch_size)
    texts, pairs, batched = split_inputs(text, text_pair)
    entry, want = (list, "lists of ints") if options.return_overflowing_tokens else (int, "ints")
    calls = []
    for start in range(0, len(texts), batch_size):
        some = texts[start : start + batch_size]

        def parse(response: Response, url: str, count: int = len(some)) -> list[Any]:
            return _listed(_json_body(response, url, LENGTHS_KEY), LENGTHS_KEY, count, want, url, entry)

        body = _texts_body(some, None if pairs is None else pairs[start : start + batch_size], options)
        calls.append(Call("POST", LENGTHS_PATH, body, parse))
    return calls, batched


def _checked_batch_size(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, not {batch_size!r}")
    return batch_size


def _id_list(ids: Any, what: str) -> list[int]:
    if hasattr(ids, "tolist"):  # numpy array, torch tensor
        ids = ids.tolist()
    if isinstance(ids, int):
        return [ids]
    try:
        if isinstance(ids, (str, bytes)):
            raise TypeError
        return [operator.index(i) for i in ids]  # ints, numpy and torch integer scalars
    except TypeError:
        raise TypeError(
            f"{what} must be a sequence of int token ids (or a 1-D array or tensor), not {type(ids).__name__}"
        ) from None


@overload
def decode_call(sequences: Any, options: DecodeOptions, single: Literal[True]) -> Call[str]: ...
@overload
def decode_call(sequences: Any, options: DecodeOptions, single: Literal[False]) -> Call[list[str]]: ...
def decode_call(sequences: Any, options: DecodeOptions, single: bool) -> Call[str] | Call[list[str]]:
    if single:
        ids = [_id_list(sequences, "ids")]
    else:
        if hasattr(sequences, "tolist"):
            sequences = sequences.tolist()
        ids = [_id_list(row, f"sequences[{i}]") for i, row in enumerate(sequences)]
    payload: dict[str, Any] = {"ids": ids, **changed_options(options)}

    def parse(response: Response, url: str) -> Any:
        texts = _json_body(response, url, "texts")["texts"]
        return texts[0] if single else texts

    return Call("POST", DECODE_PATH, _dumps(payload), parse)


def tokenize_call(text: Any, pair: Any, options: TokenizeOptions) -> Call[Any]:
    """``/tokenize`` for ``text`` (and ``pair``), read as ``encode`` reads them."""
    texts, pairs, batched = split_inputs(text, pair)
    with_ids = bool(options.return_sequence_ids)

    def parse(response: Response, url: str) -> Any:
        body = _json_body(response, url, "tokens")
        tokens = _listed(body, "tokens", len(texts), "token lists", url)
        if not with_ids:
            return tokens if batched else tokens[0]
        sequence_ids = _listed(body, "sequence_ids", len(texts), "lists", url)
        if batched:
            return {"tokens": tokens, "sequence_ids": sequence_ids}
        return {"tokens": tokens[0], "sequence_ids": sequence_ids[0]}

    return Call("POST", TOKENIZE_PATH, _texts_body(texts, pairs, options), parse)


def read_conversations(conversation: Any) -> tuple[list[Any], bool]:
    """(conversations, batched) as ``apply_chat_template`` reads its first argument: one conversation (a list of
    messages) or a batch of them (a list of lists, or of objects with ``.messages``)."""
    if isinstance(conversation, (str, bytes)) or not isinstance(conversation, (list, tuple)):
        raise TypeError(
            "conversation must be a list of messages (dicts with role and content), or a list of such lists, not "
            + type(conversation).__name__
        )
    if len(conversation) == 0:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    first = conversation[0]
    if isinstance(first, (list, tuple)) or hasattr(first, "messages"):
        return [_messages_of(item) for item in conversation], True
    return [_messages_of(conversation)], False


def _messages_of(conversation: Any) -> list[Any]:
    messages = getattr(conversation, "messages", conversation)
    return [_plain_message(message) for message in messages]


def _plain_message(message: Any) -> Any:
    """A message as JSON takes it: a dataclass or pydantic model as its fields, as transformers normalises them (the
    server drops None-valued fields, as there)."""
    if isinstance(message, dict):
        return message
    if hasattr(message, "model_dump"):
        return message.model_dump()
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return dataclasses.asdict(message)
    return message  # the server names what is wrong with it


def _chat_body(conversations: list[Any], options: ChatOptions) -> bytes:
    if options.tools is not None:
        for i, tool in enumerate(options.tools):
            if callable(tool) and not isinstance(tool, dict):
                raise TypeError(
                    f"tools[{i}] is a function: the service takes tools as JSON schemas (make one in-process with "
                    "transformers.utils.get_json_schema(function))"
                )
    payload: dict[str, Any] = {"conversations": conversations, **changed_options(options)}
    try:
        return _dumps(payload)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"conversations and their options must hold JSON values only ({exc})") from None


def chat_tokenizer_kwargs(tokenizer_kwargs: dict[str, Any] | None, sanitize_control_tokens: bool) -> dict[str, Any]:
    """``apply_chat_template``'s ``tokenizer_kwargs`` as :class:`ChatOptions`, refusing what the service lacks."""
    if sanitize_control_tokens:
        raise ValueError(
            "sanitize_control_tokens is not supported by the service yet: control tokens in messages are encoded "
            "as the template writes them (as transformers does with sanitize_control_tokens=False)"
        )
    extra = dict(tokenizer_kwargs or {})
    unknown = sorted(set(extra) - set(CHAT_TOKENIZER_KWARGS))
    if unknown:
        raise ValueError(
            f"tokenizer_kwargs {unknown} are not supported by the service; it takes {list(CHAT_TOKENIZER_KWARGS)}"
        )
    return extra


def apply_chat_template_call(
    conversation: Any, options: ChatOptions, *, tokenize: bool, return_tensors: str | None, return_dict: bool
) -> Call[Any]:
    """``/chat/render`` for strings, else ``/chat/encode``, its answer shaped as transformers returns it."""
    if return_tensors not in RETURN_TENSORS:
        raise ValueError(f"return_tensors must be one of {RETURN_TENSORS}, not {return_tensors!r}")
    if not tokenize:
        return_dict = False  # as transformers: dicts come from the tokenizer only
    if options.return_assistant_tokens_mask and not (return_dict and tokenize):
        raise ValueError("`return_assistant_tokens_mask=True` requires `return_dict=True` and `tokenize=True`")
    conversations, batched = read_conversations(conversation)
    body = _chat_body(conversations, options)
    if not tokenize:

        def texts(response: Response, url: str) -> Any:
            rendered = _listed(_json_body(response, url, "texts"), "texts", len(conversations), "texts", url)
            return rendered if batched else rendered[0]

        return Call("POST", CHAT_RENDER_PATH, body, texts)
    encode = encode_call_for(body, CHAT_ENCODE_PATH, batched, False, return_tensors)

    def parse(response: Response, url: str) -> Any:
        result = encode.parse(response, url)
        return result if return_dict else result["input_ids"]

    return Call("POST", CHAT_ENCODE_PATH, body, parse, accept=encode.accept)


def is_conversations(text: Any) -> bool:
    """Whether ``text`` is a conversation (a list of message dicts) or a batch of them."""
    if not isinstance(text, (list, tuple)) or not text:
        return False
    first = text[0]
    if isinstance(first, Mapping) or hasattr(first, "messages"):
        return True
    return isinstance(first, (list, tuple)) and bool(first) and isinstance(first[0], Mapping)


def chat_lengths_calls(
    conversation: Any, options: LengthOptions, batch_size: int
) -> tuple[list[Call[list[int]]], bool]:
    """:func:`lengths_calls` of conversations: the row lengths of ragged encodes of ids only, the options that only
    texts have refused."""
    if options.stride or options.return_overflowing_tokens:
        raise ValueError(
            "stride and return_overflowing_tokens do not apply to conversations (apply_chat_template has none)"
        )
    conversations, batched = read_conversations(conversation)
    counted = ChatOptions(truncation=options.truncation, max_length=options.max_length, return_attention_mask=False)
    calls = []
    for start in range(0, len(conversations), _checked_batch_size(batch_size)):
        ragged = chat_ragged_call(conversations[start : start + batch_size], counted)

        def parse(response: Response, url: str, ragged: Call[RaggedResult] = ragged) -> list[int]:
            return [int(n) for n in ragged.parse(response, url).row_lengths.tolist()]

        calls.append(Call("POST", CHAT_ENCODE_PATH, ragged.body, parse, accept=ragged.accept))
    return calls, batched


def chat_ragged_call(conversations: list[Any], options: ChatOptions) -> Call[RaggedResult]:
    return ragged_call_for(_chat_body(conversations, options), CHAT_ENCODE_PATH)


def info_call() -> Call[dict[str, Any]]:
    return Call(
        "GET", INFO_PATH, None, lambda response, url: _json_body(response, url, "fingerprint"), fingerprint_in_body=True
    )
