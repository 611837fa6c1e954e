"""Conversations, exactly as transformers' ``apply_chat_template`` makes them, in batches. No HTTP in here.

``tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True, **options)`` does three things;
we do them as three steps, each where it belongs:

1. **Render** (:func:`render_chats`): each conversation through the tokenizer's jinja template, with transformers'
   own data preparation (``None``-valued keys dropped, values made plain, reasoning fields aliased, the final
   message tagged for ``continue_final_message``) and its own compiled template and sandbox, so the text is
   transformers' text. Pure Python. It runs on the **render thread** (:class:`ChatRenderer`): one dedicated
   thread, neither the event loop (a render of thousands of conversations takes tens of milliseconds of GIL time
   it would otherwise block) nor the engine's tokenizer thread. Rendering reads only the template text and a
   snapshot of the special tokens taken at load, never the Rust tokenizer, so it cannot touch the tokenizer's
   mutable padding/truncation state from a second thread; and while the tokenizer thread is inside a Rust
   ``encode_batch`` (which releases the GIL) the render thread renders the next request: the two overlap. One
   thread, because rendering is GIL-bound: a second would only contend for the GIL with the event loop. A render
   answers to a :class:`RenderWatch` as it goes: its caller leaving, its deadline, and the memory its finished
   renderings hold, charged to the request's reservation (:class:`RenderCharge`) -- so a template that makes a
   small body huge is refused by the memory budget as it renders, never after.
2. **Encode** the rendered texts as ``tokenizer(texts, add_special_tokens=False, padding=..., truncation=...,
   max_length=..., **tokenizer_kwargs)``: a plain encode (:meth:`ChatOptions.as_encode_options`), which the engine's
   batched encode path serves like any ``/encode`` (same admission, memory budget -- its bound computed from the
   rendered texts before it queues -- micro-batching), asking for character offsets when masks are wanted.
   ``Engine.submit_chat_encode`` and ``submit_chat_render`` are these steps on the engine.
3. **Mask** (:func:`add_assistant_masks`): the tokens overlapping the assistant's character spans, marked exactly
   as transformers marks its generation spans (a token counts if it overlaps a span, scanning spans and tokens in
   order); the offsets are then dropped from the answer, as transformers never returns them.

**Assistant masks** (``return_assistant_tokens_mask=True``), from one of two sources (``assistant_masks_from``):

- ``"generation"`` (default): the spans the template wraps in ``{% generation %}`` ... ``{% endgeneration %}``:
  transformers' exact mask. A template without those markers is **refused** (transformers would return an
  all-zero mask with a warning), naming the remedy below.
- ``"turns"``: the spans are computed from renderings of the conversation itself. For each message ``k`` whose
  role is ``"assistant"``, let ``P`` be the rendering of ``messages[:k]`` *with* the generation prompt and ``Q``
  the rendering of ``messages[:k + 1]`` without it. The assistant's turn is the characters ``Q[len(P):]``: what
  rendering the message adds after the generation prompt -- its content, tool calls and whatever the template
  closes the turn with (an end-of-turn token and its newline), but never the generation prompt (the cue the
  model is given, e.g. ``<|im_start|>assistant\\n``). This is exact only when ``P`` is a prefix of ``Q``, ``Q``
  is a prefix of the whole rendering, and the turns come in order; otherwise the conversation is **refused**
  with the reason (the template rewrites earlier turns -- e.g. drops past reasoning -- or its generation prompt
  is not how it begins an assistant message). Never approximated.

  On a template whose markers wrap exactly what follows the generation prompt up to the end of the message's
  rendering -- the placement the published training templates use (the cue outside, content and end of turn
  inside) -- ``"turns"`` gives the same masks as ``"generation"`` (``tests/test_chat_masks.py`` checks it on
  three templates and hundreds of generated conversations). Where a template's markers sit elsewhere the two
  differ by the characters in between, and each mode keeps its own definition: e.g. markers opened before the
  cue's final newline (``<|im_start|>assistant{% generation %}\\n...``) make ``"generation"`` also mark the
  token of that newline, which ``"turns"`` leaves out because the generation prompt gives it to the model.

**Refusals beyond transformers'** (each says which conversation): a message that is not an object or has no
string ``role``; an empty conversation; ``continue_final_message`` on a conversation whose last message is not
the assistant's (transformers would continue a user message); a template variable in ``chat_template_kwargs``
that would collide with one transformers passes itself; a template name the tokenizer does not have (transformers
would render the name itself as a template). Template bodies in a request are refused unless the server allows
them (:attr:`ChatTemplates.allow_template_bodies`).

**Options** keep transformers 5's names and defaults (:class:`ChatOptions`). ``pad_to_multiple_of``,
``padding_side`` and ``return_attention_mask`` are what transformers 5 takes in ``tokenizer_kwargs=`` (passed
as plain keywords, it hands them to the template as variables instead); ``chat_template_kwargs`` are its
``**kwargs`` (template variables). A template variable that is missing renders as nothing, as in jinja and
transformers, until the template reads into it (``message.content.strip()``): that is refused, naming it.

No conversation content is logged, nor put in an error message (other than what a template's own
``raise_exception(...)`` says, which is repeated, cut to 300 characters).
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from ..wire import ASSISTANT_MASK_SOURCES, ASSISTANT_MASKS_KEY, PADDING_SIDES, ChatOptions, EncodeOptions
from .bounds import utf8_length
from .encoding import EncodedBatch, TokenizerFacts, plan_encode
from .errors import ErrorKind, ServiceError
from .memory import Reservation

__all__ = [
    "ASSISTANT_MASK_SOURCES",
    "ChatOptions",
    "ChatTemplates",
    "RenderLimits",
    "PreparedChats",
    "RenderedChats",
    "ChatRenderer",
    "render_chats",
    "add_assistant_masks",
    "assistant_masks",
    "encode_chats",
]

#: transformers' test for generation markers in a template (``render_jinja_template``).
_GENERATION_MARKER = re.compile(r"\{\%-?\s*generation\s*-?\%\}")
#: What transformers passes to every template itself: a template variable of that name cannot come from
#: ``chat_template_kwargs`` (in transformers, those names bind to ``apply_chat_template``'s own parameters, or
#: collide with the render's arguments).
RESERVED_TEMPLATE_VARIABLES = frozenset(
    {
        "messages",
        "tools",
        "documents",
        "add_generation_prompt",
        "conversation",
        "chat_template",
        "continue_final_message",
        "tokenize",
        "sanitize_control_tokens",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
#: The longest part of a template's own error message repeated to the caller.
_MAX_ERROR_DETAIL = 300


@dataclass(frozen=True)
class RenderLimits:
    """Bounds of one request's rendering, checked while it renders (a template can make a small conversation
    huge): ``max_chars`` per rendered conversation (the engine's ``max_text_chars``), ``max_total_chars`` for all
    of a request's renderings together (None: no count of its own; the engine's memory budget then bounds it,
    see :class:`RenderWatch`), ``max_conversations`` per request."""

    max_chars: int = 200_000
    max_total_chars: int | None = 16 * 1024 * 1024
    max_conversations: int = 4096

    def in_progress_bytes(self) -> int:
        """Bytes the renderings in progress hold at most, beside the finished ones: two at once (``"turns"``
        renders a prefix beside the whole), each its blocks and the joined copies made of them (a tracked
        generation block joins the blocks so far), Python strings taking up to 4 bytes per character, plus the
        block objects between compactions."""
        return 2 * (3 * 4 * self.max_chars + _COMPACT_BLOCKS * 128)

    def held_bytes_bound(self) -> int:
        """Bytes a render holds at most (with ``max_total_chars`` set): its finished renderings and those in
        progress."""
        return 4 * (self.max_total_chars or 0) + self.in_progress_bytes()


#: A rendering's blocks are joined into one every this many blocks: a template yielding tiny blocks (or a loop
#: of them) holds no more than this many block objects at once.
_COMPACT_BLOCKS = 4096


class RenderWatch:
    """What a render in progress answers to, checked as it goes (on the render thread): its caller leaving
    (:meth:`cancel`), its ``deadline`` (``time.monotonic()``: TIMEOUT past it), and the memory its finished
    renderings hold (``charge(nbytes)``, called as they accumulate; it raises to stop the render, e.g. when the
    memory budget has no room). A template that computes for long without writing anything is only stopped at
    its next output."""

    def __init__(self, deadline: float | None = None, charge: Callable[[int], None] | None = None) -> None:
        self.deadline = deadline
        self._charge = charge
        self._cancelled = False

    def cancel(self) -> None:
        """The caller has gone: the render stops at its next check."""
        self._cancelled = True

    def check(self) -> None:
        if self._cancelled:
            raise _RenderCancelled
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise ServiceError(
                ErrorKind.TIMEOUT,
                "rendering the conversations took past the queue deadline; send fewer or shorter conversations",
            )

    def hold(self, nbytes: int) -> None:
        """The finished renderings now hold ``nbytes``."""
        if self._charge is not None:
            self._charge(nbytes)


class RenderCharge:
    """A render's ``charge`` (:class:`RenderWatch`): keeps ``reservation`` at ``base`` plus what the finished
    renderings hold, grown ahead in steps, from the render thread. :meth:`close` (on the loop, before the
    reservation can be released) stops any later charge from touching it: a render still running then stops."""

    STEP = 1 << 20

    def __init__(self, reservation: Reservation, base: int, what: str) -> None:
        self.reservation = reservation
        self.base = base
        self.what = what
        self._lock = threading.Lock()
        self._closed = False

    def __call__(self, held: int) -> None:
        with self._lock:
            if self._closed:
                raise _RenderCancelled
            need = self.base + held
            if need <= self.reservation.nbytes:
                return
            try:
                self.reservation.resize(need + max(self.STEP, held // 2), self.what)
            except ServiceError:
                self.reservation.resize(need, self.what)  # the refusal, if even this does not fit

    def close(self) -> None:
        with self._lock:
            self._closed = True


class _RenderCancelled(Exception):
    """The caller of a render has gone: nobody waits for its result."""


@dataclass(frozen=True)
class _Template:
    name: str | None  # None: a body from the request, or the tokenizer's one unnamed template
    body: str
    has_markers: bool

    def describe(self) -> str:
        return "the chat template" if self.name is None else f"the chat template {self.name!r}"


@dataclass(frozen=True)
class PreparedChats:
    """A checked request, ready to render: what :meth:`ChatTemplates.prepare` returns."""

    conversations: Sequence[Sequence[Mapping[str, Any]]]
    options: ChatOptions
    template: _Template
    template_variables: Mapping[str, Any]  # the special tokens, then chat_template_kwargs over them
    limits: RenderLimits
    encode_options: EncodeOptions


@dataclass
class RenderedChats:
    """Rendered conversations: the texts to encode and, when masks are wanted, each one's assistant character
    spans (``(start, end)``, in the order transformers' mask marking expects them)."""

    texts: list[str]
    spans: list[list[tuple[int, int]]] | None

    @property
    def chars(self) -> int:
        return sum(map(len, self.texts))

    @property
    def utf8_bytes(self) -> int:
        """UTF-8 bytes of the rendered texts: what the encode's memory bound is computed from."""
        return sum(map(utf8_length, self.texts))

    @property
    def held_bytes(self) -> int:
        """What the rendered texts and their spans occupy."""
        spans = sum(map(len, self.spans)) if self.spans is not None else 0
        return sum(map(sys.getsizeof, self.texts)) + 8 * len(self.texts) + _SPAN_BYTES * spans


class ChatTemplates:
    """The served tokenizer's chat templates and the variables transformers gives every template, read once at
    load, with the checks of a chat request (:meth:`prepare`). Nothing here calls into the Rust tokenizer."""

    def __init__(
        self,
        templates: str | Mapping[str, str] | None,
        special_tokens: Mapping[str, Any],
        facts: TokenizerFacts,
        *,
        allow_template_bodies: bool = False,
    ) -> None:
        """``templates``: ``tokenizer.chat_template`` (one template, named templates, or None)."""
        self._single = templates if isinstance(templates, str) else None
        self._named = dict(templates) if isinstance(templates, Mapping) else {}
        self.special_tokens = dict(special_tokens)
        self.facts = facts
        self.allow_template_bodies = allow_template_bodies

    @classmethod
    def of(
        cls, tokenizer: Any, *, facts: TokenizerFacts | None = None, allow_template_bodies: bool = False
    ) -> ChatTemplates:
        """The templates of a loaded transformers tokenizer (call it where the tokenizer is loaded; ``facts``:
        what option resolution reads of it, when already read)."""
        return cls(
            tokenizer.chat_template,
            tokenizer.special_tokens_map,
            facts or TokenizerFacts.of(tokenizer),
            allow_template_bodies=allow_template_bodies,
        )

    @property
    def names(self) -> list[str]:
        """The names of the tokenizer's templates (empty for one unnamed template or none)."""
        return sorted(self._named)

    @property
    def has_template(self) -> bool:
        return self._single is not None or bool(self._named)

    def info(self) -> dict[str, Any]:
        """For ``/info``: whether there is a chat template, its names, which carry generation markers."""
        if self._single is not None:
            markers: dict[str, bool] = {"": bool(_GENERATION_MARKER.search(self._single))}
        else:
            markers = {name: bool(_GENERATION_MARKER.search(body)) for name, body in sorted(self._named.items())}
        return {
            "chat_template": self.has_template,
            "chat_template_names": self.names,
            "generation_markers": markers,
            "template_bodies_allowed": self.allow_template_bodies,
        }

    # -- checking a request (on the event loop: cheap, no rendering) --------------------------------------
    def prepare(
        self,
        conversations: Sequence[Any],
        options: ChatOptions,
        limits: RenderLimits = RenderLimits(),
        *,
        tokenize: bool = True,
    ) -> PreparedChats:
        """Check a batch of conversations and its options, resolve the template, or raise a ServiceError
        (INVALID_REQUEST: fix the request; TOKENIZER: this tokenizer's template cannot serve it).
        ``tokenize=False``: for the rendered texts alone, where transformers ignores the encode's options and
        refuses masks."""
        if not tokenize and options.return_assistant_tokens_mask:
            raise ServiceError(
                ErrorKind.INVALID_REQUEST,
                "return_assistant_tokens_mask marks tokens, and rendering alone makes none (transformers refuses it "
                "with tokenize=False): ask for the encode of the conversations",
            )
        _check_options(options)
        if not conversations:
            raise ServiceError(ErrorKind.INVALID_REQUEST, "conversations must hold at least one conversation")
        if len(conversations) > limits.max_conversations:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"{len(conversations)} conversations exceed max_texts_per_request={limits.max_conversations}; "
                "split the batch",
            )
        for i, conversation in enumerate(conversations):
            _check_conversation(i, conversation, options)
        if tokenize:  # the encode's refusals, before anything is rendered
            plan_encode(self.facts, options.as_encode_options())
        template = self._resolve(options.chat_template, options.tools)
        if options.return_assistant_tokens_mask and options.assistant_masks_from == "generation":
            if not template.has_markers:
                raise ServiceError(
                    ErrorKind.TOKENIZER,
                    f"return_assistant_tokens_mask needs to know which tokens the assistant wrote, and "
                    f"{template.describe()} has no {{% generation %}} markers to say so: transformers would return "
                    'an all-zero mask. Send "assistant_masks_from": "turns" to mark each assistant message\'s '
                    "rendered turn instead (exact, or refused for a template that rewrites earlier turns), or use a "
                    "template with generation markers",
                )
        variables = {**self.special_tokens, **(options.chat_template_kwargs or {})}
        return PreparedChats(conversations, options, template, variables, limits, options.as_encode_options())

    def _resolve(self, name: str | None, tools: Sequence[Any] | None) -> _Template:
        """transformers' ``get_chat_template``, refusing where it would silently render a name as a template."""
        if self._named:
            if name is None:
                if tools is not None and "tool_use" in self._named:
                    name = "tool_use"
                elif "default" in self._named:
                    name = "default"
                else:
                    raise ServiceError(
                        ErrorKind.TOKENIZER,
                        f"this tokenizer has several chat templates and no default: name one with chat_template "
                        f"(names: {self.names})",
                    )
            if name in self._named:
                return _template(name, self._named[name])
        elif name is None:
            if self._single is None:
                raise ServiceError(
                    ErrorKind.TOKENIZER,
                    "this tokenizer has no chat template: serve a tokenizer whose tokenizer_config.json or "
                    "chat_template.jinja carries one",
                )
            return _template(None, self._single)
        if self.allow_template_bodies:
            return _template(None, name)
        shown = repr(name) if len(name) <= 64 and "\n" not in name else "(a template body)"
        names = f"its templates are {self.names}" if self._named else "it has one unnamed template: omit chat_template"
        if self._single is None and not self._named:
            names = "it has no chat template"
        raise ServiceError(
            ErrorKind.INVALID_REQUEST,
            f"chat_template {shown} is not one of this tokenizer's chat templates ({names}); template bodies "
            "in requests are refused unless the server is started with --allow-chat-template-bodies",
        )


