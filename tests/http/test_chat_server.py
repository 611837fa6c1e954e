"""Tier 3, conversations through real servers and both clients: ``/chat/encode`` and ``/chat/render`` against
in-process ``apply_chat_template`` on three tokenizer families and the four kinds of template (fixed conversations
and generated ones), as JSON lists, as safetensors (numpy and torch) and in the ragged layout; single conversations
as transformers takes them; token counts of conversations; and that a server logs nothing of a conversation."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.client import AsyncTokenizerClient, InvalidRequest, NotAcceptable, TokenizerClient
from testkit.chat import DOCUMENTS, NAMED_TEMPLATES, PARITY_TEMPLATES, TEMPLATES, TOOLS, fixed_conversations
from testkit.chat_parity import (
    AIMS,
    aimed_chat_calls,
    client_arguments,
    has_markers,
    named_template,
    reference_chat,
    refused_by_design,
)
from testkit.families import FAMILIES

#: template -> the name the chat servers give it (testkit.chat.chat_tokenizer_dirs)
SERVED_AS = {template: name for name, template in NAMED_TEMPLATES.items()}

# Wire-named options, each run through the JSON lists of both clients, the ragged layout and, when padded,
# safetensors; masks from markers where the template has them ("turns" is compared with them there).
CASES: list[dict[str, Any]] = [
    {},
    {"return_assistant_tokens_mask": True},
    {"return_assistant_tokens_mask": True, "assistant_masks_from": "turns"},
    {"padding": True, "padding_side": "left", "pad_to_multiple_of": 8, "return_assistant_tokens_mask": True},
    {"add_generation_prompt": True, "truncation": True, "max_length": 24, "padding": "max_length"},
    {"tools": TOOLS, "documents": DOCUMENTS, "chat_template_kwargs": {"enable_thinking": False}},
    {"padding": "longest", "return_attention_mask": False, "return_assistant_tokens_mask": True},
]


@pytest.fixture(scope="module")
def chat_clients(chat_servers):
    made: dict[str, Any] = {}

    def client(family: str) -> TokenizerClient:
        if family not in made:
            made[family] = TokenizerClient(chat_servers[family].url)
        return made[family]

    yield client
    for client_ in made.values():
        client_.close()


def as_lists(answer: Any) -> Any:
    """A client's answer as plain lists (tensors and arrays included), or the exception it raised."""
    if isinstance(answer, BaseException):
        return answer
    return {key: value.tolist() if hasattr(value, "tolist") else value for key, value in answer.items()}


def over_http(client: TokenizerClient, url: str, conversations: list, options: dict, mode: str) -> Any:
    """One call of ``mode``: "json" (the sync client), "async" (the async client, JSON), "np"/"pt" (safetensors)
    or "ragged" (``chat_encode_ragged``); its answer as lists, or the exception."""
    try:
        if mode == "ragged":
            return client.chat_encode_ragged(conversations, **options).tolist()
        arguments = client_arguments(options)
        if mode == "async":

            async def call() -> Any:
                async with AsyncTokenizerClient(url) as async_client:
                    return await async_client.apply_chat_template(conversations, **arguments)

            return as_lists(asyncio.run(call()))
        tensors = None if mode == "json" else mode
        return as_lists(client.apply_chat_template(conversations, return_tensors=tensors, **arguments))
    except (InvalidRequest, NotAcceptable) as exc:
        return exc


def check(ours: Any, theirs: Any, conversations: list, options: dict, template: str, mode: str) -> None:
    """Ours equals transformers', or both refuse, or we refuse by design where transformers is silently wrong."""
    context = (mode, conversations, options)
    reason = refused_by_design(conversations, options, has_markers(TEMPLATES[template]))
    if reason is not None:
        assert isinstance(ours, InvalidRequest) and ours.status == 422, (reason, ours, context)
        return
    if isinstance(theirs, BaseException):
        assert isinstance(ours, InvalidRequest), (theirs, ours, context)
        return
    if mode in ("np", "pt") and len({len(row) for row in theirs["input_ids"]}) > 1:
        assert isinstance(ours, NotAcceptable), context  # ragged rows: no tensor (transformers raises too)
        return
    assert not isinstance(ours, BaseException), (ours, context)
    assert list(ours) == list(theirs), context
    for key in theirs:
        assert ours[key] == theirs[key], (key, context)


