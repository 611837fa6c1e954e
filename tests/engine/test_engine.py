"""Tier 1: the engine alone, no HTTP. Parity with in-process transformers on three tokenizer families."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.engine import DecodeOptions, EncodeOptions, EngineLimits, TokenizeOptions
from service.engine.errors import ErrorKind, ServiceError
from service.engine.parallelism import ForkGuard, available_cpus
from testkit.engine import EngineRunner, encode_bound, queued_requests, to_lists, tokenizer_facts
from testkit.families import FAMILIES
from testkit.parity import TRICKY_TEXTS, assert_same, draw_calls, reaches_every_region, reference_call, regions_reached

FIXED_CASES = [
    {},
    {"padding": True},
    {"padding": "longest", "truncation": True, "max_length": 16},
    {"padding": "max_length", "max_length": 24, "padding_side": "left"},
    {
        "padding": "max_length",
        "truncation": True,
        "max_length": 12,
        "pad_to_multiple_of": 4,
        "return_special_tokens_mask": True,
        "return_length": True,
    },
    {
        "truncation": "longest_first",
        "max_length": 10,
        "stride": 3,
        "return_overflowing_tokens": True,
        "padding": True,
        "return_offsets_mapping": True,
    },
    {"padding": True, "pad_to_multiple_of": 8, "return_offsets_mapping": True, "padding_side": "left"},
    {"add_special_tokens": False, "return_token_type_ids": True, "return_attention_mask": False},
    {"max_length": 7},  # max_length alone turns truncation on, as in transformers
    {"truncation": True},  # max_length from model_max_length
    {"padding": "max_length"},  # pads to model_max_length
    # overflow without offsets: tokenizers' encode_batch_fast gets the overflow rows' type ids of pairs wrong
    {"truncation": True, "max_length": 12, "return_overflowing_tokens": True, "return_token_type_ids": True},
    {
        "add_special_tokens": False,
        "truncation": "longest_first",
        "max_length": 6,
        "stride": 1,
        "return_overflowing_tokens": True,
        "return_token_type_ids": True,
    },
]


def engine_call(runner, texts, pairs, options):
    try:
        result = runner.result(runner.engine.submit_encode, texts, pairs, EncodeOptions(**options))
    except ServiceError as exc:
        return exc
    arrays = {key: value.dtype for key, value in result.data.items() if isinstance(value, np.ndarray)}
    assert all(dtype == np.int64 for dtype in arrays.values()), arrays  # lists would hide a float array
    return to_lists(result)


def check_parity(runner, reference, texts, pairs, options):
    """The engine's answer equals transformers' (or both refuse); returns transformers' answer."""
    theirs = reference_call(reference, texts, pairs, options)
    ours = engine_call(runner, texts, pairs, options)
    if isinstance(theirs, BaseException):
        assert isinstance(ours, ServiceError), f"transformers refused ({theirs!r}) but the engine returned {ours}"
        assert ours.kind in (ErrorKind.TOKENIZER, ErrorKind.INVALID_REQUEST)
    else:
        assert not isinstance(ours, Exception), f"engine refused what transformers accepts: {ours!r}"
        assert_same(ours, theirs, (texts, pairs, options))
    return theirs


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("options", FIXED_CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "defaults")
def test_fixed_cases_match_transformers(engines, reference_tokenizers, corpus, family, options):
    texts = corpus["zh"][:5] + corpus["en"][:5] + TRICKY_TEXTS
    check_parity(engines[family], reference_tokenizers[family], texts, None, options)
    pairs = corpus["en"][10:15] + corpus["zh"][10:15] + TRICKY_TEXTS[::-1]
    check_parity(engines[family], reference_tokenizers[family], texts, pairs, options)


@pytest.mark.parametrize("family", FAMILIES)
@reaches_every_region
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_property_parity(engines, reference_tokenizers, family, region_tally, data):
    """Each example: one call aimed at every option region (parity.REGIONS) and one with any options."""
    reference = reference_tokenizers[family]
    region_tally.example()
    for call in draw_calls(data, reference):
        theirs = check_parity(engines[family], reference, call.texts, call.pairs, call.options)
        region_tally.record(regions_reached(reference, call, theirs))


@pytest.mark.parametrize("family", FAMILIES)
def test_long_text_parity(engines, reference_tokenizers, corpus, family):
    long_text = " ".join(corpus["en"])[:100_000]
    check_parity(engines[family], reference_tokenizers[family], [long_text, "short"], None, {"padding": True})


