"""Assistant masks that are never silently wrong: "turns" equals "generation" where markers wrap the assistant's
turn, templates that rewrite earlier turns are refused, and the vectorised marking is transformers' scan."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.engine.chat import ChatOptions, ChatTemplates, assistant_masks, render_chats
from service.engine.chat.masks import _mask_row_by_loop
from service.engine.errors import ErrorKind, ServiceError
from testkit.chat import (
    DOCUMENTS,
    MARKED_TEMPLATES,
    TEMPLATES,
    TOOLS,
    conversation_strategy,
    fixed_conversations,
    with_template,
)
from testkit.chat_parity import engine_chat, reference_chat
from testkit.families import FAMILIES

TURNS = {"return_assistant_tokens_mask": True, "assistant_masks_from": "turns"}
GENERATION = {"return_assistant_tokens_mask": True}


def spans(tokenizer: Any, conversations: list, **options: Any) -> list[list[tuple[int, int]]]:
    """The character spans our renderer marks."""
    rendered = render_chats(ChatTemplates.of(tokenizer).prepare(conversations, ChatOptions(**options)))
    assert rendered.spans is not None
    return rendered.spans


def texts(tokenizer: Any, conversations: list, **options: Any) -> list[str]:
    return render_chats(ChatTemplates.of(tokenizer).prepare(conversations, ChatOptions(**options))).texts


# -- "turns" == "generation" where the markers wrap the turn ---------------------------------------------------
turn_options = st.fixed_dictionaries(
    {},
    optional={
        "add_generation_prompt": st.booleans(),
        "tools": st.sampled_from([None, TOOLS]),
        "documents": st.sampled_from([None, DOCUMENTS]),
        "chat_template_kwargs": st.sampled_from([None, {"enable_thinking": True}]),
    },
)


@pytest.mark.parametrize("template", MARKED_TEMPLATES)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(conversations=st.lists(conversation_strategy(max_messages=8), min_size=1, max_size=4), options=turn_options)
def test_turns_spans_equal_generation_spans(reference_tokenizers, template, conversations, options):
    """Character for character, on hundreds of generated conversations (roles in any order, multilingual and
    emoji content, empty and missing content, tool calls, reasoning, long turns)."""
    tokenizer = with_template(reference_tokenizers["bytelevel_bpe"], TEMPLATES[template])
    assert spans(tokenizer, conversations, **options, **TURNS) == spans(
        tokenizer, conversations, **options, **GENERATION
    )


@pytest.mark.parametrize("template", MARKED_TEMPLATES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    family=st.sampled_from(FAMILIES),
    conversations=st.lists(conversation_strategy(), min_size=1, max_size=4),
    options=turn_options,
    padding=st.sampled_from([{}, {"padding": True, "padding_side": "left"}, {"truncation": True, "max_length": 24}]),
)
def test_turns_masks_equal_transformers_generation_masks(
    engines, reference_tokenizers, chat_renderer, template, family, conversations, options, padding
):
    """Token for token, through the engine, against transformers' own generation mask."""
    tokenizer = with_template(reference_tokenizers[family], TEMPLATES[template])
    theirs = reference_chat(tokenizer, conversations, {**options, **padding, **GENERATION})
    ours = engine_chat(
        engines[family], chat_renderer, ChatTemplates.of(tokenizer), conversations, {**options, **padding, **TURNS}
    )
    assert ours == theirs


def test_turns_are_refused_where_the_generation_prompt_is_not_how_a_turn_begins(reference_tokenizers):
    """tools_thinking with enable_thinking=false opens an empty reasoning block in the generation prompt only."""
    tokenizer = with_template(reference_tokenizers["bytelevel_bpe"], TEMPLATES["tools_thinking"])
    conversations = [[{"role": "user", "content": "hi"}], fixed_conversations()[0]]
    with pytest.raises(ServiceError) as refused:
        spans(tokenizer, conversations, chat_template_kwargs={"enable_thinking": False}, **TURNS)
    assert refused.value.kind is ErrorKind.TOKENIZER
    assert refused.value.message.startswith("conversations[1]: ")
    assert "generation prompt is not how it begins that assistant message" in refused.value.message
    assert "message 1" in refused.value.message


