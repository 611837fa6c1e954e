"""Conversations, exactly as transformers' ``apply_chat_template`` makes them, in batches. No HTTP in here.

``tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True, **options)`` is three steps here:

1. **Render** (:func:`render_chats`): each conversation through the tokenizer's jinja template with transformers'
   own data preparation (``None``-valued keys dropped, values made plain, reasoning fields aliased, the final
   message tagged for ``continue_final_message``), compiled template and sandbox: transformers' text. Pure Python,
   on the **render thread** (:class:`ChatRenderer`): not the event loop (rendering thousands of conversations
   holds the GIL for tens of milliseconds), not the tokenizer thread. It reads the template text and a snapshot
   of the special tokens taken at load, never the Rust tokenizer and its mutable padding/truncation state; and
   it renders the next request while the tokenizer thread is inside a Rust ``encode_batch`` (GIL released). One
   thread, because rendering is GIL-bound: a second would only contend with the event loop. A render answers to
   a :class:`RenderWatch` as it goes: its caller leaving, its deadline, and the memory its finished renderings
   hold, charged to the request's reservation (:class:`RenderCharge`) -- so a template that makes a small body
   huge is refused by the memory budget as it renders, never after.
2. **Encode** the texts as ``tokenizer(texts, add_special_tokens=False, padding=..., truncation=...,
   max_length=..., **tokenizer_kwargs)`` (:meth:`ChatOptions.as_encode_options`): the engine's batched encode,
   like any ``/encode`` (admission, memory budget -- its bound computed from the rendered texts before it
   queues --, micro-batching), with character offsets when masks are wanted. ``Engine.submit_chat_encode`` and
   ``submit_chat_render`` are these steps on the engine.
3. **Mask** (:func:`add_assistant_masks`): the tokens overlapping the assistant's character spans, marked as
   transformers marks its generation spans (a token counts if it overlaps a span, scanning spans and tokens in
   order); the offsets are then dropped, as transformers never returns them.

**Assistant masks** (``return_assistant_tokens_mask=True``) come from one of two sources (``assistant_masks_from``):

- ``"generation"`` (default): the spans the template wraps in ``{% generation %}`` ... ``{% endgeneration %}``,
  transformers' exact mask. A template without those markers is **refused** (transformers would return an
  all-zero mask with a warning), naming the remedy below.
- ``"turns"``: for each message ``k`` whose role is ``"assistant"``, let ``P`` be the rendering of
  ``messages[:k]`` *with* the generation prompt and ``Q`` that of ``messages[:k + 1]`` without it. The turn is
  ``Q[len(P):]``: the message's content, tool calls and whatever the template closes the turn with (an
  end-of-turn token and its newline), never the generation prompt (the cue the model is given, e.g.
  ``<|im_start|>assistant\\n``). Exact only when ``P`` is a prefix of ``Q``, ``Q`` a prefix of the whole
  rendering, and the turns come in order; otherwise the conversation is **refused** with the reason (the
  template rewrites earlier turns -- e.g. drops past reasoning -- or its generation prompt is not how it begins
  an assistant message). Never approximated.

  Where a template's markers wrap exactly what follows the generation prompt up to the end of the message (the
  placement published training templates use), ``"turns"`` gives the same masks as ``"generation"``
  (``tests/engine/test_chat_masks.py`` checks it on three templates and hundreds of generated conversations).
  Elsewhere the two differ by the characters in between, each mode keeping its definition: markers opened
  before the cue's final newline (``<|im_start|>assistant{% generation %}\\n...``) make ``"generation"`` also
  mark that newline's token, which ``"turns"`` leaves out because the generation prompt gives it to the model.

**Refusals beyond transformers'** (each names the conversation): a message that is not an object or has no
string ``role``; an empty conversation; ``continue_final_message`` when the last message is not the assistant's
(transformers would continue a user message); a ``chat_template_kwargs`` variable colliding with one transformers
passes itself; a template name the tokenizer lacks (transformers would render the name as a template). Template
bodies in a request are refused unless the server allows them (:attr:`ChatTemplates.allow_template_bodies`).

**Options** keep transformers 5's names and defaults (:class:`ChatOptions` says where transformers takes each:
passed as plain keywords, ``pad_to_multiple_of``, ``padding_side`` and ``return_attention_mask`` would reach the
template as variables). A missing template variable renders as nothing, as in jinja and transformers, until the
template reads into it (``message.content.strip()``): that is refused, naming it.

No conversation content is logged or put in an error message (except what a template's own
``raise_exception(...)`` says, repeated cut to 300 characters).

**Modules**, each importing only those after it: ``renderer`` (the render thread), ``masks`` (step 3),
``rendering`` (step 1), ``templates`` (the templates and a request's checks, on the event loop), ``limits`` (what
a render answers to).
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
