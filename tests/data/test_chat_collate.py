"""The client's SFT collation (service/data/sft.py) against TRL's own code: its dataset preparation (which builds
``labels`` from ``assistant_masks``) and its ``DataCollatorForLanguageModeling``, padded and padding-free, fed the
in-process features of real conversations."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.data.sft import IGNORE_INDEX, SFT_OPTIONS, collate_fields, collate_sft, split_conversations
from testkit.chat import TEMPLATES, conversation_strategy, fixed_conversations, with_template
from testkit.families import FAMILIES


@pytest.fixture(scope="module")
def trl() -> Any:
    """TRL's SFT trainer module (imported here: it takes seconds), with datasets' progress bars off."""
    import datasets
    from trl.trainer import sft_trainer

    datasets.disable_progress_bars()
    return sft_trainer


def features(tokenizer: Any, conversations: list, masks: bool) -> list[dict[str, list[int]]]:
    """What TRL's tokenize step keeps of each in-process ``apply_chat_template`` (input_ids, assistant_masks)."""
    rows = []
    for conversation in conversations:
        out = tokenizer.apply_chat_template(conversation, return_assistant_tokens_mask=masks)
        rows.append({key: list(out[key]) for key in ("input_ids", "assistant_masks") if key in out})
    return rows


def trl_batch(
    trl: Any, rows: list[dict[str, list[int]]], max_length: int | None = None, **collator_options: Any
) -> dict[str, Any]:
    """TRL's SFTTrainer._prepare_dataset on the features (labels from the masks; truncated to ``max_length``,
    keeping the start, as its default), then its collator."""
    import datasets

    trainer = types.SimpleNamespace(completion_only_loss=False)  # what _prepare_dataset reads of the trainer
    args = types.SimpleNamespace(
        max_length=max_length, truncation_mode="keep_start", dataset_num_proc=None, shuffle_dataset=False
    )
    prepared = trl.SFTTrainer._prepare_dataset(
        trainer, datasets.Dataset.from_list(rows), None, args, False, None, "train"
    )
    collator = trl.DataCollatorForLanguageModeling(**collator_options)
    return dict(collator(list(prepared)))


def assert_same_batch(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert list(ours) == list(theirs)
    for key, value in theirs.items():
        if isinstance(value, torch.Tensor):
            assert isinstance(ours[key], torch.Tensor) and ours[key].dtype == value.dtype, key
            assert torch.equal(ours[key], value), (key, ours[key], value)
        else:
            assert type(ours[key]) is type(value) and ours[key] == value, key


def chatml(reference_tokenizers: dict[str, Any], family: str) -> Any:
    return with_template(reference_tokenizers[family], TEMPLATES["chatml_generation"])


COLLATOR_CASES = [
    {},
    {"pad_to_multiple_of": 8},
    {"return_position_ids": True},
    {"padding_free": True},
    {"padding_free": True, "pad_to_multiple_of": 16},
]


@pytest.mark.parametrize("assistant_only_loss", [True, False])
@pytest.mark.parametrize("family", FAMILIES)
def test_fixed_conversations_collate_as_trl(trl, reference_tokenizers, family, assistant_only_loss):
    tokenizer = chatml(reference_tokenizers, family)
    rows = features(tokenizer, fixed_conversations(), masks=assistant_only_loss)
    for options in COLLATOR_CASES:
        theirs = trl_batch(trl, rows, pad_token_id=tokenizer.pad_token_id, **options)
        ours = collate_sft(
            rows, pad_token_id=tokenizer.pad_token_id, assistant_only_loss=assistant_only_loss, **options
        )
        assert_same_batch(ours, theirs)
        if assistant_only_loss:  # the labels are not all ignored: some assistant tokens count
            assert (ours["labels"] != IGNORE_INDEX).any()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    family=st.sampled_from(FAMILIES),
    conversations=st.lists(conversation_strategy(long_turns=False), min_size=1, max_size=5),
    options=st.sampled_from(COLLATOR_CASES),
)
def test_generated_conversations_collate_as_trl(trl, reference_tokenizers, family, conversations, options):
    tokenizer = chatml(reference_tokenizers, family)
    rows = features(tokenizer, conversations, masks=True)
    theirs = trl_batch(trl, rows, pad_token_id=tokenizer.pad_token_id, **options)
    assert_same_batch(collate_sft(rows, pad_token_id=tokenizer.pad_token_id, **options), theirs)