# -- the template that rewrites earlier turns ----------------------------------------------------------------
def test_the_rewriting_template_is_refused_naming_the_conversation_and_why(reference_tokenizers):
    tokenizer = with_template(reference_tokenizers["sentencepiece"], TEMPLATES["rewriting"])
    multi_turn = fixed_conversations()[2]  # two assistant turns with reasoning, a user message between
    conversations = [fixed_conversations()[0], multi_turn]
    with pytest.raises(ServiceError) as refused:
        spans(tokenizer, conversations, **TURNS)
    message = refused.value.message
    assert refused.value.kind is ErrorKind.TOKENIZER
    assert message.startswith("conversations[1]: ") and "rewrites earlier turns" in message
    assert "{% generation %}" in message  # the remedy
    # transformers itself answers a mask of zeros for it, silently
    theirs = reference_chat(tokenizer, conversations, GENERATION)
    assert not any(map(any, theirs["assistant_masks"]))


def test_the_rewriting_template_is_exact_where_it_does_not_rewrite(reference_tokenizers):
    """One user message, one answer: nothing earlier to rewrite, so the turn is exact (its think block included)."""
    tokenizer = with_template(reference_tokenizers["sentencepiece"], TEMPLATES["rewriting"])
    conversation = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "r"},
    ]
    (text,) = texts(tokenizer, [conversation], **TURNS)
    ((span,),) = spans(tokenizer, [conversation], **TURNS)
    assert text[span[0] : span[1]] == "<think>\nr\n</think>\n\nHello<|im_end|>\n"
    assert text[: span[0]].endswith("<|im_start|>assistant\n")  # the generation prompt is given, not learned


