"""Tier 2, the chat routes in-process (TestClient, lifespan running): every bad input of issue 20 answered 422 naming
what to fix and which conversation, /info's account of the templates, template bodies behind their flag, the
memory budget and the queue deadline applied to renders, and the OpenAPI schema of both routes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.engine.errors import ErrorKind
from service.http.app import create_app
from service.http.settings import Settings
from service.wire import CHAT_ENCODE_PATH, CHAT_RENDER_PATH
from testkit.chat import TEMPLATES, fixed_conversations, with_template

HELLO = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]


def make_client(model: Any, **settings: Any) -> TestClient:
    return TestClient(create_app(Settings(model=str(model), **settings)))


@pytest.fixture(scope="module")
def client(chat_tokenizer_dirs) -> Iterator[TestClient]:
    with make_client(chat_tokenizer_dirs["bytelevel_bpe"]) as c:
        yield c


def assert_refused(response: Any, status: int, kind: ErrorKind, *words: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "error_type"} and body["error_type"] == kind.value, body
    for word in words:
        assert word in body["error"], body["error"]
    message: str = body["error"]
    return message


# (body, the words the 422 must hold): the list of issue 20, each naming the conversation where there is one
BAD_INPUTS = [
    ({"conversations": [HELLO, [HELLO[0], "not a message"]]}, ["conversations[1][1] is not an object"]),
    ({"conversations": [HELLO, [{"content": "who am I"}]]}, ["conversations[1][0] has no role"]),
    ({"conversations": [HELLO, HELLO, []]}, ["conversations[2] is empty"]),
    ({"conversations": [HELLO, "a text"]}, ["conversations[1] must be a list of messages"]),
    (
        {"conversations": [HELLO], "add_generation_prompt": True, "continue_final_message": True},
        ["add_generation_prompt and continue_final_message cannot be used together"],
    ),
    (
        {"conversations": [HELLO, HELLO[:1]], "continue_final_message": True},
        ["conversations[1]: continue_final_message", "must be the assistant's", "add_generation_prompt"],
    ),
    (
        {"conversations": [HELLO, [{"role": "narrator", "content": "once"}]], "chat_template": "llama3"},
        ["conversations[1]: the chat template refused this conversation: Roles must be"],
    ),
    ({"conversations": [HELLO], "chat_template": "chatml"}, ["chat_template 'chatml' is not one of", "'llama3'"]),
    ({"conversations": [HELLO], "chat_template": "{{ messages }}"}, ["--allow-chat-template-bodies"]),
    (
        {"conversations": [HELLO], "chat_template": "llama3", "return_assistant_tokens_mask": True},
        ["has no {% generation %} markers", "all-zero mask", '"assistant_masks_from": "turns"'],
    ),
    (
        {"conversations": [HELLO], "tokenizer_kwargs": {"padding_side": "left"}},
        ["tokenizer_kwargs: not a field here", "padding_side"],
    ),
    ({"conversations": [HELLO], "assistant_masks_from": "roles"}, ['must be one of "generation", "turns"']),
    ({"conversation": HELLO}, ["send `conversations`"]),
    ({"conversations": [HELLO], "enable_thinking": True}, ["enable_thinking: unknown field"]),
]


@pytest.mark.parametrize("path", [CHAT_ENCODE_PATH, CHAT_RENDER_PATH])
@pytest.mark.parametrize("body, words", BAD_INPUTS, ids=[words[0][:40] for _, words in BAD_INPUTS])
def test_every_bad_input_is_a_422_saying_what_and_where(client, path, body, words):
    if path == CHAT_RENDER_PATH and body.get("return_assistant_tokens_mask"):
        words = ["return_assistant_tokens_mask marks tokens, and rendering alone makes none"]
    response = client.post(path, json=body)
    assert response.status_code == 422, response.text
    message = response.json()["error"]
    for word in words:
        assert word in message, message


def test_a_missing_template_variable_and_a_tokenizer_without_templates(client, tokenizer_dirs):
    """A template reading into what the conversation lacks is refused naming the conversation; a tokenizer with no
    chat template says so."""
    with make_client(tokenizer_dirs["bytelevel_bpe"], allow_chat_template_bodies=True) as bare:
        assert_refused(
            bare.post(CHAT_ENCODE_PATH, json={"conversations": [HELLO]}),
            422,
            ErrorKind.TOKENIZER,
            "this tokenizer has no chat template",
        )
        body = "{% for m in messages %}{{ m.content.upper() }}{{ m.name.upper() }}{% endfor %}"
        assert_refused(
            bare.post(
                CHAT_RENDER_PATH, json={"conversations": [[{**HELLO[0], "name": "a"}], HELLO], "chat_template": body}
            ),
            422,
            ErrorKind.TOKENIZER,
            "conversations[1]: the chat template reads something this conversation does not have",
            "chat_template_kwargs",
        )
        info = bare.get("/info").json()["chat"]
        assert info == {
            "chat_template": False,
            "chat_template_names": [],
            "generation_markers": {},
            "template_bodies_allowed": True,
            "unusable": {},
        }


def test_info_names_the_templates_and_which_carry_markers(client):
    assert client.get("/info").json()["chat"] == {
        "chat_template": True,
        "chat_template_names": ["default", "llama3", "rewriting", "tool_use"],
        "generation_markers": {"default": True, "llama3": False, "rewriting": False, "tool_use": True},
        "template_bodies_allowed": False,
        "unusable": {},
    }


def test_a_template_that_cannot_compile_is_named_at_start_up_in_info_and_in_each_refusal(
    chat_tokenizer_dirs, tmp_path, caplog
):
    broken = "{% for m in messages %}{{ m.content "
    allowing = make_client(chat_tokenizer_dirs["bytelevel_bpe"], allow_chat_template_bodies=True)
    with caplog.at_level("ERROR"), allowing as c:
        info = c.get("/info").json()["chat"]
        assert info["unusable"] == {}  # the tokenizer's own templates compile
        refusal = assert_refused(
            c.post(CHAT_RENDER_PATH, json={"conversations": [HELLO], "chat_template": broken}),
            422,
            ErrorKind.TOKENIZER,
            "the chat template does not compile: ",
        )
    assert not [r for r in caplog.records if "chat" in r.getMessage()]
    shutil.copytree(chat_tokenizer_dirs["bytelevel_bpe"], tmp_path / "broken")
    (tmp_path / "broken" / "chat_template.jinja").write_text(broken, "utf-8")
    shutil.rmtree(tmp_path / "broken" / "additional_chat_templates")
    caplog.clear()
    with caplog.at_level("ERROR"), make_client(tmp_path / "broken") as c:
        assert c.get("/info").json()["chat"]["unusable"] == {"": refusal}
        assert_refused(c.post(CHAT_RENDER_PATH, json={"conversations": [HELLO]}), 422, ErrorKind.TOKENIZER, refusal)
    assert [r.getMessage() for r in caplog.records] == [f"the chat routes will refuse this template: {refusal}"]


def test_an_install_without_jinja2_is_named_at_start_up_and_never_blamed_on_the_tokenizer(
    chat_tokenizer_dirs, monkeypatch, caplog
):
    # transformers' own check of the install, answering as it does where jinja2 is not installed
    from transformers.utils import chat_template_utils as ctu

    monkeypatch.setattr(ctu, "is_jinja_available", lambda: False)
    ctu._compile_jinja_template.cache_clear()
    try:
        with caplog.at_level("ERROR"), make_client(chat_tokenizer_dirs["bytelevel_bpe"]) as c:
            unusable = c.get("/info").json()["chat"]["unusable"]
            assert sorted(unusable) == ["default", "llama3", "rewriting", "tool_use"]
            for path in (CHAT_RENDER_PATH, CHAT_ENCODE_PATH):
                message = assert_refused(
                    c.post(path, json={"conversations": [HELLO]}),
                    500,
                    ErrorKind.INTERNAL,
                    "this server cannot render chat templates: its install lacks a package",
                    "jinja2",
                    "pip install 'tokenizer-service[server]'",
                )
                assert "does not compile" not in message and set(unusable.values()) == {message}
            assert c.post("/encode", json={"texts": ["hi"]}).status_code == 200  # the rest is served
        logged = [r.getMessage() for r in caplog.records]
        assert logged == [f"the chat routes will refuse this template: {message}"], logged  # once, not per template
    finally:
        monkeypatch.undo()
        ctu._compile_jinja_template.cache_clear()


def test_template_bodies_render_only_where_the_operator_allows_them(chat_tokenizer_dirs, reference_tokenizers):
    body = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    with make_client(chat_tokenizer_dirs["sentencepiece"], allow_chat_template_bodies=True) as allowing:
        answer = allowing.post(CHAT_RENDER_PATH, json={"conversations": fixed_conversations(), "chat_template": body})
        assert answer.status_code == 200, answer.text
        tokenizer = with_template(reference_tokenizers["sentencepiece"], body)
        assert answer.json() == {"texts": tokenizer.apply_chat_template(fixed_conversations(), tokenize=False)}


def test_renders_count_against_the_memory_budget_and_the_queue_deadline(chat_tokenizer_dirs):
    """A template that makes a small request huge is refused by the budget as it renders (413), one that renders
    slowly past the queue deadline gets 504; either way, nothing stays reserved."""
    bomb = "{% for i in range(1000) %}{{ messages[0].content }}{% endfor %}"
    conversations = [[{"role": "user", "content": "y" * 900}]] * 64  # 900,000 characters each, 58 MB in all
    with make_client(
        chat_tokenizer_dirs["wordpiece_default"],
        allow_chat_template_bodies=True,
        memory_budget_mib=32,
        max_text_chars=1_000_000,
        queue_timeout_seconds=0.5,
    ) as small:
        refused = small.post(CHAT_ENCODE_PATH, json={"conversations": conversations, "chat_template": bomb})
        assert_refused(refused, 413, ErrorKind.TOO_LARGE, "rendering these conversations", "memory budget")
        # slow: 4,096 conversations of 20,000 loop steps each (seconds in all), each rendering 20 characters
        slow = "{% for i in range(20000) %}{% if i % 1000 == 0 %}z{% endif %}{% endfor %}"
        late = small.post(CHAT_RENDER_PATH, json={"conversations": [HELLO] * 4096, "chat_template": slow})
        assert_refused(late, 504, ErrorKind.TIMEOUT, "queue deadline")
        memory = small.get("/info").json()["memory"]
        assert memory["reserved_bytes"] == 0
        assert small.post(CHAT_ENCODE_PATH, json={"conversations": [HELLO]}).status_code == 200  # still serving


def test_openapi_documents_both_chat_routes(client):
    schema = client.get("/openapi.json").json()
    for path in (CHAT_ENCODE_PATH, CHAT_RENDER_PATH):
        operation = schema["paths"][path]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == ["conversations"] and "assistant_masks_from" in body["properties"]
        message = body["properties"]["conversations"]["items"]["items"]
        assert message["required"] == ["role"] and message["additionalProperties"] is True
        assert {"200", "413", "422", "429", "504"} <= set(operation["responses"])
    encode = schema["paths"][CHAT_ENCODE_PATH]["post"]["responses"]
    assert "406" in encode and set(encode["200"]["content"]) == {
        "application/json",
        "application/vnd.safetensors",
        "application/vnd.tokenizer-service.ragged+safetensors",
    }


def test_one_encode_of_conversations_matches_transformers(client, reference_tokenizers):
    """The in-process tier's own check: the app answers what apply_chat_template gives (lists)."""
    tokenizer = with_template(reference_tokenizers["bytelevel_bpe"], TEMPLATES["chatml_generation"])
    conversations = fixed_conversations()
    answer = client.post(
        CHAT_ENCODE_PATH, json={"conversations": conversations, "return_assistant_tokens_mask": True, "padding": True}
    )
    assert answer.status_code == 200, answer.text
    theirs = tokenizer.apply_chat_template(conversations, return_assistant_tokens_mask=True, padding=True)
    assert answer.json() == {key: [list(row) for row in value] for key, value in theirs.items()}