def _template(name: str | None, body: str) -> _Template:
    return _Template(name, body, bool(_GENERATION_MARKER.search(body)))


def _check_options(options: ChatOptions) -> None:
    invalid = ErrorKind.INVALID_REQUEST
    if options.add_generation_prompt and options.continue_final_message:
        raise ServiceError(
            invalid,
            "add_generation_prompt and continue_final_message cannot be used together: add_generation_prompt opens "
            "a new assistant message, continue_final_message leaves the last one open to be continued",
        )
    if options.continue_final_message and options.return_assistant_tokens_mask:
        raise ServiceError(invalid, "continue_final_message cannot be used with return_assistant_tokens_mask")
    if not isinstance(options.continue_final_message, (bool, str)):
        raise ServiceError(invalid, "continue_final_message must be a boolean or the name of a message field")
    if options.assistant_masks_from not in ASSISTANT_MASK_SOURCES:
        raise ServiceError(
            invalid,
            f"assistant_masks_from must be one of {list(ASSISTANT_MASK_SOURCES)}, not {options.assistant_masks_from!r}",
        )
    if options.padding_side is not None and options.padding_side not in PADDING_SIDES:
        raise ServiceError(invalid, f"padding_side must be one of {list(PADDING_SIDES)} or null")
    for field in ("tools", "documents"):
        value = getattr(options, field)
        if value is None:
            continue
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise ServiceError(invalid, f"{field} must be a list of objects")
        for j, item in enumerate(value):
            if not isinstance(item, Mapping):
                what = "a JSON schema object" if field == "tools" else "an object (e.g. with title and text)"
                raise ServiceError(invalid, f"{field}[{j}] must be {what}")
    kwargs = options.chat_template_kwargs
    if kwargs is not None:
        if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
            raise ServiceError(invalid, "chat_template_kwargs must be an object of template variables")
        reserved = sorted(RESERVED_TEMPLATE_VARIABLES.intersection(kwargs))
        if reserved:
            raise ServiceError(
                invalid,
                f"chat_template_kwargs cannot set {reserved}: transformers passes those itself (set the option of "
                "that name instead, where there is one)",
            )


