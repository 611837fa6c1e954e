"""Chat templates and conversations for the tests and the benchmarks: our own templates (``chat_templates/``),
tokenizers that carry them, and conversations -- fixed ones and hypothesis strategies.

The templates are short jinja written for this project, each standing for a kind found in the wild:

- ``chatml_generation``: ChatML with ``{% generation %}`` markers (cue outside, content and end of turn inside).
- ``llama3``: Llama-3-style headers, **no** markers; opens with ``bos_token``; refuses unknown roles.
- ``llama3_generation``: the same with markers around what the assistant writes.
- ``tools_thinking``: tools, documents, reasoning, tool calls and tool responses, an ``enable_thinking``
  template variable; with markers.
- ``rewriting``: drops the reasoning of turns before the last user message, as Qwen3-style templates do;
  no markers; not prefix-stable.
- ``chatml_cue_inside``: markers opened inside the assistant cue (before its newline), as some published
  training templates place them.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

TEMPLATE_DIR = Path(__file__).resolve().parent / "chat_templates"
TEMPLATES: dict[str, str] = {path.stem: path.read_text("utf-8") for path in sorted(TEMPLATE_DIR.glob("*.jinja"))}
#: The four kinds the parity tests run on, in the order of the issue.
PARITY_TEMPLATES = ("chatml_generation", "llama3", "tools_thinking", "rewriting")
#: Templates with generation markers placed where "turns" must give the same masks.
MARKED_TEMPLATES = ("chatml_generation", "llama3_generation", "tools_thinking")
#: The named templates of the chat tokenizer directories (:func:`chat_tokenizer_dirs`).
NAMED_TEMPLATES = {
    "default": "chatml_generation",
    "tool_use": "tools_thinking",
    "llama3": "llama3",
    "rewriting": "rewriting",
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {"type": "object"}}},
]
DOCUMENTS = [{"title": "Paris", "text": "Paris est la capitale de la France."}, {"title": "空", "text": "天气晴朗 ☀️"}]


def with_template(tokenizer: Any, template: str | dict[str, str] | None) -> Any:
    """A shallow copy of an in-process tokenizer with ``chat_template`` set (the Rust tokenizer is shared)."""
    copied = copy.copy(tokenizer)
    copied.chat_template = template
    return copied


def chat_tokenizer_dirs(plain_dirs: dict[str, Path], root: Path) -> dict[str, Path]:
    """family -> a copy of its tokenizer directory carrying chat templates, as transformers saves them:
    ``chat_template.jinja`` (the default) and ``additional_chat_templates/<name>.jinja`` (the named ones of
    :data:`NAMED_TEMPLATES`). Also ``<family>-config``: the single ChatML template in tokenizer_config.json."""
    made: dict[str, Path] = {}
    for family, source in plain_dirs.items():
        named = root / family
        if not (named / "chat_template.jinja").exists():
            _copy_tokenizer(source, named)
            (named / "additional_chat_templates").mkdir(exist_ok=True)
            for name, template in NAMED_TEMPLATES.items():
                target = named / "chat_template.jinja" if name == "default" else named / "additional_chat_templates"
                if name != "default":
                    target = target / f"{name}.jinja"
                target.write_text(TEMPLATES[template], "utf-8")
        made[family] = named
        in_config = root / f"{family}-config"
        if not (in_config / "tokenizer_config.json").exists() or "chat_template" not in _config(in_config):
            _copy_tokenizer(source, in_config)
            config = _config(in_config)
            config["chat_template"] = TEMPLATES["chatml_generation"]
            (in_config / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), "utf-8")
        made[f"{family}-config"] = in_config
    return made


def _copy_tokenizer(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file():
            shutil.copy(path, target / path.name)


def _config(directory: Path) -> dict[str, Any]:
    path = directory / "tokenizer_config.json"
    loaded: dict[str, Any] = json.loads(path.read_text("utf-8")) if path.exists() else {}
    return loaded


# -- conversations ----------------------------------------------------------------------------------------
def fixed_conversations() -> list[list[dict[str, Any]]]:
    """Hand-written conversations that reach every branch of the templates above."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    return [
        [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello! How can I help?"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Quel temps fait-il à Paris ?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": '{"sky": "clear", "temp_c": 21}'},
            {"role": "assistant", "content": "Il fait beau, 21 °C. ☀️"},
        ],
        [
            {"role": "user", "content": "用中文回答：一加一等于几？"},
            {"role": "assistant", "content": "二。", "reasoning_content": "1 + 1 = 2"},
            {"role": "user", "content": [{"type": "text", "text": "再说一遍 👩‍👩‍👧‍👦"}]},
            {"role": "assistant", "content": "  二  ", "reasoning_content": "same again"},
        ],
        [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
        [{"role": "user", "content": "only a question"}],
        [
            {"role": "user", "content": "x " * 300},
            {"role": "assistant", "content": "y " * 300},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": "z"},
        ],
    ]


def conversation_strategy(
    *, roles: tuple[str, ...] = ("system", "user", "assistant", "tool"), max_messages: int = 6, long_turns: bool = True
) -> Any:
    """A hypothesis strategy of conversations: any roles in any order, multilingual and emoji content, empty
    content, content as a list of text parts, tool calls, reasoning, long turns."""
    from hypothesis import strategies as st

    words = st.sampled_from(
        [
            *("hello", "the", "weather", "天气", "很好", "مرحبا", "👍🏽", "🏳️‍🌈", "Zürich", "ß", "\n", "  "),
            *("<s>", "[SEP]", "<|im_end|>", "{{", "%}"),  # special tokens and template syntax, as plain content
        ]
    )
    short_text = st.lists(words, max_size=12).map(" ".join)
    texts = st.one_of(
        short_text,
        st.text(max_size=30),
        st.just(""),
        st.builds(lambda word, n: (word + " ") * n, words, st.integers(50, 200)) if long_turns else short_text,
    )
    content = st.one_of(
        texts,
        st.lists(st.builds(lambda t: {"type": "text", "text": t}, texts), min_size=1, max_size=2),
    )
    call = st.builds(
        lambda name, city: {"type": "function", "function": {"name": name, "arguments": {"city": city}}},
        st.sampled_from(["get_weather", "add"]),
        short_text,
    )

    def message(role: str) -> Any:
        if role == "assistant":
            return st.fixed_dictionaries(
                {"role": st.just(role), "content": st.one_of(texts, st.none())},
                optional={"tool_calls": st.lists(call, min_size=1, max_size=2), "reasoning_content": texts},
            )
        if role == "user":
            return st.fixed_dictionaries({"role": st.just(role), "content": content})
        return st.fixed_dictionaries({"role": st.just(role), "content": texts})

    return st.lists(st.sampled_from(roles).flatmap(message), min_size=1, max_size=max_messages)