def test_a_tokenizer_configured_to_truncate_and_pad_on_the_left(tmp_path, corpus):
    """truncation_side and padding_side come from the tokenizer's config (none of the three families
    truncates on the left): the engine truncates, overflows and pads on the side the config says."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from service.engine.loading import DEFAULT_TOKENIZER_DIR
    from testkit.engine import EngineRunner

    left = tmp_path / "left-sided"
    shutil.copytree(DEFAULT_TOKENIZER_DIR, left)
    config = json.loads((left / "tokenizer_config.json").read_text())
    (left / "tokenizer_config.json").write_text(
        json.dumps({**config, "truncation_side": "left", "padding_side": "left"})
    )
    reference = AutoTokenizer.from_pretrained(str(left))
    assert (reference.truncation_side, reference.padding_side) == ("left", "left")
    runner = EngineRunner(str(left))
    texts, pairs = [*corpus["zh"][:6], "短"], [*corpus["en"][:6], "short"]
    try:
        for options in (
            {"truncation": True, "max_length": 12, "padding": True},
            {"truncation": "only_second", "max_length": 20, "padding": "max_length"},
            {"truncation": True, "max_length": 10, "stride": 2, "return_overflowing_tokens": True, "padding": True},
            {"truncation": "only_first", "max_length": 16, "stride": 1, "return_overflowing_tokens": True},
        ):
            check_parity(runner, reference, texts, None, options)  # only_second without pairs: both refuse
            check_parity(runner, reference, texts, pairs, options)
    finally:
        runner.close()


def test_type_ids_a_template_gives_a_single_sequence_are_read(tmp_path, corpus):
    """The engine skips reading type ids it knows to be 0 (the three families' single sequences); a tokenizer
    whose template gives a single sequence type id 1 (and its special tokens 0 and 2) is read as Rust gives it,
    with or without special tokens, overflow rows and padding included."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from service.engine.loading import DEFAULT_TOKENIZER_DIR
    from testkit.engine import EngineRunner

    typed = tmp_path / "typed-single"
    shutil.copytree(DEFAULT_TOKENIZER_DIR, typed)
    spec = json.loads((typed / "tokenizer.json").read_text())
    spec["post_processor"]["single"] = [
        {"SpecialToken": {"id": "[CLS]", "type_id": 0}},
        {"Sequence": {"id": "A", "type_id": 1}},
        {"SpecialToken": {"id": "[SEP]", "type_id": 2}},
    ]
    (typed / "tokenizer.json").write_text(json.dumps(spec))
    reference = AutoTokenizer.from_pretrained(str(typed))
    assert reference("今天")["token_type_ids"] == [0, 1, 1, 2]
    runner = EngineRunner(str(typed))
    texts = [*corpus["zh"][:6], "短", ""]
    try:
        for options in (
            {"padding": True, "return_token_type_ids": True},
            {"add_special_tokens": False, "return_token_type_ids": True, "padding": True},
            {"truncation": True, "max_length": 10, "return_overflowing_tokens": True, "padding": True},
        ):
            check_parity(runner, reference, texts, None, options)
    finally:
        runner.close()


def test_concurrent_mixed_options_are_batched_and_identical(corpus, reference_tokenizers):
    """Requests with mixed options queue while the engine is held; once it is free, those that need the same
    Rust call share one (in arrival order), and each answer is still exactly its own."""
    from service.engine import load_tokenizer
    from service.engine.encoding import plan_encode
    from testkit.engine import EngineRunner
    from testkit.gates import HOLD, Gate

    reference = reference_tokenizers["wordpiece_default"]
    gate = Gate()
    runner = EngineRunner(gate.gated(load_tokenizer(None)))
    option_sets = FIXED_CASES[:8]  # specials on and off, truncation on and off, offsets (the full encode)
    calls = [(corpus["zh"][i * 3 : i * 3 + 1 + i % 4], option_sets[i % len(option_sets)]) for i in range(64)]

    async def queued_behind_a_held_encode():
        engine = runner.engine
        held = engine.submit_encode([HOLD])
        await asyncio.get_running_loop().run_in_executor(None, gate.entered.wait, 30)
        waiting = [engine.submit_encode(t, None, EncodeOptions(**o)) for t, o in calls]
        await asyncio.sleep(0)
        assert queued_requests(engine) == len(calls)
        gate.open()
        await held
        return await asyncio.gather(*waiting, return_exceptions=True)

    try:
        results = runner.run(queued_behind_a_held_encode(), timeout=60)
        facts = tokenizer_facts(runner.engine)
    finally:
        gate.open()
        runner.close()
    for (texts, options), result in zip(calls, results, strict=True):
        assert not isinstance(result, Exception), result
        assert_same(to_lists(result), reference_call(reference, texts, None, options), options)
    # one Rust call per distinct batch key, each holding its requests' texts in arrival order
    expected_calls: dict = {}
    for texts, options in calls:
        expected_calls.setdefault(plan_encode(facts, EncodeOptions(**options)).rust_call, []).extend(texts)
    held_at = next(i for i, inputs in enumerate(gate.calls) if inputs == [HOLD])
    assert gate.calls[held_at + 1 :] == list(expected_calls.values())
    assert len(expected_calls) < len(calls)


def test_one_bad_request_does_not_fail_its_batch_mates(engines, reference_tokenizers):
    runner, reference = engines["wordpiece_default"], reference_tokenizers["wordpiece_default"]
    good = {"truncation": True, "max_length": 8, "stride": 2, "return_overflowing_tokens": True}
    # a pair whose stride is more than either side keeps: Rust panics inside the batch's call, not before it
    bad = {"truncation": True, "max_length": 8, "stride": 5, "return_overflowing_tokens": True}
    texts = ["一二三四五六七八九十一二三四五六七八九十"]

    async def together():
        return await asyncio.gather(
            runner.engine.submit_encode(texts, None, EncodeOptions(**good)),
            runner.engine.submit_encode(texts, texts, EncodeOptions(**bad)),
            runner.engine.submit_encode(texts, None, EncodeOptions(**good)),
            return_exceptions=True,
        )

    first, second, third = runner.run(together())
    assert isinstance(reference_call(reference, texts, texts, bad), BaseException)
    assert isinstance(second, ServiceError) and second.kind is ErrorKind.TOKENIZER
    expected = reference_call(reference, texts, None, good)
    assert_same(to_lists(first), expected)
    assert_same(to_lists(third), expected)


def test_a_stride_transformers_refuses_is_refused_as_it_does_before_the_call_is_sized(reference_tokenizers):
    """Refused for its stride with transformers' message, not as too large: a max_length that leaves no room
    beside one sequence's special tokens, so the bound of a long text's overflow holds it whole twice (tokenizers
    keeps it as an overflow row), over the budget; a pair alike. And a max_length below the special tokens, which
    tokenizers reads as no limit, is refused for nothing."""
    budget = 256 << 20  # (the engines fixture's tens of GiB would hold the bound: Rust would refuse it instead)
    runner = EngineRunner(None, limits=EngineLimits(max_text_chars=1_000_000, memory_budget=budget))
    reference = reference_tokenizers["wordpiece_default"]
    options = {"truncation": True, "max_length": 2, "stride": 1, "return_overflowing_tokens": True}
    long_text = ["天气很好" * 25_000]
    try:
        assert encode_bound(runner.engine, long_text, None, EncodeOptions(**options)).cost > budget
        for texts, pairs in ((long_text, None), (["今天"], ["天气很好" * 20_000])):
            theirs = reference_call(reference, texts, pairs, options)
            assert isinstance(theirs, ValueError)
            with pytest.raises(ServiceError) as refused:
                runner.result(runner.engine.submit_encode, texts, pairs, EncodeOptions(**options))
            assert refused.value.kind is ErrorKind.TOKENIZER, refused.value
            assert str(theirs).rstrip(", ") in str(refused.value)
        below = {"max_length": 1, "stride": 5}
        assert_same(
            to_lists(runner.result(runner.engine.submit_encode, ["000000"], None, EncodeOptions(**below))),
            reference_call(reference, ["000000"], None, below),
        )
    finally:
        runner.close()


def test_tokenize_and_decode_match_transformers(engines, reference_tokenizers, corpus):
    for family in FAMILIES:
        runner, reference = engines[family], reference_tokenizers[family]
        texts = corpus["zh"][:3] + corpus["en"][:3] + TRICKY_TEXTS
        assert runner.result(runner.engine.submit_tokenize, texts).tokens == [reference.tokenize(t) for t in texts]
        ids = reference(texts)["input_ids"]
        for skip in (False, True):
            decoded = runner.result(runner.engine.submit_decode, ids, DecodeOptions(skip_special_tokens=skip))
            assert decoded == reference.batch_decode(ids, skip_special_tokens=skip)


def test_tokenize_gives_one_token_and_sequence_id_per_id_like_transformers(engines, reference_tokenizers):
    """Pairs, special tokens and truncation: the tokens are BatchEncoding.tokens() of the same call (one per
    id of /encode), and without truncation exactly tokenizer.tokenize(text, pair, ...)."""
    texts = ["今天天气很好，我们去公园。", "👩‍👩‍👧‍👦 e\u0301 混合 English", "", "a " * 40]
    pairs = ["The weather is nice today.", "😀 pair 句子", "only the pair", "短"]
    cases = [
        {},
        {"add_special_tokens": True},
        {"add_special_tokens": True, "truncation": True, "max_length": 12},
        {"add_special_tokens": True, "truncation": "only_first", "max_length": 14},
        {"truncation": "longest_first", "max_length": 7},
        {"add_special_tokens": True, "max_length": 10},  # max_length alone truncates, as in transformers
    ]
    for family in FAMILIES:
        runner, reference = engines[family], reference_tokenizers[family]
        for options in cases:
            got = runner.result(
                runner.engine.submit_tokenize, texts, pairs, TokenizeOptions(**options, return_sequence_ids=True)
            )
            expected = reference(texts, pairs, **{"add_special_tokens": False, **options})
            assert got.tokens == [expected.tokens(i) for i in range(len(texts))], (family, options)
            assert got.sequence_ids == [expected.sequence_ids(i) for i in range(len(texts))], (family, options)
            assert [len(row) for row in got.tokens] == [len(row) for row in expected["input_ids"]]
            if "max_length" not in options:
                special = options.get("add_special_tokens", False)
                assert got.tokens == [
                    reference.tokenize(t, p, add_special_tokens=special) for t, p in zip(texts, pairs, strict=True)
                ]
        alone = runner.result(runner.engine.submit_tokenize, texts[:2], None, TokenizeOptions(add_special_tokens=True))
        assert alone.tokens == [reference.tokenize(t, add_special_tokens=True) for t in texts[:2]]
        assert alone.sequence_ids is None  # not asked for
        with pytest.raises(ServiceError) as refused:  # options resolve (and are refused) as an encode's
            runner.result(runner.engine.submit_tokenize, texts, pairs, TokenizeOptions(truncation="sideways"))
        assert refused.value.kind is ErrorKind.INVALID_REQUEST and "truncation must be one of" in refused.value.message
        with pytest.raises(ServiceError, match="they must match"):
            runner.result(runner.engine.submit_tokenize, texts, pairs[:1])


def test_limits_are_enforced_with_their_names(tokenizer_dirs):
    runner = EngineRunner(None, limits=EngineLimits(max_texts_per_request=3, max_text_chars=10, max_response_tokens=50))
    try:
        cases = [
            (["a"] * 4, "max_texts_per_request"),
            (["a" * 11], "max_text_chars"),
        ]
        for texts, name in cases:
            with pytest.raises(ServiceError, match=name) as info:
                runner.result(runner.engine.submit_encode, texts)
            assert info.value.kind is ErrorKind.TOO_LARGE
        with pytest.raises(ServiceError, match="max_response_tokens"):
            runner.result(runner.engine.submit_encode, ["a"], None, EncodeOptions(padding="max_length", max_length=100))
        with pytest.raises(ServiceError, match="at least one"):
            runner.result(runner.engine.submit_encode, [])
        with pytest.raises(ServiceError, match="must match"):
            runner.result(runner.engine.submit_encode, ["a", "b"], ["c"])
    finally:
        runner.close()


def test_response_limit_holds_for_ragged_padded_results_too():
    """padding="max_length" without truncation: a long text stays long, the others pad -- still bounded."""
    runner = EngineRunner(None, limits=EngineLimits(max_text_chars=1000, max_response_tokens=50))
    try:
        options = EncodeOptions(padding="max_length", max_length=10, truncation=False)
        with pytest.raises(ServiceError, match="max_response_tokens") as info:
            runner.result(runner.engine.submit_encode, ["一" * 60, "a", "a"], None, options)
        assert info.value.kind is ErrorKind.TOO_LARGE
        assert runner.result(runner.engine.submit_encode, ["一" * 20, "a"], None, options).rectangular is False
        # padded to the longest: unpadded 22 + 3 x 3 = 31 positions fit, padded 4 x 22 = 88 do not (the check
        # on the shaped answer, which neither the early padding check nor the running total can make)
        longest = EncodeOptions(padding="longest")
        with pytest.raises(ServiceError, match="max_response_tokens"):
            runner.result(runner.engine.submit_encode, ["一" * 20, "a", "a", "a"], None, longest)
    finally:
        runner.close()


def test_encode_tokenize_and_decode_share_one_admission_path():
    """One queue for every kind of work: a tokenize waits behind a held encode, a decode beyond the queue's
    room is refused at once, and a queued tokenize past the deadline times out -- the gate decides when."""
    from service.engine import load_tokenizer
    from service.engine.batching import BatchingConfig
    from testkit.engine import EngineRunner
    from testkit.gates import HOLD, Gate

    gate = Gate()
    runner = EngineRunner(
        gate.gated(load_tokenizer(None)),
        batching=BatchingConfig(max_queued_requests=1, queue_timeout_seconds=0.3),
    )

    async def scenario():
        engine = runner.engine
        held = engine.submit_encode([HOLD])
        await asyncio.get_running_loop().run_in_executor(None, gate.entered.wait, 30)
        queued = engine.submit_tokenize(["queued"])
        await asyncio.sleep(0)
        assert queued_requests(engine) == 1
        with pytest.raises(ServiceError) as refused:
            engine.submit_decode([[1, 2]])  # no room: refused at once, not queued
        with pytest.raises(ServiceError) as late:
            await queued  # still waiting when the deadline passes: the gate is closed
        gate.open()
        await held
        after = (await engine.submit_tokenize(["after"])).tokens  # the queue works again
        return refused.value.kind, late.value.kind, after

    try:
        refused, late, after = runner.run(scenario(), timeout=60)
    finally:
        gate.open()
        runner.close()
    assert refused is ErrorKind.OVERLOADED
    assert late is ErrorKind.TIMEOUT
    assert after == [["after"]]
    assert "queued" not in gate.encoded


def test_tokenize_shares_a_rust_call_with_encodes_of_the_same_settings():
    """A tokenize queued behind a held encode joins the encodes that need the same Rust call."""
    from service.engine import load_tokenizer
    from testkit.engine import EngineRunner
    from testkit.gates import HOLD, Gate

    gate = Gate()
    runner = EngineRunner(gate.gated(load_tokenizer(None)))
    full = EncodeOptions(return_offsets_mapping=True)  # the full encode_batch, no truncation: as tokenize

    async def scenario():
        engine = runner.engine
        held = engine.submit_encode([HOLD])
        await asyncio.get_running_loop().run_in_executor(None, gate.entered.wait, 30)
        tasks = [
            engine.submit_encode(["一二"], options=full),
            engine.submit_tokenize(["三四"], options=TokenizeOptions(add_special_tokens=True)),
        ]
        await asyncio.sleep(0)
        gate.open()
        await held
        return await asyncio.gather(*tasks)

    try:
        encoded, tokens = runner.run(scenario(), timeout=60)
    finally:
        gate.open()
        runner.close()
    assert tokens.tokens == [["[CLS]", "三", "四", "[SEP]"]]
    assert encoded.data["input_ids"].shape == (1, 4)
    assert ["一二", "三四"] in gate.calls  # one Rust call served both


def test_fork_guard_counts_forks_after_load(engines):
    before = ForkGuard.forks_after_load
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert ForkGuard.forks_after_load == before + 1
    assert engines["wordpiece_default"].engine.info()["parallelism"]["forks_after_load"] == before + 1


def test_available_cpus_honours_affinity():
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


def test_only_transformers_notice_of_a_missing_torch_is_dropped():
    """The server runs without torch on purpose: transformers' "PyTorch was not found" line is dropped (the
    server install tier sees none at start-up: tests/shipping/test_installs.py); every other line of it passes."""
    import logging

    from service.engine.loading import TORCH_NOTICE_FILTER

    transformers_logger = logging.getLogger("transformers")
    assert TORCH_NOTICE_FILTER in transformers_logger.filters
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    transformers_logger.addHandler(handler)
    try:
        transformers_logger.warning(
            "PyTorch was not found. Models won't be available and only tokenizers, configuration and file/data "
            "utilities can be used."
        )
        transformers_logger.warning("some other advice")
    finally:
        transformers_logger.removeHandler(handler)
    assert seen == ["some other advice"]