# -- templates without markers ---------------------------------------------------------------------------------
def test_turns_on_a_template_without_markers_mark_each_answer_and_its_end_of_turn(reference_tokenizers):
    tokenizer = with_template(reference_tokenizers["wordpiece_default"], TEMPLATES["llama3"])
    conversation = fixed_conversations()[1]  # a tool call (no content), a tool response, an answer
    (text,) = texts(tokenizer, [conversation], **TURNS)
    (turns,) = spans(tokenizer, [conversation], **TURNS)
    assert [text[start:end] for start, end in turns] == ["<|eot_id|>", "Il fait beau, 21 °C. ☀️<|eot_id|>"]
    with pytest.raises(ServiceError) as refused:
        spans(tokenizer, [conversation], **GENERATION)
    assert refused.value.kind is ErrorKind.TOKENIZER
    assert (
        "no {% generation %} markers" in refused.value.message
        and '"assistant_masks_from": "turns"' in refused.value.message
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_turns_token_masks_on_llama3_match_the_marked_twin(engines, reference_tokenizers, chat_renderer, family):
    """llama3_generation is llama3 with markers around each answer: transformers' mask of the twin is what "turns"
    gives on the template without markers, for the fixed conversations of every branch."""
    conversations = fixed_conversations()
    twin = with_template(reference_tokenizers[family], TEMPLATES["llama3_generation"])
    bare = with_template(reference_tokenizers[family], TEMPLATES["llama3"])
    theirs = reference_chat(twin, conversations, {"padding": True, **GENERATION})
    ours = engine_chat(
        engines[family], chat_renderer, ChatTemplates.of(bare), conversations, {"padding": True, **TURNS}
    )
    assert ours == theirs and any(map(any, theirs["assistant_masks"]))


# -- where the markers sit elsewhere ---------------------------------------------------------------------------
def test_markers_opened_inside_the_cue_also_mark_its_newline(reference_tokenizers):
    """The documented difference: "generation" marks the cue's final newline, which "turns" leaves to the prompt."""
    tokenizer = with_template(reference_tokenizers["bytelevel_bpe"], TEMPLATES["chatml_cue_inside"])
    conversations = [c for c in fixed_conversations() if all(isinstance(m.get("content"), str) for m in c)]
    (text, *_) = texts(tokenizer, conversations, **TURNS)
    for generation, turns in zip(
        spans(tokenizer, conversations, **GENERATION), spans(tokenizer, conversations, **TURNS), strict=True
    ):
        assert [(start + 1, end) for start, end in generation] == turns
    first_generation = spans(tokenizer, conversations, **GENERATION)[0][0]
    assert text[first_generation[0]] == "\n"


# -- the marking itself --------------------------------------------------------------------------------------
@st.composite
def offsets_and_spans(draw: Any) -> tuple[list[np.ndarray], list[list[tuple[int, int]]]]:
    """Rows of token offsets (in order, with (0, 0) padding on either side, empty tokens, overlaps) and spans."""
    rows, all_spans = [], []
    for _ in range(draw(st.integers(1, 4))):
        position, offsets = 0, []
        for _ in range(draw(st.integers(0, 30))):
            position += draw(st.integers(0, 3))
            width = draw(st.integers(0, 4))
            offsets.append((position, position + width))
            position += draw(st.sampled_from([0, width, max(0, width - 1)]))
        pad = [(0, 0)] * draw(st.integers(0, 3))
        offsets = pad + offsets if draw(st.booleans()) else offsets + pad
        bounds = sorted(draw(st.lists(st.integers(0, position + 2), max_size=8)))
        row_spans = [(bounds[i], bounds[i + 1]) for i in range(0, len(bounds) - 1, 2)]
        if draw(st.booleans()) and row_spans:  # out of order: the loop takes those rows
            row_spans = row_spans[::-1]
        rows.append(np.asarray(offsets, dtype=np.int64).reshape(-1, 2))
        all_spans.append(row_spans)
    return rows, all_spans


@settings(max_examples=300, deadline=None)
@given(case=offsets_and_spans())
def test_vectorised_marking_is_transformers_scan(case):
    rows, row_spans = case
    ours = assistant_masks(rows, row_spans)
    assert [mask.tolist() for mask in ours] == [
        _mask_row_by_loop(row, spans).tolist() for row, spans in zip(rows, row_spans, strict=True)
    ]


def test_the_scan_is_transformers_own():
    """The marking, and _mask_row_by_loop (the oracle above), against transformers' apply_chat_template on a
    template with nested generation blocks (whose spans transformers records inner first)."""
    from transformers import AutoTokenizer

    from service.engine.loading import DEFAULT_TOKENIZER_DIR

    tokenizer = AutoTokenizer.from_pretrained(str(DEFAULT_TOKENIZER_DIR))
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}<{{ m.content }}>"
        "{% generation %}[{{ m.content }}]{% endgeneration %}{% endgeneration %}{% else %}{{ m.content }}{% endif %}"
        "\n{% endfor %}"
    )
    conversation = [{"role": "user", "content": "a b"}, {"role": "assistant", "content": "c d e"}]
    theirs = tokenizer.apply_chat_template(conversation, return_assistant_tokens_mask=True)
    ours = render_chats(ChatTemplates.of(tokenizer).prepare([conversation], ChatOptions(**GENERATION)))
    encoding = tokenizer([ours.texts[0]], add_special_tokens=False, return_offsets_mapping=True)
    offsets = np.asarray(encoding["offset_mapping"][0])
    assert ours.texts[0] == tokenizer.apply_chat_template(conversation, tokenize=False)
    assert assistant_masks([offsets], ours.spans).pop().tolist() == theirs["assistant_masks"]
    assert _mask_row_by_loop(offsets, ours.spans[0]).tolist() == theirs["assistant_masks"]
    assert 0 < sum(theirs["assistant_masks"]) < len(theirs["assistant_masks"])
