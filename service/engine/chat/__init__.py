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
  inside) -- ``"turns"`` gives the same masks as ``"generation"`` (``tests/engine/test_chat_masks.py`` checks it on
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

**Modules**, each importing only those above it:

- ``limits``: what a render answers to as it runs (:class:`RenderLimits`, :class:`RenderWatch`,
  :class:`RenderCharge`).
- ``templates``: the tokenizer's templates and the checks of a request, on the event loop
  (:class:`ChatTemplates`, :class:`PreparedChats`).
- ``rendering``: step 1, on the render thread (:func:`render_chats`, :class:`RenderedChats`): transformers'
  rendering, ``continue_final_message``, the assistant's spans, a template's failures.
- ``masks``: step 3 (:func:`add_assistant_masks`, :func:`assistant_masks`).
- ``renderer``: the render thread and the async path (:class:`ChatRenderer`).
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
