"""Bad conversations and options: a ServiceError (422, or 413 for a size) whose message says what to fix and which
conversation; templates loaded from tokenizer directories; rendering bounded in size and memory; nothing of a
conversation in any log or message."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from service.engine.chat import ChatOptions, ChatRenderer, ChatTemplates, RenderLimits, render_chats
from service.engine.errors import ErrorKind, ServiceError
from service.engine.loading import load_tokenizer
from testkit.chat import NAMED_TEMPLATES, TEMPLATES, TOOLS, chat_tokenizer_dirs, with_template
from testkit.chat_parity import engine_chat

HELLO = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
INVALID, TOKENIZER, TOO_LARGE = ErrorKind.INVALID_REQUEST, ErrorKind.TOKENIZER, ErrorKind.TOO_LARGE


@pytest.fixture(scope="module")
def chatml(reference_tokenizers: dict[str, Any]) -> Any:
    return with_template(reference_tokenizers["bytelevel_bpe"], TEMPLATES["chatml_generation"])


def refusal(tokenizer: Any, conversations: Any, limits: RenderLimits | None = None, **options: Any) -> ServiceError:
    """The error of preparing and rendering this request (it must be refused)."""
    with pytest.raises(ServiceError) as caught:
        templates = ChatTemplates.of(tokenizer)
        render_chats(templates.prepare(conversations, ChatOptions(**options), limits or RenderLimits()))
    return caught.value


@pytest.mark.parametrize(
    ("conversations", "options", "kind", "expected"),
    [
        ([], {}, INVALID, "conversations must hold at least one conversation"),
        ([HELLO, []], {}, INVALID, "conversations[1] is empty: a conversation needs at least one message"),
        ([HELLO, "hello"], {}, INVALID, "conversations[1] must be a list of messages"),
        ([HELLO, [{"role": "user", "content": "a"}, "b"]], {}, INVALID, "conversations[1][1] is not an object"),
        ([[{"content": "no role"}]], {}, INVALID, "conversations[0][0] has no role"),
        ([[{"role": None, "content": "x"}]], {}, INVALID, "conversations[0][0] has no role"),
        ([[{"role": 3, "content": "x"}]], {}, INVALID, "conversations[0][0].role must be a string"),
        (
            [HELLO],
            {"add_generation_prompt": True, "continue_final_message": True},
            INVALID,
            "add_generation_prompt and continue_final_message cannot be used together",
        ),
        (
            [HELLO, HELLO[:1]],
            {"continue_final_message": True},
            INVALID,
            "conversations[1]: continue_final_message leaves the last message open",
        ),
        (
            [HELLO],
            {"continue_final_message": True, "return_assistant_tokens_mask": True},
            INVALID,
            "continue_final_message cannot be used with return_assistant_tokens_mask",
        ),
        ([HELLO], {"assistant_masks_from": "tokens"}, INVALID, "assistant_masks_from must be one of"),
        ([HELLO], {"padding_side": "middle"}, INVALID, "padding_side must be one of"),
        ([HELLO], {"padding": "max_width"}, INVALID, "padding must be one of"),
        ([HELLO], {"tools": ["get_weather"]}, INVALID, "tools[0] must be a JSON schema object"),
        ([HELLO], {"documents": "a text"}, INVALID, "documents must be a list of objects"),
        ([HELLO], {"chat_template_kwargs": {"messages": []}}, INVALID, "chat_template_kwargs cannot set ['messages']"),
        ([HELLO], {"chat_template_kwargs": ["x"]}, INVALID, "chat_template_kwargs must be an object"),
        ([HELLO], {"chat_template": "nope"}, INVALID, "chat_template 'nope' is not one of this tokenizer's"),
        ([HELLO], {"chat_template": "{{ messages }}"}, INVALID, "template bodies in requests are refused"),
        (
            [HELLO],
            {"padding": True, "truncation": True, "max_length": 5, "pad_to_multiple_of": 8},
            TOKENIZER,
            "truncation length (5) is not a multiple of pad_to_multiple_of (8)",
        ),
    ],
)
def test_bad_requests_say_what_to_fix_and_where(chatml, conversations, options, kind, expected):
    refused = refusal(chatml, conversations, **options)
    assert refused.kind is kind and expected in refused.message, refused.message


def test_template_failures_name_the_conversation(reference_tokenizers):
    llama3 = with_template(reference_tokenizers["sentencepiece"], TEMPLATES["llama3"])
    narrator = [HELLO, [{"role": "narrator", "content": "Once upon a time"}]]
    refused = refusal(llama3, narrator)
    assert refused.kind is TOKENIZER
    assert refused.message == (
        "conversations[1]: the chat template refused this conversation: Roles must be system, user, assistant or tool"
    )
    strict = with_template(reference_tokenizers["sentencepiece"], "{{ messages[0].content.upper() }}")
    refused = refusal(strict, [HELLO, [{"role": "user"}]])
    assert refused.kind is TOKENIZER
    assert refused.message.startswith("conversations[1]: the chat template reads something this conversation does")
    assert "chat_template_kwargs" in refused.message
    broken = with_template(reference_tokenizers["sentencepiece"], "{% for m in messages %}{{ m.content ")
    refused = refusal(broken, [HELLO])
    assert refused.kind is TOKENIZER and refused.message.startswith("the chat template does not compile: ")
    arithmetic = with_template(reference_tokenizers["sentencepiece"], "{{ 1 / (messages | length - 2) }}")
    refused = refusal(arithmetic, [[HELLO[0]], HELLO])
    assert refused.message.startswith("conversations[1]: the chat template failed on this conversation: ")
    assert "ZeroDivisionError" in refused.message


def test_continue_final_message_refusals_mirror_transformers(chatml, reference_tokenizers):
    refused = refusal(chatml, [HELLO, [HELLO[0], {"role": "assistant", "tool_calls": []}]], continue_final_message=True)
    assert refused.message == "conversations[1]: continue_final_message is set but the final message has no 'content'"
    reasoning = [HELLO[0], {"role": "assistant", "content": "a", "reasoning_content": "b"}]
    refused = refusal(chatml, [reasoning], continue_final_message="reasoning_content")
    assert refused.kind is TOKENIZER and "which the chat template never reads" in refused.message
    dropping = with_template(
        reference_tokenizers["wordpiece_default"], "{% for m in messages %}{{ m.role }}{{ m.content[:2] }}{% endfor %}"
    )
    refused = refusal(dropping, [HELLO], continue_final_message=True)
    assert refused.kind is TOKENIZER and "does not render the final message" in refused.message


def test_the_tokenizer_without_a_template_and_named_templates(reference_tokenizers):
    bare = with_template(reference_tokenizers["bytelevel_bpe"], None)
    refused = refusal(bare, [HELLO])
    assert refused.kind is TOKENIZER and refused.message.startswith("this tokenizer has no chat template")
    assert ChatTemplates.of(bare).info() == {
        "chat_template": False,
        "chat_template_names": [],
        "generation_markers": {},
        "template_bodies_allowed": False,
        "unusable": {},
    }
    no_default = with_template(
        reference_tokenizers["bytelevel_bpe"], {"a": TEMPLATES["llama3"], "b": TEMPLATES["llama3"]}
    )
    refused = refusal(no_default, [HELLO])
    assert refused.kind is TOKENIZER and "several chat templates and no default" in refused.message
    assert "['a', 'b']" in refused.message
    single = with_template(reference_tokenizers["bytelevel_bpe"], TEMPLATES["llama3"])
    refused = refusal(single, [HELLO], chat_template="default")
    assert "it has one unnamed template: omit chat_template" in refused.message


def test_template_bodies_are_refused_unless_allowed(reference_tokenizers):
    tokenizer = with_template(reference_tokenizers["bytelevel_bpe"], TEMPLATES["llama3"])
    body = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    refused = refusal(tokenizer, [HELLO], chat_template=body)
    assert "(a template body)" in refused.message and "--allow-chat-template-bodies" in refused.message
    allowed = ChatTemplates.of(tokenizer, allow_template_bodies=True)
    rendered = render_chats(allowed.prepare([HELLO], ChatOptions(chat_template=body)))
    assert rendered.texts == [tokenizer.apply_chat_template(HELLO, chat_template=body, tokenize=False)]


def test_too_many_conversations_and_renders_too_large(chatml):
    refused = refusal(chatml, [HELLO] * 5, RenderLimits(max_conversations=4))
    assert refused.kind is TOO_LARGE and "5 conversations exceed max_texts_per_request=4" in refused.message
    long = [{"role": "user", "content": "x" * 500}]
    refused = refusal(chatml, [HELLO, long], RenderLimits(max_chars=400))
    assert refused.kind is TOO_LARGE
    assert (
        refused.message
        == "conversations[1]: it renders to over max_text_chars=400 characters; send a shorter conversation"
    )
    # the prefixes "turns" renders are bounded too
    refused = refusal(chatml, [[*HELLO, *long]], RenderLimits(max_chars=400), **TURNS_MASKS)
    assert refused.kind is TOO_LARGE


TURNS_MASKS = {"return_assistant_tokens_mask": True, "assistant_masks_from": "turns"}


def vm_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_render_bomb_stops_at_the_bound(reference_tokenizers):
    """A template that repeats a message ten thousand times would render 100 MB (and hold it twice, blocks and
    joined text); the render stops as soon as it passes max_chars, holding no more than the bound (peak RSS)."""
    bomb = with_template(
        reference_tokenizers["bytelevel_bpe"], "{% for i in range(10000) %}{{ messages[0].content }}{% endfor %}"
    )
    conversation = [{"role": "user", "content": "y" * 10_000}]
    limits = RenderLimits(max_chars=1_000_000)
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    rest = vm_hwm()
    refused = refusal(bomb, [conversation], limits)
    peak = vm_hwm() - rest
    assert refused.kind is TOO_LARGE
    assert peak < limits.in_progress_bytes() + 32 * 1024 * 1024, peak  # unbounded: over 200 MB


def test_chat_tokenizer_directories_load_their_templates(tmp_path_factory, tokenizer_dirs):
    """The tokenizer directories phase 2's server serves: named templates as transformers saves them, and a single
    template in tokenizer_config.json; load_tokenizer reads them, ChatTemplates reports and resolves them."""
    dirs = chat_tokenizer_dirs(dict(tokenizer_dirs), tmp_path_factory.mktemp("chat-tokenizers"))
    for family in tokenizer_dirs:
        loaded = load_tokenizer(str(dirs[family]))
        templates = ChatTemplates.of(loaded.tokenizer)
        assert templates.names == sorted(NAMED_TEMPLATES)
        assert templates.info()["generation_markers"] == {
            name: name in ("default", "tool_use") for name in sorted(NAMED_TEMPLATES)
        }
        tools = render_chats(templates.prepare([HELLO], ChatOptions(tools=TOOLS)))  # tool_use, picked by tools
        assert tools.texts == [loaded.tokenizer.apply_chat_template(HELLO, tools=TOOLS, tokenize=False)]
        assert "# Tools" in tools.texts[0]
        named = render_chats(templates.prepare([HELLO], ChatOptions(chat_template="llama3")))
        assert named.texts[0].endswith("hello<|eot_id|>")
        single = ChatTemplates.of(load_tokenizer(str(dirs[f"{family}-config"])).tokenizer)
        assert single.info()["chat_template"] and single.names == []
        assert single.info()["generation_markers"] == {"": True}


def test_no_conversation_content_in_any_log_or_message(chatml, engines, chat_renderer, caplog):
    """A canary in every message, through every path (answers and refusals): never in a log record; in refusal
    messages, only where the template's own raise_exception text carries it (it carries none here)."""
    canary = "CANARY-7d1f"
    conversations = [
        [{"role": "user", "content": f"{canary} q"}, {"role": "assistant", "content": f"{canary} a"}],
        [{"role": "user", "content": canary * 3}],
    ]
    caplog.set_level(logging.DEBUG)
    messages = []
    for options in (
        {"return_assistant_tokens_mask": True, "padding": True},
        TURNS_MASKS,
        {"continue_final_message": True},
        {"add_generation_prompt": True, "chat_template_kwargs": {"x": canary}},
    ):
        result = engine_chat(engines["bytelevel_bpe"], chat_renderer, ChatTemplates.of(chatml), conversations, options)
        if isinstance(result, ServiceError):
            messages.append(result.message)
    for bad in ([[{"content": canary}]], [[{"role": "user", "content": canary}, canary]]):
        messages.append(refusal(chatml, bad).message)
    refused = refusal(with_template(chatml, "{{ messages[0].content.nope() }}"), conversations)
    messages.append(refused.message)
    long = refusal(chatml, conversations, RenderLimits(max_chars=10))
    messages.append(long.message)
    assert len(messages) >= 5
    assert not any(canary in message for message in messages), messages
    assert not any(canary in record.getMessage() for record in caplog.records)


def test_renders_run_on_the_render_thread(chatml, engines, monkeypatch):
    """Rendering and masking run on the renderer's own thread: never the event loop, never the tokenizer thread."""
    import threading

    from service.engine.chat import renderer as render_thread  # (the module that calls them)

    seen: list[str] = []

    def recording(function: Any) -> Any:
        def run(*args: Any) -> Any:
            seen.append(threading.current_thread().name)
            return function(*args)

        return run

    monkeypatch.setattr(render_thread, "render_chats", recording(render_thread.render_chats))
    monkeypatch.setattr(render_thread, "add_assistant_masks", recording(render_thread.add_assistant_masks))
    runner = engines["bytelevel_bpe"]
    renderer = ChatRenderer()
    runner.run(renderer.astart())
    try:
        result = engine_chat(
            runner, renderer, ChatTemplates.of(chatml), [HELLO], {"return_assistant_tokens_mask": True}
        )
    finally:
        runner.run(renderer.astop())
    assert result["assistant_masks"] and len(seen) == 2
    assert all(name.startswith("chat-render") for name in seen), seen
