"""Conversations, exactly as transformers' ``apply_chat_template`` makes them, in batches. No HTTP in here.

``apply_chat_template(conversations, tokenize=True, return_dict=True, **options)`` is three steps here
(``Engine.submit_chat_render`` / ``submit_chat_encode``; ``docs/guides/conversations.md`` for users):

1. **Render** (:func:`render_chats`): transformers' own data preparation, compiled template and sandbox, on the
   **render thread** (:class:`ChatRenderer`): never the event loop (thousands of conversations hold the GIL for
   tens of milliseconds) nor the tokenizer thread. It reads the template text and the special tokens snapshotted
   at load, never the Rust tokenizer's mutable state, so it overlaps the previous request's ``encode_batch``
   (GIL released). One thread: rendering is GIL-bound, a second would only contend with the event loop. A
   render answers to a :class:`RenderWatch` (caller, deadline, memory charged as it goes: :class:`RenderCharge`).
2. **Encode** the texts as ``tokenizer(texts, add_special_tokens=False, ...)``
   (:meth:`ChatOptions.as_encode_options`): the engine's batched encode, with offsets when masks are wanted.
3. **Mask** (:func:`add_assistant_masks`) from the encode's offsets, then dropped.

**Assistant masks** come from ``{% generation %}`` markers (``assistant_masks_from="generation"``, refused on a
template without them: transformers would return all zeros) or from the turns (``"turns"``): for each assistant
message ``k``, with ``P`` the rendering of ``messages[:k]`` with the generation prompt and ``Q`` that of
``messages[:k + 1]`` without, the span is ``Q[len(P):]``; refused unless ``P`` is a prefix of ``Q``, ``Q`` of the
whole rendering, and the turns come in order. Where markers wrap exactly what follows the generation prompt up
to the end of the message, both modes agree (``tests/engine/test_chat_masks.py``); markers opened before the
cue's final newline (``<|im_start|>assistant{% generation %}\\n``) make ``"generation"`` also mark that newline.

The guide lists the refusals beyond transformers'. No conversation content is logged or put in an error message
(except a template's own ``raise_exception(...)``, cut to 300 characters). Each module imports only those after
it: ``renderer``, ``masks``, ``rendering``, ``templates``, ``limits``.
"""

from __future__ import annotations

from ...wire import ASSISTANT_MASK_SOURCES, ChatOptions
from .limits import RenderCharge, RenderLimits, RenderWatch
from .masks import add_assistant_masks, assistant_masks
from .renderer import ChatRenderer
from .rendering import RenderedChats, render_chats
from .templates import ChatTemplates, PreparedChats

__all__ = [
    "ASSISTANT_MASK_SOURCES",
    "ChatOptions",
    "ChatTemplates",
    "RenderLimits",
    "RenderWatch",
    "RenderCharge",
    "PreparedChats",
    "RenderedChats",
    "ChatRenderer",
    "render_chats",
    "add_assistant_masks",
    "assistant_masks",
]
