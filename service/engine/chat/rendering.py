"""Step 1 (:func:`render_chats`): each conversation rendered as transformers' ``render_jinja_template`` does,
with the assistant's character spans from markers or turns, and a template's failures as refusals naming the
conversation. Pure Python, never the Rust tokenizer (the package docstring)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..bounds import utf8_length
from ..errors import ErrorKind, ServiceError
from .limits import _COMPACT_BLOCKS, RenderWatch, _RenderCancelled
from .templates import PreparedChats, _detail

#: transformers' names for a message's reasoning (``_REASONING_FIELDS``), the first being what templates read.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "  # transformers' marker for where the final message ends


class _RenderRefused(Exception):
    """A conversation that cannot be rendered as asked: becomes a ServiceError naming it."""

    def __init__(self, kind: ErrorKind, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass
class RenderedChats:
    """The texts to encode, when masks are wanted each one's assistant character spans, and what they hold."""

    texts: list[str]
    spans: list[list[tuple[int, int]]] | None
    held_bytes: int

    @property
    def chars(self) -> int:
        return sum(map(len, self.texts))

    @property
    def utf8_bytes(self) -> int:
        return sum(map(utf8_length, self.texts))


def render_chats(prepared: PreparedChats, watch: RenderWatch | None = None) -> RenderedChats:
    """Render every conversation (and, for ``"turns"``, their prefixes), or raise a ServiceError naming it."""
    from transformers.utils import chat_template_utils as ctu

    watch = watch or RenderWatch()
    options, template = prepared.options, prepared.template
    compiled = template.compile()
    masks = options.return_assistant_tokens_mask
    turns = masks and options.assistant_masks_from == "turns"
    # what every conversation's render is given, made plain once, as render_jinja_template does
    tools = ctu._plain_template_data(list(options.tools) if options.tools is not None else None)
    documents = ctu._plain_template_data(list(options.documents) if options.documents is not None else None)
    variables = ctu._plain_template_data(dict(prepared.template_variables))
    renderer = _Renderer(compiled, template.body, tools, documents, variables, prepared.limits.max_chars, watch)

    texts: list[str] = []
    all_spans: list[list[tuple[int, int]]] = []
    held = 0
    for i, conversation in enumerate(prepared.conversations):
        watch.check()
        try:
            messages = _messages(ctu, conversation)
            text, spans = renderer.render(
                messages,
                options.add_generation_prompt,
                continue_final_message=options.continue_final_message,
                track=masks and not turns,
            )
            if turns:
                spans = _turn_spans(renderer, messages, text)
        except _RenderRefused as refused:
            raise ServiceError(refused.kind, f"conversations[{i}]: {refused.reason}") from None
        held += sys.getsizeof(text) + 8 + _SPAN_BYTES * len(spans)
        watch.hold(held)
        texts.append(text)
        all_spans.append(spans)
    return RenderedChats(texts, all_spans if masks else None, held)


#: What one assistant span held by a rendered conversation costs (a tuple of two ints, a list slot).
_SPAN_BYTES = 128


