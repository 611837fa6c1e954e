"""What "identical to the in-process tokenizer" means, and the inputs we check it on.

Two kinds of generated calls:

- :func:`encode_calls`: any texts with any combination of options, to find combinations nobody thought of.
- :func:`aimed_calls`: one call per *option region* -- a part of the option space where the service does
  its own work and a bug would hide from random draws (overflow rows with a stride, ``pad_to_multiple_of``
  rounding, left padding of ragged rows, each truncation strategy on pairs, special tokens off). These
  measure the texts with the reference tokenizer and put ``max_length`` near their lengths, so the region is
  reached on purpose rather than by luck.

:func:`regions_reached` says, from the reference's own answer, which regions a call actually reached;
:class:`RegionTally` counts them per test, reports them as hypothesis events (``--hypothesis-show-statistics``)
and fails the test when a region was reached less often than its floor.
"""

from __future__ import annotations

import functools
import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event
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
SHORT_TRICKY_TEXTS = [text for text in TRICKY_TEXTS if len(text) < 100]

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
def encode_calls(
    draw: Any, texts: Any = text_strategy, max_texts: int = 6
) -> tuple[list[str], list[str] | None, dict[str, Any]]:
    batch = draw(st.lists(texts, min_size=1, max_size=max_texts))
    pairs = draw(st.one_of(st.none(), st.lists(texts, min_size=len(batch), max_size=len(batch))))
    return batch, pairs, draw(options_strategy)


# -- calls aimed at one option region ------------------------------------------------------------------------

OVERFLOW = "overflow+stride"
MULTIPLE_LONGEST = "pad_to_multiple_of+longest"
MULTIPLE_MAX_LENGTH = "pad_to_multiple_of+max_length"
LEFT_RAGGED = "left padding+ragged rows"
PAIR_LONGEST_FIRST = "pairs+longest_first"
PAIR_ONLY_FIRST = "pairs+only_first"
PAIR_ONLY_SECOND = "pairs+only_second"
SPECIALS_OFF = "add_special_tokens=False"
REGIONS = (
    OVERFLOW,
    MULTIPLE_LONGEST,
    MULTIPLE_MAX_LENGTH,
    LEFT_RAGGED,
    PAIR_LONGEST_FIRST,
    PAIR_ONLY_FIRST,
    PAIR_ONLY_SECOND,
    SPECIALS_OFF,
)

# Words of every script the families meet, so a text's token count follows its word count.
WORDS = (
    "the weather is nice today and we tokenize every batch exactly like transformers does , . ! ? ; : "
    "parity stride overflow 42 3.14 1e9 émigré naïve Zürich façade don't can't e-mail https://example.org "
    "今 天 气 很 好 数 据 中 文 句 子 模 型 训 练 的 一 是 不 了 人 我 在 有 他 这 。 ， 🙂 👍🏽 🏳️‍🌈 "
    "مرحبا שלום Привет мир γειά σου नमस्ते こんにちは 안녕하세요"
).split()