def _check_conversation(i: int, conversation: Any, options: ChatOptions) -> None:
    invalid = ErrorKind.INVALID_REQUEST
    if not isinstance(conversation, Sequence) or isinstance(conversation, (str, bytes)):
        raise ServiceError(invalid, f"conversations[{i}] must be a list of messages")
    if not conversation:
        raise ServiceError(invalid, f"conversations[{i}] is empty: a conversation needs at least one message")
    for j, message in enumerate(conversation):
        if not isinstance(message, Mapping):
            raise ServiceError(
                invalid, f'conversations[{i}][{j}] is not an object: a message is {{"role": ..., "content": ...}}'
            )
        role = message.get("role")
        if role is None:
            raise ServiceError(invalid, f"conversations[{i}][{j}] has no role")
        if not isinstance(role, str):
            raise ServiceError(invalid, f"conversations[{i}][{j}].role must be a string")
    if options.continue_final_message and conversation[-1].get("role") != "assistant":
        raise ServiceError(
            invalid,
            f"conversations[{i}]: continue_final_message leaves the last message open for the model to continue, so "
            "it must be the assistant's; to have the model answer a user message, use add_generation_prompt",
        )


# -- rendering (on the render thread) ---------------------------------------------------------------------
#: transformers' names for a message's reasoning (``_REASONING_FIELDS``), the first being what templates read.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "  # transformers' marker for where the final message ends


