"""Conversations tokenized through the service with ``ChatTokenizeFunction`` in ``datasets.map``, handed to TRL's
``SFTTrainer`` as an already tokenized dataset: the dataset it prepares and the batches its data collator yields equal
those of ``SFTTrainer`` tokenizing the raw conversations itself (TRL's own code is the oracle; a tiny model made from
a config, on CPU, nothing from the hub)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from service.client import TokenizerClient
from testkit.chat import fixed_conversations

FAMILY = "wordpiece_default"  # it has a pad token, which TRL's collator needs


def conversations(corpus: dict[str, list[str]]) -> list[list[dict[str, Any]]]:
    """Real texts as turns, and the fixed conversations whose messages Arrow stores as they are (string content)."""
    made = [
        [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        for question, answer in zip(corpus["zh"][:12], corpus["en"][:12], strict=False)
    ]
    plain = [
        [{"role": message["role"], "content": message["content"]} for message in conversation]
        for conversation in fixed_conversations()
        if all(isinstance(message.get("content"), str) and message["content"] for message in conversation)
        and any(message["role"] == "assistant" for message in conversation)
    ]
    return made + plain


def trainer(dataset: Any, tokenizer: Any, output_dir: str, assistant_only_loss: bool) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        pad_token_id=tokenizer.pad_token_id,
    )
    args = SFTConfig(
        output_dir=output_dir,
        assistant_only_loss=assistant_only_loss,
        max_length=96,
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        dataset_num_proc=None,
    )
    return SFTTrainer(model=LlamaForCausalLM(config), args=args, train_dataset=dataset, processing_class=tokenizer)


def batches(trainer: Any) -> list[Any]:
    """The batches the trainer's own DataLoader (its sampler, its data collator) yields, the sampler seeded alike."""
    torch.manual_seed(0)
    return list(trainer.get_train_dataloader())


@pytest.mark.parametrize(("labels", "num_proc"), [(False, None), (True, 2)])  # 2: forked map workers
def test_sft_trainer_takes_the_service_tokenized_dataset_as_its_own(
    chat_servers, chat_tokenizer_dirs, corpus, tmp_path, labels, num_proc
):
    import datasets
    from transformers import AutoTokenizer

    datasets.disable_progress_bars()
    tokenizer = AutoTokenizer.from_pretrained(str(chat_tokenizer_dirs[FAMILY]))
    raw = datasets.Dataset.from_dict({"messages": conversations(corpus)})
    client = TokenizerClient(chat_servers[FAMILY].url)
    tokenized = raw.map(
        client.chat_tokenize_function(labels=labels),
        batched=True,
        batch_size=5,
        num_proc=num_proc,
        remove_columns=["messages"],
    )

    theirs = trainer(raw, tokenizer, str(tmp_path / "theirs"), assistant_only_loss=True)
    # TRL refuses assistant_only_loss for a dataset that is not conversations: the masks (or labels) carry it
    ours = trainer(tokenized, tokenizer, str(tmp_path / "ours"), assistant_only_loss=False)
    prepared = ["input_ids", "labels"]  # what TRL prepared (it keeps the raw messages beside them, unused)
    assert ours.train_dataset.column_names == prepared
    assert ours.train_dataset.features == theirs.train_dataset.select_columns(prepared).features
    assert ours.train_dataset.to_dict() == theirs.train_dataset.select_columns(prepared).to_dict()
    ours_batches, theirs_batches = batches(ours), batches(theirs)
    assert len(ours_batches) == len(theirs_batches) == 2
    for got, expected in zip(ours_batches, theirs_batches, strict=True):
        assert list(got) == list(expected)
        for key, value in expected.items():
            assert torch.equal(got[key], value) if isinstance(value, torch.Tensor) else got[key] == value, key
    assert (torch.tensor(ours.train_dataset[0]["labels"]) == -100).any()  # the user's turn does not count