def modes(options: dict) -> list[str]:
    padded = options.get("padding") not in (None, False, "do_not_pad")
    return ["json", "ragged", *(["np", "pt"] if padded else [])]


@pytest.mark.parametrize("template", PARITY_TEMPLATES)
@pytest.mark.parametrize("family", FAMILIES)
def test_fixed_conversations_over_http_match_apply_chat_template(
    family, template, chat_servers, chat_clients, named_chat_tokenizers
):
    tokenizer = named_chat_tokenizers[family]
    client = chat_clients(family)
    conversations = fixed_conversations()
    answered = 0
    for case in CASES:
        if case.get("assistant_masks_from") == "turns" and not has_markers(TEMPLATES[template]):
            continue  # "turns" on a template without markers has no transformers answer to equal (test_chat_masks)
        options = {**case, "chat_template": SERVED_AS[template]}
        reference = {**options, "assistant_masks_from": "generation"}  # transformers' own marks
        theirs = reference_chat(tokenizer, conversations, reference)
        for mode in modes(options):
            ours = over_http(client, chat_servers[family].url, conversations, options, mode)
            check(ours, theirs, conversations, reference, template, mode)
        answered += not isinstance(theirs, BaseException)
    assert answered >= 3
    # the async twin, and the rendered texts (tokenize=False), once per template
    options = {"chat_template": SERVED_AS[template], "add_generation_prompt": True}
    theirs = reference_chat(tokenizer, conversations, options)
    check(
        over_http(client, chat_servers[family].url, conversations, options, "async"),
        theirs,
        conversations,
        options,
        template,
        "async",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        texts = tokenizer.apply_chat_template(conversations, tokenize=False, chat_template=SERVED_AS[template])
    assert client.apply_chat_template(conversations, tokenize=False, chat_template=SERVED_AS[template]) == texts


@pytest.mark.parametrize("family", FAMILIES)
def test_one_conversation_is_answered_as_transformers_answers_it(family, chat_clients, named_chat_tokenizers):
    """Unbatched: flat lists (or a batch of one as tensors), the string, the ids alone with return_dict=False."""
    tokenizer = named_chat_tokenizers[family]
    client = chat_clients(family)
    conversation = fixed_conversations()[1]
    for kwargs in (
        {"return_assistant_tokens_mask": True},
        {"return_assistant_tokens_mask": True, "return_tensors": "np"},
        {"return_tensors": "pt", "tokenizer_kwargs": {"return_attention_mask": False}},
        {"return_dict": False},
        {"return_dict": False, "return_tensors": "pt"},
        {"tokenize": False, "add_generation_prompt": True, "tools": TOOLS},
    ):
        theirs = tokenizer.apply_chat_template(conversation, **kwargs)
        ours = client.apply_chat_template(conversation, **kwargs)
        if isinstance(theirs, (str, list)):
            assert ours == theirs, kwargs
            continue
        if isinstance(theirs, torch.Tensor):
            assert isinstance(ours, torch.Tensor) and torch.equal(ours, theirs), kwargs
            continue
        assert list(ours) == list(theirs), kwargs
        for key, value in theirs.items():
            if isinstance(value, (np.ndarray, torch.Tensor)):
                assert type(ours[key]) is type(value) and ours[key].dtype == value.dtype, (key, kwargs)
                assert ours[key].shape == value.shape and (ours[key] == value).all(), (key, kwargs)
            else:
                assert ours[key] == value, (key, kwargs)


@pytest.mark.parametrize("family", FAMILIES)
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_conversations_over_http_match_apply_chat_template(
    family, chat_servers, chat_clients, named_chat_tokenizers, data
):
    """Any conversations and options, each aim's options forced on in turn, through JSON, ragged and (padded)
    safetensors."""
    aim = data.draw(st.sampled_from(AIMS))
    conversations, options = data.draw(aimed_chat_calls(aim))
    template = named_template(options)
    theirs = reference_chat(named_chat_tokenizers[family], conversations, options)
    client = chat_clients(family)
    for mode in modes(options):
        ours = over_http(client, chat_servers[family].url, conversations, options, mode)
        check(ours, theirs, conversations, options, template, mode)


@pytest.mark.parametrize("family", FAMILIES)
def test_token_counts_of_conversations(family, chat_clients, named_chat_tokenizers):
    """client.lengths of conversations: len(apply_chat_template(...)["input_ids"]), truncation included."""
    tokenizer = named_chat_tokenizers[family]
    client = chat_clients(family)
    conversations = fixed_conversations()
    expected = [len(ids) for ids in tokenizer.apply_chat_template(conversations)["input_ids"]]
    assert client.lengths(conversations) == expected
    assert client.lengths(conversations, batch_size=4) == expected  # over two requests
    assert client.lengths(conversations[1]) == expected[1]  # one conversation: one count
    short = tokenizer.apply_chat_template(conversations, truncation=True, max_length=30)["input_ids"]
    assert client.lengths(conversations, truncation=True, max_length=30) == [len(ids) for ids in short]
    with pytest.raises(ValueError, match="do not apply to conversations"):
        client.lengths(conversations, stride=2)


def test_the_server_logs_nothing_of_a_conversation(chat_servers, chat_clients, chat_tokenizer_dirs):
    """Answers and refusals alike: the server's log holds neither content nor roles it was sent."""
    secret = "SECRET-7f3a"
    client = chat_clients("bytelevel_bpe")
    conversations = [[{"role": "user", "content": secret}, {"role": "assistant", "content": secret}]]
    client.apply_chat_template(conversations, return_assistant_tokens_mask=True)
    for bad in (
        [[{"role": f"narrator-{secret}", "content": secret}]],  # llama3 raises naming roles, not this one
        [[{"content": secret}]],
        [[{"role": "user", "content": secret}], []],
    ):
        with pytest.raises(InvalidRequest) as refused:
            client.apply_chat_template(bad, chat_template="llama3")
        assert secret not in str(refused.value)
    log = chat_servers["bytelevel_bpe"].log_path
    assert log is not None and secret not in log.read_text()


def test_the_chat_collators_token_budget_sampler_counts_conversations(chat_clients, named_chat_tokenizers):
    """collator.batch_sampler counts every conversation through the service, with the collator's chat options
    (truncation included), in chunks; its batches keep rows x longest within the budget and cover the dataset."""
    tokenizer = named_chat_tokenizers["bytelevel_bpe"]
    rows = [{"messages": conversation, "n": i} for i, conversation in enumerate(fixed_conversations() * 5)]
    collator = chat_clients("bytelevel_bpe").chat_collator(truncation=True, max_length=64, pad_to_multiple_of=8)
    sampler = collator.batch_sampler(rows, max_tokens=512, count_chunk_size=7, shuffle=False)
    expected = [
        len(ids)
        for ids in tokenizer.apply_chat_template([row["messages"] for row in rows], truncation=True, max_length=64)[
            "input_ids"
        ]
    ]
    assert sampler.lengths.tolist() == expected
    batches = list(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(len(rows)))
    assert all(sampler.batch_cost(batch) <= 512 for batch in batches)
    batch = collator([rows[i] for i in batches[0]])
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["n"].tolist() == batches[0]


@pytest.mark.parametrize("family", FAMILIES[:1])
def test_a_server_started_where_torch_is_installed_answers_as_transformers_without_loading_it(
    family, chat_servers, chat_clients, named_chat_tokenizers
):
    """The server's process keeps torch out (engine.loading.keep_torch_out): this venv has torch (imported at the
    top of this module), the process serving each route -- tensors asked as numpy and as torch too, which the
    client makes -- maps no torch library, and its answers equal transformers' in this process, which has torch."""
    client = chat_clients(family)
    conversations = fixed_conversations()
    options = {"padding": True, "return_assistant_tokens_mask": True}
    theirs = reference_chat(named_chat_tokenizers[family], conversations, options)
    for mode in modes(options):
        check(
            over_http(client, chat_servers[family].url, conversations, options, mode),
            theirs,
            conversations,
            options,
            NAMED_TEMPLATES["default"],
            mode,
        )
    texts = ["A server without torch.", "它的回答一样"]
    assert (
        client.encode(texts, padding=True, return_tensors="np")["input_ids"].tolist()
        == (named_chat_tokenizers[family](texts, padding=True)["input_ids"])
    )
    maps = open(f"/proc/{chat_servers[family].pid}/maps").read()
    assert torch.__file__ and "libtorch" not in maps, "the server process loaded torch"