class _RenderRefused(Exception):
    """A conversation that cannot be rendered as asked: becomes a ServiceError naming it."""

    def __init__(self, kind: ErrorKind, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def render_chats(prepared: PreparedChats, watch: RenderWatch | None = None) -> RenderedChats:
    """Render every conversation (and, for ``"turns"`` masks, their prefixes) as transformers'
    ``render_jinja_template`` would, or raise a ServiceError naming the conversation. Pure Python: call it on
    the render thread (see the module docstring). ``watch``: the caller's deadline, departure and memory."""
    from transformers.utils import chat_template_utils as ctu

    watch = watch or RenderWatch()
    options = prepared.options
    limits = prepared.limits
    template = prepared.template
    try:
        compiled = ctu._compile_jinja_template(template.body)
    except Exception as exc:  # noqa: BLE001 -- jinja raises TemplateSyntaxError, the sandbox others
        raise ServiceError(ErrorKind.TOKENIZER, f"{template.describe()} does not compile: {_detail(exc)}") from None
    masks = options.return_assistant_tokens_mask
    turns = masks and options.assistant_masks_from == "turns"
    # what every conversation's render is given, made plain once, as render_jinja_template does
    tools = ctu._plain_template_data(list(options.tools) if options.tools is not None else None)
    documents = ctu._plain_template_data(list(options.documents) if options.documents is not None else None)
    variables = ctu._plain_template_data(dict(prepared.template_variables))
    renderer = _Renderer(compiled, tools, documents, variables, limits.max_chars, watch)

    texts: list[str] = []
    all_spans: list[list[tuple[int, int]]] = []
    total = 0
    held = 0
    for i, conversation in enumerate(prepared.conversations):
        watch.check()
        try:
            messages = _messages(ctu, conversation)
            text, spans = renderer.render(
                messages,
                options.add_generation_prompt,
                continue_final_message=options.continue_final_message,
                template_body=template.body,
                track=masks and not turns,
            )
            if turns:
                spans = _turn_spans(renderer, messages, text)
        except _RenderRefused as refused:
            raise ServiceError(refused.kind, f"conversations[{i}]: {refused.reason}") from None
        total += len(text)
        if limits.max_total_chars is not None and total > limits.max_total_chars:
            raise ServiceError(
                ErrorKind.TOO_LARGE,
                f"the conversations render to over {limits.max_total_chars} characters together (at "
                f"conversations[{i}]); send fewer conversations per request",
            )
        held += sys.getsizeof(text) + 8 + _SPAN_BYTES * len(spans)
        watch.hold(held)
        texts.append(text)
        all_spans.append(spans)
    return RenderedChats(texts, all_spans if masks else None)


#: What one assistant span held by a rendered conversation costs (a tuple of two ints, a list slot).
_SPAN_BYTES = 128


def _messages(ctu: Any, conversation: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A conversation as transformers hands it to the template: ``None``-valued keys dropped, values made plain
    (a fresh copy: the caller's messages are never changed), reasoning aliased under its other names."""
    normalized = ctu._normalize_chat_messages(list(conversation))
    return list(ctu._alias_reasoning_fields(ctu._plain_template_data(normalized)))


class _Renderer:
    """One compiled template with the arguments every rendering of a request shares."""

    def __init__(
        self,
        compiled: Any,
        tools: Any,
        documents: Any,
        variables: dict[str, Any],
        max_chars: int,
        watch: RenderWatch,
    ) -> None:
        self.compiled = compiled
        self.tools = tools
        self.documents = documents
        self.variables = variables
        self.max_chars = max_chars
        self.watch = watch

    def render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool,
        *,
        continue_final_message: bool | str = False,
        template_body: str = "",
        track: bool = False,
    ) -> tuple[str, list[tuple[int, int]]]:
        """The rendering of ``messages`` and (``track``) the generation spans, as ``render_jinja_template``
        makes them for one conversation; stops as soon as the text passes ``max_chars``."""
        final_text = ""
        if continue_final_message:
            messages, final_text = _tag_final_message(messages, continue_final_message, template_body)
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
        try:
            if track:  # transformers' tracker records each generation block's span from the blocks so far
                with compiled.environment.activate_tracker(blocks, spans):
                    self._collect(compiled.generate(**arguments), blocks)
            else:
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
        """Append the rendered blocks, stopping past ``max_chars``; empty blocks are skipped and the blocks are
        joined in place every :data:`_COMPACT_BLOCKS` (the tracker reads only their joined length), each time
        checking the watch."""
        length = 0
        for block in generated:
            if not block:
                continue
            blocks.append(block)
            length += len(block)
            if length > self.max_chars:
                raise self._too_long()
            if len(blocks) >= _COMPACT_BLOCKS:
                blocks[:] = ["".join(blocks)]
                self.watch.check()

    def _too_long(self) -> _RenderRefused:
        return _RenderRefused(
            ErrorKind.TOO_LARGE,
            f"it renders to over max_text_chars={self.max_chars} characters; send a shorter conversation",
        )


def _tag_final_message(
    messages: list[dict[str, Any]], field: bool | str, template_body: str
) -> tuple[list[dict[str, Any]], str]:
    """transformers' ``continue_final_message`` preparation: tag the end of the final message's field (the last
    text part of a list), so the rendering can be cut there. ``messages`` is already a fresh copy."""
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


def _detail(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= _MAX_ERROR_DETAIL else text[: _MAX_ERROR_DETAIL - 3] + "..."


def _turn_spans(renderer: _Renderer, messages: list[dict[str, Any]], whole: str) -> list[tuple[int, int]]:
    """The assistant turns of one conversation as character spans of its rendering ``whole`` (module docstring:
    ``"turns"``), or _RenderRefused when the template's rendering is not prefix-stable."""
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


# -- masks ------------------------------------------------------------------------------------------------
def assistant_masks(
    offsets: Sequence[np.ndarray] | np.ndarray, spans: Sequence[Sequence[tuple[int, int]]]
) -> list[np.ndarray]:
    """Per row, 1 for each token that transformers' ``apply_chat_template`` marks from the character ``spans``,
    else 0: scanning tokens and spans in order, a token counts when it overlaps the current span (padding, whose
    offsets are ``(0, 0)``, never does). ``offsets``: per row a ``[tokens, 2]`` array (padded rows included)."""
    rows = len(spans)
    lengths = [len(row) for row in offsets]
    if rows == 0 or sum(lengths) == 0:
        return [np.zeros(n, dtype=np.int64) for n in lengths]
    flat = np.concatenate([np.asarray(row, dtype=np.int64).reshape(-1, 2) for row in offsets])
    span_counts = [len(row_spans) for row_spans in spans]
    if sum(span_counts) == 0:
        return [np.zeros(n, dtype=np.int64) for n in lengths]
    span_array = np.asarray([span for row_spans in spans for span in row_spans], dtype=np.int64).reshape(-1, 2)
    # Spans of a row whose ends do not increase (nested generation blocks) take transformers' own loop.
    ordered = all(all(a[1] <= b[1] for a, b in pairwise(row_spans)) for row_spans in spans)
    if not ordered:
        return [
            _mask_row_by_loop(np.asarray(row).reshape(-1, 2), row_spans)
            for row, row_spans in zip(offsets, spans, strict=True)
        ]
    # Each row in its own band of positions, so one search serves every row: within a row, the span a token is
    # compared with is the first whose end lies past the furthest token start so far (transformers' scan).
    band = int(max(flat.max(), span_array.max())) + 1
    token_row = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    starts = flat[:, 0] + token_row * band
    ends = flat[:, 1] + token_row * band
    span_row = np.repeat(np.arange(rows, dtype=np.int64), span_counts)
    span_starts = span_array[:, 0] + span_row * band
    span_ends = span_array[:, 1] + span_row * band
    current = np.searchsorted(span_ends, np.maximum.accumulate(starts), side="right")
    inside = current < len(span_ends)
    marked = np.zeros(len(flat), dtype=np.int64)
    marked[inside] = ends[inside] > span_starts[current[inside]]
    return np.split(marked, np.cumsum(lengths)[:-1])


def _mask_row_by_loop(offsets: np.ndarray, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """transformers' marking of one row, step by step (for spans out of order)."""
    mask = np.zeros(len(offsets), dtype=np.int64)
    span_index = 0
    for token, (token_start, token_end) in enumerate(offsets.tolist()):
        while span_index < len(spans) and token_start >= spans[span_index][1]:
            span_index += 1
        if span_index == len(spans):
            break
        if token_end > spans[span_index][0]:
            mask[token] = 1
    return mask


def add_assistant_masks(encoded: EncodedBatch, rendered: RenderedChats) -> EncodedBatch:
    """The encode of rendered conversations as ``apply_chat_template`` returns it: with ``assistant_masks`` after
    the other keys when spans were rendered, and without the offsets asked for to make them."""
    data = dict(encoded.data)
    offsets = data.pop("offset_mapping", None)
    if rendered.spans is not None:
        if offsets is None:
            raise ServiceError(ErrorKind.INTERNAL, "assistant masks need the encode's offsets")
        if encoded.rectangular:
            array = np.asarray(offsets)
            rows = len(rendered.spans)
            width = array.shape[1] if array.ndim > 1 else 0
            per_row = list(array.reshape(rows, width, 2)) if width else [np.zeros((0, 2), np.int64)] * rows
            masks = assistant_masks(per_row, rendered.spans)
            data[ASSISTANT_MASKS_KEY] = np.stack(masks) if width else np.zeros((rows, 0), dtype=np.int64)
        else:
            data[ASSISTANT_MASKS_KEY] = assistant_masks(list(offsets), rendered.spans)
    return EncodedBatch(data=data, rectangular=encoded.rectangular, num_tokens=encoded.num_tokens)


# -- the async path ---------------------------------------------------------------------------------------
def _without_frames(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; a ServiceError it raises comes out as a copy without a traceback. (The original's
    traceback holds the render's frames, and with them every rendering made so far: kept with the future, or
    until the garbage collector breaks its cycles, it would hold memory a refused render gave back to the
    budget -- measured: ~100 MB per refused render bomb.)"""
    error = None
    try:
        return fn(*args)
    except ServiceError as exc:
        error = ServiceError(exc.kind, exc.message, retry_after=exc.retry_after)
    raise error


class ChatRenderer:
    """The render thread: renders (and marks masks) off the event loop, one request after another.

    ``astart()`` inside the running loop, ``astop()`` when done. Cancelling an awaiting caller withdraws its
    render if it has not started, and stops it at its next check if it has (:class:`RenderWatch`). Nothing run
    here calls into the Rust tokenizer (module docstring)."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._submitted: set[Future[Any]] = set()

    async def astart(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chat-render")

    async def astop(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            await asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)

    @property
    def waiting(self) -> int:
        """Renders (and mask markings) waiting for the render thread: submitted, not started, not withdrawn."""
        with self._lock:
            return sum(not future.running() and not future.done() for future in self._submitted)

    async def render(self, prepared: PreparedChats, watch: RenderWatch | None = None) -> RenderedChats:
        """:func:`render_chats` on the render thread."""
        watch = watch or RenderWatch()
        try:
            rendered: RenderedChats = await self._run(render_chats, prepared, watch)
        except asyncio.CancelledError:
            watch.cancel()
            raise
        return rendered

    async def add_masks(self, encoded: EncodedBatch, rendered: RenderedChats) -> EncodedBatch:
        """:func:`add_assistant_masks` on the render thread (numpy over every token of the batch)."""
        if rendered.spans is None and "offset_mapping" not in encoded.data:
            return encoded
        masked: EncodedBatch = await self._run(add_assistant_masks, encoded, rendered)
        return masked

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._executor is None:
            raise ServiceError(ErrorKind.UNAVAILABLE, "the chat renderer is not running")
        future = self._executor.submit(_without_frames, fn, *args)
        with self._lock:
            self._submitted.add(future)
        future.add_done_callback(self._forget)
        try:
            return await asyncio.wrap_future(future)  # cancelling this withdraws a render not yet started
        except _RenderCancelled:  # (only when the caller has gone, so nobody reads this)
            raise asyncio.CancelledError from None

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._submitted.discard(future)


#: How the chat path hands rendered texts to the engine's batched encode: ``(texts, options) -> EncodedBatch``.
EncodeTexts = Callable[[Sequence[str], EncodeOptions], Awaitable[EncodedBatch]]


async def encode_chats(prepared: PreparedChats, renderer: ChatRenderer, encode: EncodeTexts) -> EncodedBatch:
    """Render, encode, mask: ``apply_chat_template(conversations, tokenize=True, return_dict=True, **options)``.

    ``encode`` is the engine's encode of the rendered texts with ``prepared.encode_options`` (e.g.
    ``lambda texts, options: engine.submit_encode(texts, None, options, reservation)``), which admits, budgets
    and micro-batches them like any other encode."""
    rendered = await renderer.render(prepared)
    encoded = await encode(rendered.texts, prepared.encode_options)
    return await renderer.add_masks(encoded, rendered)
