"""What "exactly ``apply_chat_template``" means, and the calls we check it on.

:func:`reference_chat` is transformers itself; :func:`engine_chat` is our chat core (render thread, the engine's
batched encode, masks). A request's options are ours (:class:`~service.engine.chat.ChatOptions`); the reference
receives them as transformers 5 takes them: ``pad_to_multiple_of``, ``padding_side`` and ``return_attention_mask``
in ``tokenizer_kwargs``, ``chat_template_kwargs`` as keywords.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
from hypothesis import strategies as st

from service.engine.chat import ChatOptions, ChatRenderer, ChatTemplates, PreparedChats
from service.engine.errors import ErrorKind, ServiceError
from testkit.chat import DOCUMENTS, NAMED_TEMPLATES, TOOLS, conversation_strategy
from testkit.engine import to_lists

TOKENIZER_KWARGS = ("pad_to_multiple_of", "padding_side", "return_attention_mask")
#: The kinds a chat refusal may carry: all answered 422 (or 413 for a size limit).
REFUSAL_KINDS = (ErrorKind.INVALID_REQUEST, ErrorKind.TOKENIZER)


def reference_chat(tokenizer: Any, conversations: list[Any], options: dict[str, Any]) -> Any:
    """``tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True, ...)`` as plain lists, or
    the exception it raised."""
    kwargs = {k: v for k, v in options.items() if k not in TOKENIZER_KWARGS and k != "chat_template_kwargs"}
    kwargs.pop("assistant_masks_from", None)
    tokenizer_kwargs = {k: options[k] for k in TOKENIZER_KWARGS if k in options}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = tokenizer.apply_chat_template(
                conversations,
                tokenize=True,
                return_dict=True,
                tokenizer_kwargs=tokenizer_kwargs,
                **kwargs,
                **(options.get("chat_template_kwargs") or {}),
            )
    except Exception as exc:  # noqa: BLE001 -- transformers and jinja raise many types for what they refuse
        return exc
    return {key: [list(map(int, row)) for row in value] for key, value in out.items()}


async def encode_chats(prepared: PreparedChats, renderer: ChatRenderer, encode: Any) -> Any:
    """Render, encode, mask -- the chat core's three steps as the engine's ``_render_and_encode`` takes them,
    without its budgeting: ``encode(texts, options)`` is the engine's batched encode of the rendered texts."""
    rendered = await renderer.render(prepared)
    encoded = await encode(rendered.texts, prepared.encode_options)
    return await renderer.add_masks(encoded, rendered)


def engine_chat(
    runner: Any, renderer: ChatRenderer, templates: ChatTemplates, conversations: list[Any], options: dict[str, Any]
) -> Any:
    """Our chat core on ``runner``'s engine: the same keys in the same order as lists, or the ServiceError."""
    try:
        prepared = templates.prepare(conversations, ChatOptions(**options))

        async def call() -> Any:
            def encode(texts: Any, encode_options: Any) -> Any:
                return runner.engine.submit_encode(texts, None, encode_options)

            return await encode_chats(prepared, renderer, encode)

        result = runner.run(call())
    except ServiceError as exc:
        return exc
    arrays = [value for value in result.data.values() if isinstance(value, np.ndarray)]
    assert all(array.dtype == np.int64 for array in arrays)
    assert "offset_mapping" not in result.data
    return to_lists(result)


def client_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """Wire-named options as a client's ``apply_chat_template`` takes them -- transformers' arguments:
    ``tokenizer_kwargs`` for the tokenizer's, template variables as keywords (plus ``assistant_masks_from``)."""
    kwargs = {k: v for k, v in options.items() if k not in TOKENIZER_KWARGS and k != "chat_template_kwargs"}
    tokenizer_kwargs = {k: options[k] for k in TOKENIZER_KWARGS if k in options}
    if tokenizer_kwargs:
        kwargs["tokenizer_kwargs"] = tokenizer_kwargs
    return {**kwargs, **(options.get("chat_template_kwargs") or {})}


def assert_chat_parity(ours: Any, theirs: Any, context: Any) -> None:
    """Both refuse, or both answer the same keys, in the same order, with the same values."""
    if isinstance(theirs, BaseException):
        assert isinstance(ours, ServiceError), f"transformers refused ({theirs!r}) but we answered; {context}"
        assert ours.kind in REFUSAL_KINDS, (ours, context)
        return
    assert not isinstance(ours, BaseException), f"we refused what transformers accepts: {ours!r}; {context}"
    assert list(ours) == list(theirs), (list(ours), list(theirs), context)
    for key in theirs:
        assert ours[key] == theirs[key], (key, context)