def _messages(ctu: Any, conversation: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A fresh copy of a conversation as transformers hands it to the template."""
    normalized = ctu._normalize_chat_messages(list(conversation))
    return list(ctu._alias_reasoning_fields(ctu._plain_template_data(normalized)))


@dataclass
class _Renderer:
    """One compiled template with the arguments every rendering of a request shares."""

    compiled: Any
    template_body: str
    tools: Any
    documents: Any
    variables: dict[str, Any]
    max_chars: int
    watch: RenderWatch

    def render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool,
        *,
        continue_final_message: bool | str = False,
        track: bool = False,
    ) -> tuple[str, list[tuple[int, int]]]:
        """The rendering of ``messages`` and (``track``) its generation spans; stops past ``max_chars``."""
        final_text = ""
        if continue_final_message:
            messages, final_text = _tag_final_message(messages, continue_final_message, self.template_body)
        blocks: list[str] = []
        spans: list[tuple[int, int]] = []
        compiled = self.compiled
        arguments = {
            "messages": messages,
            "tools": self.tools,
            "documents": self.documents,
            "add_generation_prompt": add_generation_prompt,
            **self.variables,
        }
        # transformers' tracker records each generation block's span from the blocks so far
        tracker = compiled.environment.activate_tracker(blocks, spans) if track else contextlib.nullcontext()
        try:
            with tracker:
                self._collect(compiled.generate(**arguments), blocks)
        except (_RenderRefused, _RenderCancelled, ServiceError):
            raise
        except Exception as exc:  # noqa: BLE001 -- a template can raise anything (TemplateError, TypeError...)
            raise _template_failure(exc) from None
        text = "".join(blocks)
        if continue_final_message:
            text = _cut_at_final_message(text, final_text)
        return text, spans

    def _collect(self, generated: Any, blocks: list[str]) -> None:
        """Append the non-empty blocks, stopping past ``max_chars``; join them in place every
        :data:`_COMPACT_BLOCKS` (the tracker reads only their joined length) and check the watch."""
        length = 0
        for block in generated:
            if not block:
                continue
            blocks.append(block)
            length += len(block)
            if length > self.max_chars:
                raise _RenderRefused(
                    ErrorKind.TOO_LARGE,
                    f"it renders to over max_text_chars={self.max_chars} characters; send a shorter conversation",
                )
            if len(blocks) >= _COMPACT_BLOCKS:
                blocks[:] = ["".join(blocks)]
                self.watch.check()


def _tag_final_message(
    messages: list[dict[str, Any]], field: bool | str, template_body: str
) -> tuple[list[dict[str, Any]], str]:
    """transformers' ``continue_final_message`` preparation: tag, in place, where the final message's field ends."""
    name = field if isinstance(field, str) else "content"
    final = messages[-1].get(name)
    if final is None:
        raise _RenderRefused(
            ErrorKind.INVALID_REQUEST, f"continue_final_message is set but the final message has no {name!r}"
        )
    fields = [name]
    if name in _REASONING_FIELDS:  # reasoning is copied under several names: tag each copy
        fields = [other for other in _REASONING_FIELDS if messages[-1].get(other) == final]
    if not any(other in template_body for other in fields):
        raise _RenderRefused(
            ErrorKind.TOKENIZER,
            f"continue_final_message continues the final message's {name!r}, which the chat template never reads",
        )
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if "text" in block:
                final_text = block["text"]
                block["text"] = block["text"] + _CONTINUE_TAG
                break
        else:
            raise _RenderRefused(
                ErrorKind.INVALID_REQUEST,
                "continue_final_message is set but the final message has no text part to continue",
            )
        return messages, str(final_text)
    for other in fields:
        messages[-1][other] = messages[-1][other] + _CONTINUE_TAG
    return messages, str(final)


def _cut_at_final_message(text: str, final_text: str) -> str:
    """transformers' cut of a ``continue_final_message`` rendering where the final message ends."""
    tag = _CONTINUE_TAG.strip()
    if final_text.strip() not in text or tag not in text:
        raise _RenderRefused(
            ErrorKind.TOKENIZER,
            "continue_final_message is set but the template does not render the final message as it is (it drops "
            "or changes part of it), so there is nowhere to continue it from",
        )
    at = text.rindex(tag)
    if text[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return text[:at]
    return text[:at].rstrip()  # the template trimmed the message's trailing space


def _template_failure(exc: Exception) -> _RenderRefused:
    import jinja2.exceptions

    if isinstance(exc, jinja2.exceptions.UndefinedError):
        reason = (
            f"the chat template reads something this conversation does not have ({_detail(exc)}); add it to "
            "the messages, or pass the variable in chat_template_kwargs"
        )
    elif isinstance(exc, jinja2.exceptions.SecurityError):
        reason = f"the chat template did something its sandbox forbids ({_detail(exc)})"
    elif type(exc) is jinja2.exceptions.TemplateError:  # raise_exception(...) in the template
        reason = f"the chat template refused this conversation: {_detail(exc)}"
    else:
        reason = f"the chat template failed on this conversation: {type(exc).__name__}: {_detail(exc)}"
    return _RenderRefused(ErrorKind.TOKENIZER, reason)


def _turn_spans(renderer: _Renderer, messages: list[dict[str, Any]], whole: str) -> list[tuple[int, int]]:
    """The ``"turns"`` spans of one conversation's rendering ``whole`` (the package docstring)."""
    spans: list[tuple[int, int]] = []
    for k, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        try:  # (the sandbox is immutable: a render cannot change the messages the next one reads)
            prompt, _ = renderer.render(messages[:k], True)
            turn, _ = renderer.render(messages[: k + 1], False)
        except _RenderRefused as refused:
            if refused.kind is ErrorKind.TOO_LARGE:
                raise
            raise _RenderRefused(
                refused.kind,
                f'assistant_masks_from="turns" renders the conversation up to each assistant message, and for '
                f"message {k} {refused.reason[0].lower()}{refused.reason[1:]}",
            ) from None
        if not turn.startswith(prompt):
            raise _RenderRefused(
                ErrorKind.TOKENIZER,
                f"assistant_masks_from=\"turns\" cannot tell message {k}'s turn apart exactly: the template's "
                "generation prompt is not how it begins that assistant message (rendered with "
                "add_generation_prompt=True, the conversation before it is not the beginning of the conversation "
                'up to it). Use a template with {% generation %} markers and assistant_masks_from="generation"',
            )
        if not whole.startswith(turn) or (spans and len(prompt) < spans[-1][1]):
            raise _RenderRefused(
                ErrorKind.TOKENIZER,
                f'assistant_masks_from="turns" needs a template that renders every part of a conversation as the '
                f"beginning of the whole, and this one does not: rendered up to message {k} the conversation is not "
                "the beginning of its whole rendering, because the template rewrites earlier turns (e.g. drops past "
                'reasoning). Use a template with {% generation %} markers and assistant_masks_from="generation"',
            )
        spans.append((len(prompt), len(turn)))
    return spans
