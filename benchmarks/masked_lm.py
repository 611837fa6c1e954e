"""A masked language model of ``BertForMaskedLM``'s shape, in torch alone, from a ``BertConfig``'s fields: the same
parameters, tensor for tensor (the tests compare it with transformers' module). Not transformers' own module: its
modeling code loads ``tokenizers``, and ``benchmarks.gpu_feed`` keeps one training process free of the Rust tokenizer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

#: The share of real tokens a training step masks (BERT's); every chosen token becomes the mask token.
MASK_PROBABILITY = 0.15
IGNORED_LABEL = -100  # torch's cross_entropy default ignore_index, as transformers uses it


class EncoderLayer(nn.Module):
    """One post-norm transformer layer of BERT's: self-attention, then the feed-forward block."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.qkv = nn.Linear(hidden, 3 * hidden)  # BERT's query, key and value projections, as one
        self.attention_out = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=config["layer_norm_eps"])
        self.up = nn.Linear(hidden, config["intermediate_size"])
        self.down = nn.Linear(config["intermediate_size"], hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=config["layer_norm_eps"])
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])
        self.attention_dropout = config["attention_probs_dropout_prob"]

    def forward(self, hidden: torch.Tensor, attend: torch.Tensor) -> torch.Tensor:
        batch, length, width = hidden.shape
        q, k, v = self.qkv(hidden).view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        dropout = self.attention_dropout if self.training else 0.0
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=attend, dropout_p=dropout)
        attended = attended.transpose(1, 2).reshape(batch, length, width)
        hidden = self.attention_norm(hidden + self.dropout(self.attention_out(attended)))
        return self.output_norm(hidden + self.dropout(self.down(F.gelu(self.up(hidden)))))


class MaskedLM(nn.Module):
    """BertForMaskedLM's parameters and computation (logits for every position), from a BertConfig's fields."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        if config["hidden_act"] != "gelu":
            raise ValueError(f"hidden_act={config['hidden_act']!r}: this model implements BERT's 'gelu' only")
        if config["hidden_size"] % config["num_attention_heads"]:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        hidden = config["hidden_size"]
        self.words = nn.Embedding(config["vocab_size"], hidden, padding_idx=config["pad_token_id"])
        self.positions = nn.Embedding(config["max_position_embeddings"], hidden)
        self.token_types = nn.Embedding(config["type_vocab_size"], hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=config["layer_norm_eps"])
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config["num_hidden_layers"]))
        self.head = nn.Linear(hidden, hidden)
        self.head_norm = nn.LayerNorm(hidden, eps=config["layer_norm_eps"])
        self.decoder_bias = nn.Parameter(torch.zeros(config["vocab_size"]))  # the decoder's weight is self.words'
        self._initialize(config["initializer_range"])

    def _initialize(self, std: float) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=std)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)
        with torch.no_grad():
            self.words.weight[self.words.padding_idx].zero_()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits ``[batch, length, vocab]`` for every position."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        hidden = self.words(input_ids) + self.positions(positions)
        if token_type_ids is not None:
            hidden = hidden + self.token_types(token_type_ids)
        else:
            hidden = hidden + self.token_types.weight[0]
        hidden = self.dropout(self.embedding_norm(hidden))
        attend = attention_mask.bool()[:, None, None, :]  # keys a query may attend to: the real tokens
        for layer in self.layers:
            hidden = layer(hidden, attend)
        hidden = self.head_norm(F.gelu(self.head(hidden)))
        return F.linear(hidden, self.words.weight, self.decoder_bias)


def mask_tokens(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, mask_token_id: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels) for one step: MASK_PROBABILITY of the real tokens become ``mask_token_id`` in the inputs
    and keep their id in the labels; every other label is IGNORED_LABEL. Runs where the tensors are (no sync)."""
    draw = torch.rand(input_ids.shape, device=input_ids.device, generator=generator)
    chosen = (draw < MASK_PROBABILITY) & attention_mask.bool()
    labels = torch.where(chosen, input_ids, IGNORED_LABEL)
    return torch.where(chosen, mask_token_id, input_ids), labels


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the masked positions (0 when none is masked), computed without a host sync."""
    total = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORED_LABEL, reduction="sum"
    )
    return total / labels.ne(IGNORED_LABEL).sum().clamp(min=1)