def _words(count: int, seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


def worded(min_words: int, max_words: int) -> Any:
    """Texts of ``min_words`` to ``max_words`` words, picked by a seeded generator: two draws per text (a
    list[Any] of sampled words costs one per word, which made generation most of the test's time)."""
    return st.builds(_words, st.integers(min_words, max_words), st.integers(0, 2**16))


short_text = st.one_of(worded(0, 6), st.sampled_from(SHORT_TRICKY_TEXTS), st.text(max_size=12))


@dataclass(frozen=True)
class Call:
    """One tokenizer call: ``tokenizer(texts, pairs, **options)``; ``aim`` is the region it was drawn for."""

    texts: list[str]
    pairs: list[str] | None
    options: dict[str, Any]
    aim: str = "any"


def token_lengths(tokenizer: Any, texts: list[str], pairs: list[str] | None = None, special: bool = False) -> list[int]:
    """Tokens per row without truncation or padding (the reference tokenizer measures)."""
    rows = zip(texts, pairs if pairs is not None else [None] * len(texts), strict=True)
    return [_token_length(tokenizer, text, pair, special) for text, pair in rows]


@functools.lru_cache(maxsize=4096)
def _token_length(tokenizer: Any, text: str, pair: str | None, special: bool) -> int:
    # batch form: a single call would take an empty pair for no pair
    return len(tokenizer([text], None if pair is None else [pair], add_special_tokens=special)["input_ids"][0])


def _extras(draw: Any) -> Any:
    """The return_* flags, any value: they ride along with every region."""
    return draw(
        st.fixed_dictionaries(
            {},
            optional={
                "return_token_type_ids": st.sampled_from([None, True, False]),
                "return_attention_mask": st.sampled_from([None, True, False]),
                "return_special_tokens_mask": st.booleans(),
                "return_offsets_mapping": st.booleans(),
                "return_length": st.booleans(),
            },
        )
    )


def _truncated_rows(draw: Any, strategy: str, pair: bool) -> tuple[list[str], list[str] | None]:
    """Rows whose truncated side (the first text, the second, or either for longest_first) is long and the
    other short, so a ``max_length`` between the two cuts the long side and leaves room for a stride."""
    count = draw(st.integers(1, 4))
    long_texts = st.lists(worded(6, 30), min_size=count, max_size=count)
    short_texts = st.lists(short_text, min_size=count, max_size=count)
    if not pair:
        return draw(long_texts), None
    if strategy == "only_second":
        return draw(short_texts), draw(long_texts)
    if strategy == "only_first":
        return draw(long_texts), draw(short_texts)
    either = st.lists(st.one_of(worded(6, 30), short_text), min_size=count, max_size=count)
    return draw(long_texts), draw(either)


def truncation_targets(first: int, second: int | None, strategy: str, room: int) -> list[tuple[int, int]]:
    """(length, cut to) of each sequence the Rust tokenizer truncates to fit ``room`` tokens (``max_length``
    less the special tokens), as tokenizers' ``truncate_encodings`` does: a generator's aid to keep the
    stride below every cut (Rust refuses a stride >= the cut); correctness is judged by the reference."""
    if second is None:
        return [(first, room)] if first > room else []
    if first + second <= room:
        return []
    if strategy == "only_first":
        return [(first, room - second)]
    if strategy == "only_second":
        return [(second, room - first)]
    short, long = sorted((first, second))
    cut_short, cut_long = short, (short if short > room else max(short, room - short))
    if cut_short + cut_long > room:
        cut_short, cut_long = room // 2, room // 2 + room % 2
    return [(n, cut) for n, cut in ((short, cut_short), (long, cut_long)) if n > cut]


def _cutting_max_length(
    draw: Any, tokenizer: Any, texts: list[str], pairs: list[str] | None, strategy: str, special: bool
) -> tuple[int, int]:
    """A ``max_length`` that cuts the longest row, and the bound a stride must stay below: every cut, and
    transformers' own check (``max_length`` less the special tokens, added or not)."""
    template = tokenizer.num_special_tokens_to_add(pairs is not None)
    added = template if special else 0
    firsts = token_lengths(tokenizer, texts)
    seconds: list[int | None] = list(token_lengths(tokenizer, pairs)) if pairs is not None else [None] * len(texts)
    top = max(a + (b or 0) for a, b in zip(firsts, seconds, strict=True)) + added - 1  # the longest row is cut

    def stride_bound(max_length: int) -> int:
        cuts = [
            cut
            for a, b in zip(firsts, seconds, strict=True)
            for _, cut in truncation_targets(a, b, strategy, max_length - added)
        ]
        return int(min([*cuts, max_length - template]))

    max_length = draw(st.integers(template + 2, max(template + 2, top)))
    while stride_bound(max_length) < 2 and max_length < top:  # leave room for a stride on every cut row
        max_length += 1
    return max_length, stride_bound(max_length)


@st.composite
def overflow_calls(draw: Any, tokenizer: Any) -> Call:
    pair = draw(st.booleans())
    strategy = draw(st.sampled_from(["longest_first", "only_first", "only_second"] if pair else ["longest_first"]))
    special = draw(st.booleans())
    texts, pairs = _truncated_rows(draw, strategy, pair)
    max_length, cut = _cutting_max_length(draw, tokenizer, texts, pairs, strategy, special)
    options: dict[str, Any] = {
        "truncation": True if strategy == "longest_first" and draw(st.booleans()) else strategy,
        "max_length": max_length,
        "stride": draw(st.integers(1, max(1, cut - 1))),
        "return_overflowing_tokens": True,
        "add_special_tokens": special,
        "padding": draw(st.sampled_from([False, True, "longest", "max_length"])),
        "padding_side": draw(st.sampled_from([None, "left", "right"])),
        **_extras(draw),
    }
    return Call(texts, pairs, options, OVERFLOW)


@st.composite
def multiple_longest_calls(draw: Any, tokenizer: Any) -> Call:
    texts = draw(st.lists(st.one_of(worded(1, 20), short_text), min_size=1, max_size=5))
    pairs = draw(st.one_of(st.none(), st.lists(short_text, min_size=len(texts), max_size=len(texts))))
    special = draw(st.booleans())
    added = tokenizer.num_special_tokens_to_add(pairs is not None) if special else 0
    longest = max(token_lengths(tokenizer, texts, pairs)) + added
    multiples = [m for m in (2, 3, 4, 5, 8) if longest % m] or [2]  # ones that round the longest row up
    options = {
        "padding": draw(st.sampled_from([True, "longest"])),
        "pad_to_multiple_of": draw(st.sampled_from(multiples)),
        "truncation": draw(st.sampled_from([None, False, "do_not_truncate"])),
        "add_special_tokens": special,
        "padding_side": draw(st.sampled_from([None, "left", "right"])),
        **_extras(draw),
    }
    return Call(texts, pairs, options, MULTIPLE_LONGEST)


def _ragged_texts(draw: Any) -> tuple[list[str], list[str] | None]:
    """A long text, a short one and a few others, in any order (and maybe pairs): rows of unequal length."""
    texts = [
        draw(worded(10, 24)),
        draw(worded(0, 3)),
        *draw(st.lists(st.one_of(worded(0, 20), short_text), max_size=3)),
    ]
    texts = list(draw(st.permutations(texts)))
    pairs = draw(st.one_of(st.none(), st.lists(short_text, min_size=len(texts), max_size=len(texts))))
    return texts, pairs


def _row_lengths(tokenizer: Any, texts: list[str], pairs: list[str] | None, special: bool) -> list[int]:
    added = tokenizer.num_special_tokens_to_add(pairs is not None) if special else 0
    return [n + added for n in token_lengths(tokenizer, texts, pairs)]


@st.composite
def multiple_max_length_calls(draw: Any, tokenizer: Any) -> Call:
    texts, pairs = _ragged_texts(draw)
    special = draw(st.booleans())
    lengths = _row_lengths(tokenizer, texts, pairs, special)
    multiple = draw(st.sampled_from([2, 3, 4, 8]))
    max_length = draw(st.integers(max(1, min(lengths)), max(lengths) + 4))  # the shortest row gets padded
    if max_length % multiple == 0:
        max_length += 1  # so the rounding shows (the target is then above max_length)
    options = {
        "padding": "max_length",
        "max_length": max_length,
        "pad_to_multiple_of": multiple,
        "truncation": draw(st.sampled_from([None, False, "do_not_truncate"])),  # truncation forbids the rounding
        "add_special_tokens": special,
        "padding_side": draw(st.sampled_from([None, "left", "right"])),
        **_extras(draw),
    }
    return Call(texts, pairs, options, MULTIPLE_MAX_LENGTH)


@st.composite
def left_ragged_calls(draw: Any, tokenizer: Any) -> Call:
    texts, pairs = _ragged_texts(draw)
    special = draw(st.booleans())
    lengths = _row_lengths(tokenizer, texts, pairs, special)
    low, high = min(lengths), max(lengths)
    options = {
        "padding": "max_length",
        "max_length": draw(st.integers(low + 1, high - 1)) if high - low > 1 else max(1, high - 1),
        "truncation": draw(st.sampled_from([None, False, "do_not_truncate"])),  # long rows stay long: ragged
        "padding_side": "left" if tokenizer.padding_side != "left" else draw(st.sampled_from([None, "left"])),
        "add_special_tokens": special,
        "pad_to_multiple_of": draw(st.sampled_from([None, None, 2, 4])),
        **_extras(draw),
    }
    return Call(texts, pairs, options, LEFT_RAGGED)


@st.composite
def pair_truncation_calls(draw: Any, tokenizer: Any, strategy: str, aim: str) -> Call:
    special = draw(st.booleans())
    texts, pairs = _truncated_rows(draw, strategy, pair=True)
    max_length, cut = _cutting_max_length(draw, tokenizer, texts, pairs, strategy, special)
    overflow = draw(st.booleans())
    options: dict[str, Any] = {
        "truncation": draw(st.sampled_from([True, strategy])) if strategy == "longest_first" else strategy,
        "max_length": max_length,
        "add_special_tokens": special,
        "return_overflowing_tokens": overflow,
        "stride": draw(st.integers(0, max(0, cut - 1))) if overflow else 0,
        "padding": draw(st.sampled_from([False, True, "max_length"])),
        "padding_side": draw(st.sampled_from([None, "left", "right"])),
        **_extras(draw),
    }
    return Call(texts, pairs, options, aim)


@st.composite
def specials_off_calls(draw: Any, tokenizer: Any) -> Call:
    texts = draw(st.lists(st.one_of(worded(0, 12), short_text), min_size=1, max_size=5))
    pairs = draw(
        st.one_of(st.none(), st.lists(st.one_of(worded(0, 12), short_text), min_size=len(texts), max_size=len(texts)))
    )
    options = draw(options_strategy)
    options = {**options, "add_special_tokens": False}
    if options.get("max_length") == 0:
        options["max_length"] = None
    return Call(texts, pairs, options, SPECIALS_OFF)


@functools.cache
def aimed_calls(tokenizer: Any) -> dict[str, Any]:
    """region -> a strategy of calls aimed at it, for ``tokenizer`` (it measures the texts)."""
    return {
        OVERFLOW: overflow_calls(tokenizer),
        MULTIPLE_LONGEST: multiple_longest_calls(tokenizer),
        MULTIPLE_MAX_LENGTH: multiple_max_length_calls(tokenizer),
        LEFT_RAGGED: left_ragged_calls(tokenizer),
        PAIR_LONGEST_FIRST: pair_truncation_calls(tokenizer, "longest_first", PAIR_LONGEST_FIRST),
        PAIR_ONLY_FIRST: pair_truncation_calls(tokenizer, "only_first", PAIR_ONLY_FIRST),
        PAIR_ONLY_SECOND: pair_truncation_calls(tokenizer, "only_second", PAIR_ONLY_SECOND),
        SPECIALS_OFF: specials_off_calls(tokenizer),
    }


def draw_calls(data: Any, tokenizer: Any) -> list[Call]:
    """One example's calls: one aimed at every region, then one from anywhere."""
    calls = [data.draw(strategy, label=region) for region, strategy in aimed_calls(tokenizer).items()]
    texts, pairs, options = data.draw(encode_calls(), label="any options")
    return [*calls, Call(texts, pairs, options)]


# -- which regions a call reached ------------------------------------------------------------------------------


def regions_reached(tokenizer: Any, call: Call, result: dict[str, Any] | Exception) -> set[str]:
    """The regions ``call`` reached, judged from the reference's answer ``result`` (none if it refused)."""
    if isinstance(result, BaseException):
        return set()
    options, rows = call.options, result["input_ids"]
    special = options.get("add_special_tokens", True)
    padding = options.get("padding", False)
    multiple = options.get("pad_to_multiple_of") or 1
    max_length = options.get("max_length")
    reached = set()
    if not special:
        reached.add(SPECIALS_OFF)
    if options.get("return_overflowing_tokens") and options.get("stride", 0) > 0 and len(rows) > len(call.texts):
        reached.add(OVERFLOW)
    if padding not in (False, "do_not_pad"):
        # the same call unpadded ("do_not_pad", not False: truncation resolves the same way), row for row
        unpadded = tokenizer(call.texts, call.pairs, **{**options, "padding": "do_not_pad", "pad_to_multiple_of": None})
        lengths = [len(row) for row in unpadded["input_ids"]]
        padded = [len(row) for row, n in zip(rows, lengths, strict=True) if len(row) > n]
        if multiple > 1 and padding in (True, "longest") and max(map(len, rows)) > max(lengths):
            reached.add(MULTIPLE_LONGEST)
        if multiple > 1 and padding == "max_length" and max_length and any(n > max_length for n in padded):
            reached.add(MULTIPLE_MAX_LENGTH)
        side = options.get("padding_side") or tokenizer.padding_side
        if side == "left" and padded and len({len(row) for row in rows}) > 1:
            reached.add(LEFT_RAGGED)
    if call.pairs is not None:
        strategy = options.get("truncation")
        if strategy is None and max_length is not None and padding is False:
            strategy = "longest_first"  # max_length alone turns truncation on
        strategy = "longest_first" if strategy is True else strategy
        limit = max_length if max_length is not None else tokenizer.model_max_length
        region = {"longest_first": PAIR_LONGEST_FIRST, "only_first": PAIR_ONLY_FIRST, "only_second": PAIR_ONLY_SECOND}
        if strategy in region and max(token_lengths(tokenizer, call.texts, call.pairs, special)) > limit:
            reached.add(region[strategy])
    return reached


@dataclass
class RegionTally:
    """Counts, over one property test's examples, how often each region was reached."""

    name: str
    floor: float = 0.5  # each region must be reached in at least this share of the examples
    minimum: int = 3  # ... and at least this many times
    examples: int = 0
    reached: Counter[str] = field(default_factory=Counter)

    def example(self) -> None:
        self.examples += 1

    def record(self, regions: set[str]) -> None:
        for region in sorted(regions):
            event(f"reached {region}")  # hypothesis statistics: the share of examples that reached it
        self.reached.update(regions)

    def summary(self) -> str:
        cells = ", ".join(f"{region} {self.reached[region]}" for region in REGIONS)
        return f"{self.name}: {self.examples} examples; calls reaching each region: {cells}"

    def assert_floors(self) -> None:
        need = max(self.minimum, math.ceil(self.floor * self.examples))
        short = [region for region in REGIONS if self.reached[region] < need]
        assert not short, f"regions under their floor ({need} of {self.examples} examples): {short}; {self.summary()}"


TALLIES: list[RegionTally] = []  # every tally of this session, for the terminal summary (conftest.py)


def reaches_every_region(test: Any) -> Any:
    """Runs a hypothesis test that records into its ``region_tally`` argument, then fails it when a region
    was reached under the floor. Goes above ``@settings``/``@given``, so pytest still sees a hypothesis test
    (``--hypothesis-show-statistics`` lists the ``reached ...`` events)."""

    @functools.wraps(test)
    def checked(*args: Any, **kwargs: Any) -> None:
        tally: RegionTally = kwargs["region_tally"]
        test(*args, **kwargs)
        tally.assert_floors()

    return checked


def normalise(value: Any) -> Any:
    """Lists all the way down (tuples and numpy arrays become lists), for comparison."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist()))


def reference_call(
    tokenizer: Any, texts: list[str], pairs: list[str] | None, options: dict[str, Any]
) -> dict[str, Any] | BaseException:
    """What the in-process transformers tokenizer returns (as plain lists), or the exception it raises."""
    try:
        encoding = tokenizer(texts, pairs, **options)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return exc
    return {key: normalise(value) for key, value in encoding.items()}


def reference_lengths(tokenizer: Any, texts: list[str], pairs: list[str] | None, options: dict[str, Any]) -> Any:
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


def assert_same(ours: dict[str, Any], theirs: dict[str, Any], context: Any = None) -> None:
    assert list(ours) == list(theirs), f"keys differ: {list(ours)} != {list(theirs)} for {context}"
    for key in theirs:
        assert normalise(ours[key]) == theirs[key], f"{key} differs for {context}"
