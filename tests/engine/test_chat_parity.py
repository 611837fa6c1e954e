"""Engine tier, no HTTP: the chat core against in-process ``apply_chat_template`` on three tokenizer families and
four templates of ours, for every option -- fixed conversations and generated ones."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from service.engine.chat import ChatTemplates
from service.engine.errors import ServiceError
from testkit.chat import (
    DOCUMENTS,
    PARITY_TEMPLATES,
    TEMPLATES,
    TOOLS,
    fixed_conversations,
    with_template,
)
from testkit.chat_parity import (
    AIMS,
    REFUSAL_KINDS,
    aimed_chat_calls,
    assert_chat_parity,
    engine_chat,
    has_markers,
    named_template,
    reference_chat,
    refused_by_design,
)
from testkit.families import FAMILIES

# Every option at least once, alone and combined; masks here come from generation markers (transformers' own).
FIXED_CASES: list[dict[str, Any]] = [
    {},
    {"padding": True, "return_assistant_tokens_mask": True},
    {"add_generation_prompt": True, "padding": "max_length", "max_length": 64, "truncation": True},
    {"padding": True, "padding_side": "left", "pad_to_multiple_of": 8, "return_assistant_tokens_mask": True},
    {"truncation": True, "max_length": 20, "return_attention_mask": False, "return_assistant_tokens_mask": True},
    {"tools": TOOLS, "documents": DOCUMENTS, "chat_template_kwargs": {"enable_thinking": False}},
    {"tools": TOOLS, "add_generation_prompt": True, "chat_template_kwargs": {"enable_thinking": False}},
    {"padding": "longest", "pad_to_multiple_of": 8, "padding_side": "right", "return_attention_mask": True},
    {"truncation": "longest_first", "max_length": 30, "padding": True, "return_assistant_tokens_mask": True},
    {"max_length": 10},  # max_length alone: apply_chat_template's truncation defaults to False
    {"padding": "max_length"},  # to model_max_length
]
# continue_final_message needs conversations that end with the assistant's message
CONTINUE_CASES: list[dict[str, Any]] = [
    {"continue_final_message": True},
    {"continue_final_message": True, "padding": True, "padding_side": "left"},
]


def note(name: str) -> None:
    """A hypothesis event (``--hypothesis-show-statistics``), when inside a property test."""
    if currently_in_test_context():
        event(name)


def check(runner, renderer, tokenizer, conversations, options, has_markers) -> Any:
    """Our answer equals transformers', or we refuse on purpose where transformers would be silently wrong."""
    theirs = reference_chat(tokenizer, conversations, options)
    ours = engine_chat(runner, renderer, ChatTemplates.of(tokenizer), conversations, options)
    reason = refused_by_design(conversations, options, has_markers)
    if reason is None:
        assert_chat_parity(ours, theirs, (conversations, options))
        if isinstance(theirs, BaseException):
            note("both refused")
        else:
            note("answered")
            for region in regions(theirs, options):
                note(f"answered: {region}")
        return theirs
    note(f"refused by design: {reason}")
    assert isinstance(ours, ServiceError) and ours.kind in REFUSAL_KINDS, (reason, ours)
    if "generation markers" in reason and not isinstance(theirs, BaseException):
        # the refusal is where transformers answers an all-zero mask
        assert not any(map(any, theirs["assistant_masks"])), theirs["assistant_masks"]
    return theirs


def regions(answer: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """The parts of the option space an answer reached (hypothesis statistics)."""
    reached = []
    if any(map(any, answer.get("assistant_masks", []))):
        reached.append("assistant tokens marked")
    if options.get("continue_final_message"):
        reached.append("final message continued")
    if options.get("max_length") and any(len(row) == options["max_length"] for row in answer["input_ids"]):
        reached.append("a row at max_length")
    if "attention_mask" in answer and any(0 in row for row in answer["attention_mask"]):
        reached.append("padded " + (options.get("padding_side") or "default side"))
    return reached


@pytest.mark.parametrize("template", PARITY_TEMPLATES)
@pytest.mark.parametrize("family", FAMILIES)
def test_fixed_conversations_match_apply_chat_template(family, template, engines, reference_tokenizers, chat_renderer):
    tokenizer = with_template(reference_tokenizers[family], TEMPLATES[template])
    conversations = fixed_conversations()
    answered = 0
    for options in FIXED_CASES:
        theirs = check(
            engines[family], chat_renderer, tokenizer, conversations, options, has_markers(TEMPLATES[template])
        )
        answered += not isinstance(theirs, BaseException)
    ending_with_assistant = [c for c in conversations if c[-1]["role"] == "assistant"]
    for options in CONTINUE_CASES:
        check(
            engines[family], chat_renderer, tokenizer, ending_with_assistant, options, has_markers(TEMPLATES[template])
        )
    assert answered >= len(FIXED_CASES) - 1  # the cases are not all refusals


@pytest.mark.parametrize("family", FAMILIES)
def test_one_conversation_alone_matches(family, engines, reference_tokenizers, chat_renderer):
    """transformers' unbatched call gives the same rows as a batch of one (the client unwraps it)."""
    tokenizer = with_template(reference_tokenizers[family], TEMPLATES["chatml_generation"])
    conversation = fixed_conversations()[1]
    theirs = tokenizer.apply_chat_template(conversation, return_assistant_tokens_mask=True)
    ours = engine_chat(
        engines[family],
        chat_renderer,
        ChatTemplates.of(tokenizer),
        [conversation],
        {"return_assistant_tokens_mask": True},
    )
    assert {key: [list(value)] for key, value in theirs.items()} == ours


@pytest.mark.parametrize("aim", AIMS)
@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_generated_conversations_match_apply_chat_template(
    family, aim, engines, named_chat_tokenizers, chat_renderer, data
):
    """Any conversations, any options, any of the tokenizer's named templates (or the one transformers picks),
    with each aim's options forced on so that it is reached in every run."""
    conversations, options = data.draw(aimed_chat_calls(aim))
    template = TEMPLATES[named_template(options)]
    tokenizer = named_chat_tokenizers[family]
    check(engines[family], chat_renderer, tokenizer, conversations, options, has_markers(template))