def has_markers(template: str) -> bool:
    """Whether a template has ``{% generation %}`` markers (transformers' own test)."""
    return re.search(r"\{\%-?\s*generation\s*-?\%\}", template) is not None


def refused_by_design(conversations: list[Any], options: dict[str, Any], template_has_markers: bool) -> str | None:
    """Where we refuse on purpose although transformers answers: the reason, else None."""
    if options.get("continue_final_message") and not options.get("add_generation_prompt"):
        if not options.get("return_assistant_tokens_mask"):
            if any(conversation[-1].get("role") != "assistant" for conversation in conversations):
                return "continue_final_message on a conversation that does not end with the assistant's message"
    masks = options.get("return_assistant_tokens_mask") and not options.get("continue_final_message")
    if masks and options.get("assistant_masks_from", "generation") == "generation" and not template_has_markers:
        return "assistant masks from a template without generation markers"
    return None


def named_template(options: dict[str, Any]) -> str:
    """Which of :data:`NAMED_TEMPLATES` a call renders with (transformers' choice: tool_use when tools are given)."""
    name = options.get("chat_template")
    if name is None:
        name = "tool_use" if options.get("tools") is not None else "default"
    return NAMED_TEMPLATES[name]


# -- generated calls ------------------------------------------------------------------------------------------
conversations_strategy = st.lists(conversation_strategy(), min_size=1, max_size=4)

chat_options_strategy = st.fixed_dictionaries(
    {},
    optional={
        "chat_template": st.sampled_from([None, *NAMED_TEMPLATES]),
        "tools": st.sampled_from([None, TOOLS]),
        "documents": st.sampled_from([None, DOCUMENTS]),
        "add_generation_prompt": st.booleans(),
        "continue_final_message": st.sampled_from([False, True]),
        "chat_template_kwargs": st.sampled_from([None, {"enable_thinking": False}, {"enable_thinking": True}]),
        "return_assistant_tokens_mask": st.booleans(),
        "padding": st.sampled_from([False, True, "longest", "max_length", "do_not_pad"]),
        "truncation": st.sampled_from([False, True, "longest_first", "do_not_truncate"]),
        "max_length": st.one_of(st.none(), st.integers(1, 120)),
        "pad_to_multiple_of": st.sampled_from([None, 8]),
        "padding_side": st.sampled_from([None, "left", "right"]),
        "return_attention_mask": st.sampled_from([None, True, False]),
    },
)

#: Parts of the option space a generated call is aimed at, so each is reached on purpose, not by luck.
AIMS = ("any", "masks", "padding", "truncation", "continue")
_MARKED_NAMES = [
    name for name, template in NAMED_TEMPLATES.items() if template in ("chatml_generation", "tools_thinking")
]


def _ending_with_assistant(conversation: list[dict[str, Any]], content: str) -> list[dict[str, Any]]:
    return [*conversation, {"role": "assistant", "content": content}]


@st.composite
def aimed_chat_calls(draw: Any, aim: str) -> tuple[list[Any], dict[str, Any]]:
    """(conversations, options) of a call aimed at ``aim`` (one of :data:`AIMS`); the other options any."""
    conversations = draw(conversations_strategy)
    options = draw(chat_options_strategy)
    if aim == "masks":
        options.update(return_assistant_tokens_mask=True, continue_final_message=False)
        options["chat_template"] = draw(st.sampled_from(_MARKED_NAMES))
    elif aim == "padding":
        conversations = draw(st.lists(conversation_strategy(), min_size=2, max_size=4))  # rows of unequal length
        options["padding"] = draw(st.sampled_from([True, "longest", "max_length"]))
        options["padding_side"] = draw(st.sampled_from([None, "left", "right"]))
        if options["padding"] == "max_length":
            options.setdefault("max_length", draw(st.integers(1, 120)))
    elif aim == "truncation":
        options["truncation"] = draw(st.sampled_from([True, "longest_first"]))
        options["max_length"] = draw(st.integers(1, 60))
    elif aim == "continue":
        options.update(continue_final_message=True, add_generation_prompt=False, return_assistant_tokens_mask=False)
        final = draw(st.sampled_from(["Sure, here", "天气", " trailing space ", "👍🏽"]))
        conversations = [_ending_with_assistant(conversation, final) for conversation in conversations]
    return conversations, options
