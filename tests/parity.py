"""What "identical to the in-process tokenizer" means, and the inputs we check it on."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

# Texts a user might send, nasty ones included.
TRICKY_TEXTS = [
    "",
    " ",
    "   \t\n  ",
    "\x00",
    "a\x00b\x01c\x7f",
    "\u200b\u200c\u200d\ufeff",
    "👩‍👩‍👧‍👦 family 🏳️‍🌈 flag 👍🏽",
    "e\u0301 n\u0303 a\u030a\u0323 Zalgo: Z\u0351\u0352\u0353a\u0354\u0355",
    "مرحبا بالعالم שלום עולם",
    "混合 Chinese 和 English 的句子，带标点。",
    "[CLS] [SEP] [PAD] <s> </s> <EOT> <unk>",
    "\ud7ff\ue000\U0010ffff",
    "x" * 3000,
    "tab\tnewline\ncarriage\rreturn",
]

text_strategy = st.one_of(
    st.sampled_from(TRICKY_TEXTS),
    st.text(max_size=80),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
    st.text(alphabet="的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年 abcdefgh,.!?", max_size=120),
)

options_strategy = st.fixed_dictionaries(
    {},
    optional={
        "add_special_tokens": st.booleans(),
        "padding": st.sampled_from([False, True, "longest", "max_length", "do_not_pad"]),
        "truncation": st.sampled_from(
            [None, False, True, "longest_first", "only_first", "only_second", "do_not_truncate"]
        ),
        "max_length": st.one_of(st.none(), st.integers(0, 40), st.just(512)),
        "stride": st.sampled_from([0, 1, 2, 5]),
        "pad_to_multiple_of": st.sampled_from([None, 1, 4, 8]),
        "padding_side": st.sampled_from([None, "left", "right"]),
        "return_token_type_ids": st.sampled_from([None, True, False]),
        "return_attention_mask": st.sampled_from([None, True, False]),
        "return_overflowing_tokens": st.booleans(),
        "return_special_tokens_mask": st.booleans(),
        "return_offsets_mapping": st.booleans(),
        "return_length": st.booleans(),
    },
)


@st.composite
def encode_calls(draw: Any, texts: Any = text_strategy, max_texts: int = 6) -> tuple[list[str], list[str] | None, dict]:
    batch = draw(st.lists(texts, min_size=1, max_size=max_texts))
    pairs = draw(st.one_of(st.none(), st.lists(texts, min_size=len(batch), max_size=len(batch))))
    return batch, pairs, draw(options_strategy)


def normalise(value: Any) -> Any:
    """Lists all the way down (tuples and numpy arrays become lists), for comparison."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist()))


def reference_call(tokenizer: Any, texts: list[str], pairs: list[str] | None, options: dict) -> dict | Exception:
    """What the in-process transformers tokenizer returns (as plain lists), or the exception it raises."""
    try:
        encoding = tokenizer(texts, pairs, **options)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return exc
    return {key: normalise(value) for key, value in encoding.items()}


def reference_lengths(tokenizer: Any, texts: list[str], pairs: list[str] | None, options: dict) -> Any:
    """What a token count means: the rows' lengths of the in-process call -- with overflow, grouped per text
    in row order -- or the exception transformers raises."""
    encoding = reference_call(tokenizer, texts, pairs, options)
    if isinstance(encoding, BaseException):
        return encoding
    rows = [len(ids) for ids in encoding["input_ids"]]
    if not options.get("return_overflowing_tokens"):
        return rows
    grouped: list[list[int]] = [[] for _ in texts]
    for count, sample in zip(rows, encoding["overflow_to_sample_mapping"], strict=True):
        grouped[sample].append(count)
    return grouped


def assert_same(ours: dict, theirs: dict, context: Any = None) -> None:
    assert list(ours) == list(theirs), f"keys differ: {list(ours)} != {list(theirs)} for {context}"
    for key in theirs:
        assert normalise(ours[key]) == theirs[key], f"{key} differs for {context}"