@pytest.mark.parametrize("family", FAMILIES)
def test_left_padding_is_trls_pad_on_the_left(trl, reference_tokenizers, family):
    """TRL's collator pads right; a left-padded batch is its ``pad(..., padding_side="left")`` of the same rows."""
    from trl.trainer.utils import pad

    tokenizer = chatml(reference_tokenizers, family)
    rows = features(tokenizer, fixed_conversations(), masks=True)
    right = trl_batch(trl, rows, pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=8)
    ours = collate_sft(rows, pad_token_id=tokenizer.pad_token_id, pad_to_multiple_of=8, padding_side="left")
    lengths = right["attention_mask"].sum(1).tolist()
    for key, pad_value in (("input_ids", tokenizer.pad_token_id), ("labels", IGNORE_INDEX), ("attention_mask", 0)):
        unpadded = [row[:n] for row, n in zip(right[key], lengths, strict=True)]
        assert torch.equal(ours[key], pad(unpadded, pad_value, padding_side="left", pad_to_multiple_of=8)), key
    assert ours["attention_mask"][:, 0].tolist() != ours["attention_mask"][:, -1].tolist()  # some row was padded


def test_labels_follow_the_masks_and_never_the_padding():
    rows = [{"input_ids": [5, 6, 7, 8], "assistant_masks": [0, 1, 1, 0]}, {"input_ids": [9], "assistant_masks": [1]}]
    batch = collate_sft(rows, pad_token_id=0, return_tensors="np")
    assert batch["labels"].tolist() == [[-100, 6, 7, -100], [9, -100, -100, -100]]
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8], [9, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]
    left = collate_sft(rows, pad_token_id=0, padding_side="left", assistant_only_loss=False, return_tensors="np")
    assert left["labels"].tolist() == [[5, 6, 7, 8], [-100, -100, -100, 9]]
    free = collate_sft(rows, pad_token_id=0, padding_free=True, return_tensors="np")
    assert free["labels"].tolist() == [[-100, 6, 7, -100, -100]]  # a conversation's first token: no predecessor
    assert free["position_ids"].tolist() == [[0, 1, 2, 3, 0]]
    assert set(SFT_OPTIONS) <= set(collate_sft.__kwdefaults__)
    assert all(collate_sft.__kwdefaults__[name] == value for name, value in SFT_OPTIONS.items())


def test_refusals_say_what_to_fix():
    with pytest.raises(ValueError, match="row 1: assistant_only_loss needs each row's assistant_masks"):
        collate_sft([{"input_ids": [1], "assistant_masks": [1]}, {"input_ids": [2]}], pad_token_id=0)
    with pytest.raises(ValueError, match="row 0: assistant_masks has 1 values for 2 input_ids"):
        collate_sft([{"input_ids": [1, 2], "assistant_masks": [1]}], pad_token_id=0)
    with pytest.raises(ValueError, match="no tokens"):
        collate_sft([{"input_ids": [], "assistant_masks": []}], pad_token_id=0, padding_free=True)
    with pytest.raises(ValueError, match="padding_side"):
        collate_sft([{"input_ids": [1]}], pad_token_id=0, padding_side="up", assistant_only_loss=False)


def test_rows_split_into_conversations_and_fields_collated_as_default_collate():
    conversation = [{"role": "user", "content": "hi"}]
    batch = [{"messages": conversation, "id": 1, "score": 0.5}, {"messages": conversation, "id": 2, "score": 1.5}]
    conversations, others = split_conversations(batch)
    assert conversations == [conversation, conversation] and others[0] == {"id": 1, "score": 0.5}
    collated = collate_fields(others, taken=("input_ids", "labels"))
    from torch.utils.data import default_collate

    expected = default_collate(others)
    assert list(collated) == list(expected) and all(torch.equal(collated[k], expected[k]) for k in expected)
    assert split_conversations([conversation]) == ([conversation], [{}]) and collate_fields([{}]) == {}
    with pytest.raises(KeyError, match="set messages_field="):
        split_conversations([{"chat": conversation}])
    with pytest.raises(ValueError, match=r"\['labels'\] clash"):
        collate_fields([{"labels": 1}], taken=("labels",))
    assert np.asarray(collated["id"]).tolist() == [1, 2]
