"""DataLoader ``collate_fn`` s that tokenize through the service: :class:`Collator` for texts (padded batches, or
padding-free packed ones) and :class:`ChatCollator` for conversations (supervised fine-tuning batches, as TRL's).
Each holds a client, which pickles without connections: each DataLoader worker opens its own. torch is imported only
when a batch is collated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..suggestions import check_options, keyword_only_parameters
from ..wire import CHAT_OPTIONS, ENCODE_OPTIONS, LENGTHS_BATCH_TEXTS, LENGTHS_OPTIONS
from .packing import PACKING_OPTIONS, flatten
from .protocol import SFT_CHAT_OPTIONS, TokenizerLike

if TYPE_CHECKING:
    from .sampling import TokenBudgetBatchSampler

__all__ = ["Collator", "ChatCollator"]

# With packing, only the options that decide which tokens a text becomes: the packed batch holds no padding or masks.
_PACKING_ENCODE_OPTIONS = frozenset(LENGTHS_OPTIONS) - {"return_overflowing_tokens"}


class _TokenBudget:
    """What both collators share: :meth:`batch_sampler`, over their own counting and batch shape."""

    def _count_items(self, items: list[Any]) -> list[int]:
        """The token count of each item, as this collator encodes it: one request."""
        raise NotImplementedError

    def _budget_shape(self) -> tuple[bool, int | None]:
        """(whether batches are packed, the multiple padding rounds up to); ValueError where a budget cannot help."""
        raise NotImplementedError

    def batch_sampler(
        self,
        dataset: Any,
        *,
        max_tokens: int,
        count_chunk_size: int = LENGTHS_BATCH_TEXTS,
        share_counting: bool = True,
        **sampler_options: Any,
    ) -> TokenBudgetBatchSampler:
        """A :class:`~service.data.TokenBudgetBatchSampler` for ``dataset`` (a list, or anything with ``len`` and
        integer indexing) and this collator: every item, read as a batch is, is counted through the service once,
        ``count_chunk_size`` items per request, with this collator's options (truncation included). In a
        ``torch.distributed`` job (``share_counting``, the default) each rank counts its share and the ranks exchange
        the counts: every rank must call this. The sampler packs (sum of lengths up to ``max_tokens``) when this
        collator packs (``packing``, ``padding_free``), else bounds rows x longest (with its ``pad_to_multiple_of``).
        ``sampler_options``: ``max_batch_size``, ``shuffle``, ``seed``, ``mega_batch_size``, ``num_replicas``,
        ``rank``, ``drop_last``.
        """
        from .sampling import TokenBudgetBatchSampler, count_across_ranks

        for name in ("packing", "pad_to_multiple_of", "max_length", "dataset"):
            if name in sampler_options:
                raise TypeError(f"{name} follows the collator (and the dataset) here; set it on the collator")
        if isinstance(count_chunk_size, bool) or not isinstance(count_chunk_size, int) or count_chunk_size < 1:
            raise ValueError(f"count_chunk_size must be an int >= 1, not {count_chunk_size!r}")
        packing, pad_to_multiple_of = self._budget_shape()

        def count(start: int, step: int) -> list[int]:
            indices = range(start, len(dataset), step)
            lengths: list[int] = []
            for first in range(0, len(indices), count_chunk_size):  # a chunk of items at a time: none is kept
                lengths.extend(self._count_items([dataset[i] for i in indices[first : first + count_chunk_size]]))
            return lengths

        lengths = count_across_ranks(count, len(dataset), share_counting)
        if not packing:
            sampler_options["pad_to_multiple_of"] = pad_to_multiple_of
        return TokenBudgetBatchSampler(
            lengths, max_tokens=max_tokens, packing=packing, dataset=dataset, **sampler_options
        )


class Collator(_TokenBudget):
    """``collate_fn(batch) -> dict`` of tensors, made by ``client.collator(...)``; it pickles as its client's
    settings, so forked and spawned DataLoader workers each use their own connections.

    A batch is a list of ``str``, of ``(text, pair)`` tuples, or of dicts, whose fields other than the text(s) are
    collated as ``torch.utils.data.default_collate`` would and added to the result (not under a key of the result).
    Padded (default): int64 tensors as ``tokenizer(texts, ..., return_tensors="pt")``. ``packing=True``: one
    padding-free row, exactly as transformers' ``DataCollatorWithFlattening`` gives it for the texts' ``input_ids``:
    ``input_ids`` and ``labels`` of shape ``[1, total]``, ``position_ids``, and optionally ``cu_seq_lens_q/k``,
    ``max_length_q/k`` and ``seq_idx``; with :meth:`batch_sampler` each batch packs up to a token budget.

    Args:
        client: the :class:`~service.client.TokenizerClient` (any :class:`~.protocol.TokenizerLike`) that encodes.
        text_field: the dict key holding the text, for batches of dicts.
        pair_field: the dict key holding the second text of a pair, if any.
        packing: one padding-free row per batch instead of padded rows.
        **options: encode options (``padding``, default True; ``truncation``, ``max_length``...); with ``packing``,
            ``add_special_tokens``, ``truncation``, ``max_length`` and ``stride`` only, and the options of
            ``DataCollatorWithFlattening`` with its names and defaults (``return_position_ids=True``,
            ``separator_id=-100``, ``return_flash_attn_kwargs=False``, ``return_seq_idx=False``,
            ``position_ids_start=0``).

    Raises:
        TypeError: an unknown option, ``return_tensors`` (always torch), or an option packing has no use for.
        InvalidRequest: when a batch is collated, options the tokenizer refuses (its reason).
        ValueError: an empty batch, or a dict field that clashes with an output key.

    Example:
        ```python
        collate = client.collator(padding="longest", truncation=True, max_length=128)
        loader = DataLoader(rows, batch_size=32, num_workers=2, collate_fn=collate)  # rows: dicts with "text"
        batch = next(iter(loader))  # input_ids, token_type_ids, attention_mask, and the rows' other fields
        ```
    """

    def __init__(
        self,
        client: TokenizerLike,
        *,
        text_field: str = "text",
        pair_field: str | None = None,
        packing: bool = False,
        **options: Any,
    ) -> None:
        from ..extras import require_module

        require_module("torch", "torch", "a collator (client.collator())")  # when made, not at its first batch
        if "return_tensors" in options:
            raise TypeError("a collator always returns torch tensors; return_tensors cannot be set")
        check_options("Collator()", options, [*_COLLATOR_SETTINGS, *ENCODE_OPTIONS, *PACKING_OPTIONS])
        self.client = client
        self.text_field = text_field
        self.pair_field = pair_field
        self.packing = bool(packing)
        packing_options = {name: options.pop(name) for name in list(options) if name in PACKING_OPTIONS}
        if self.packing:
            refused = set(options) - _PACKING_ENCODE_OPTIONS
            if refused:
                raise TypeError(
                    f"packing=True makes padding-free rows of input_ids, labels and positions: {sorted(refused)} "
                    f"do not apply; the encode options it takes are {sorted(_PACKING_ENCODE_OPTIONS)}"
                )
            separator = packing_options.get("separator_id", PACKING_OPTIONS["separator_id"])
            if isinstance(separator, bool) or not isinstance(separator, int):
                raise TypeError(f"separator_id must be an int, not {separator!r}")
            self.packing_options = {**PACKING_OPTIONS, **packing_options}
            # only input_ids travel: no mask, no type ids
            self.options = {"return_attention_mask": False, "return_token_type_ids": False, **options}
        else:
            if packing_options:
                raise TypeError(f"{sorted(packing_options)} apply to packed batches only: pass packing=True")
            self.packing_options = {}
            self.options = {"padding": True, **options}

    def __call__(self, batch: Sequence[Any]) -> dict[str, Any]:
        if not batch:
            raise ValueError("cannot collate an empty batch")
        texts, pairs, extras = self._inputs(batch)
        if self.packing:
            rows = self.client.encode(texts, pairs, **self.options)["input_ids"]
            encoded = flatten(rows, **self.packing_options)
        else:
            encoded = dict(self.client.encode(texts, pairs, return_tensors="pt", **self.options))
        from .sft import collate_fields

        encoded.update(collate_fields(extras or [], taken=list(encoded)))
        return encoded

    @property
    def length_options(self) -> dict[str, Any]:
        """The options of ``client.lengths`` that count tokens as this collator encodes them."""
        return {name: self.options[name] for name in LENGTHS_OPTIONS if name in self.options}

    def _budget_shape(self) -> tuple[bool, int | None]:
        if not self.packing and self.options.get("padding") not in (True, "longest"):
            raise ValueError(
                "a token budget groups texts for padding='longest' (or packing=True); this collator pads with "
                f"padding={self.options.get('padding')!r}, where every batch costs the same per row"
            )
        return self.packing, self.options.get("pad_to_multiple_of")

    def _count_items(self, items: list[Any]) -> list[int]:
        texts, pairs, _ = self._inputs(items)
        return list(self.client.lengths(texts, pairs, batch_size=len(texts), **self.length_options))

    def _inputs(self, batch: Sequence[Any]) -> tuple[list[str], list[str] | None, list[dict[str, Any]] | None]:
        """(texts, pairs, the other fields of dict items) of a batch."""
        first = batch[0]
        if isinstance(first, str):
            return list(batch), None, None
        if isinstance(first, (tuple, list)):
            if not all(isinstance(item, (tuple, list)) and len(item) == 2 for item in batch):
                raise TypeError("a batch of tuples must hold (text, pair) pairs; for other fields use dicts")
            return [item[0] for item in batch], [item[1] for item in batch], None
        if isinstance(first, Mapping):
            return self._split_dicts(batch)
        raise TypeError(f"cannot collate a batch of {type(first).__name__}: expected str, (text, pair) or dict")

    def _split_dicts(self, batch: Sequence[Any]) -> tuple[list[str], list[str] | None, list[dict[str, Any]]]:
        texts: list[str] = []
        pairs: list[str] | None = [] if self.pair_field is not None else None
        extras: list[dict[str, Any]] = []
        taken = {self.text_field, self.pair_field}
        for i, item in enumerate(batch):
            if not isinstance(item, Mapping):
                raise TypeError(f"batch[{i}] is a {type(item).__name__}; a batch must not mix dicts with other items")
            try:
                texts.append(item[self.text_field])
                if pairs is not None:
                    pairs.append(item[self.pair_field])
            except KeyError as exc:
                raise KeyError(
                    f"batch[{i}] has no field {exc.args[0]!r} (fields: {sorted(item)}); "
                    "set text_field=/pair_field= on the collator"
                ) from None
            extras.append({k: v for k, v in item.items() if k not in taken})
        return texts, pairs, extras

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in {**self.options, **self.packing_options}.items())
        packing = ", packing=True" if self.packing else ""
        return (
            f"Collator({self.client!r}, text_field={self.text_field!r}, pair_field={self.pair_field!r}{packing}, "
            f"{options})"
        )


class ChatCollator(_TokenBudget):
    """``collate_fn(batch) -> dict`` of tensors for supervised fine-tuning on conversations: what TRL's
    ``SFTTrainer`` makes of them (its dataset preparation, then ``DataCollatorForLanguageModeling``), tokenized by
    the service. Made by ``client.chat_collator(...)``; it pickles as :class:`Collator` does.

    A batch is a list of dict rows whose ``messages_field`` holds a conversation (a list of messages), or of bare
    conversations; the rows' other fields are collated as ``default_collate`` does and added to the result. A
    batch's conversations are encoded in one ``/chat/encode`` request (ragged binary), then
    :func:`service.data.sft.collate_sft` makes ``input_ids``, ``labels`` (-100 where the token does not count, and on
    padding) and ``attention_mask`` (or a ``padding_free`` row with flash-attention's boundaries).

    Args:
        client: the :class:`~service.client.TokenizerClient` (any :class:`~.protocol.TokenizerLike`) that encodes
            (the async client's ``chat_collator()`` gives its sync twin).
        messages_field: the dict key holding a row's conversation.
        pad_token_id: the id of padding (default: the served tokenizer's pad token, else its eos token, as TRL's,
            read from ``/info`` once per process).
        assistant_only_loss: labels only where the assistant wrote the token (TRL's default); False: every real token.
        padding_free: one row per batch with ``position_ids`` instead of padded rows.
        pad_to_multiple_of: pad each batch's length up to a multiple of this.
        padding_side: ``"right"`` (TRL's default) or ``"left"``.
        return_position_ids: add ``position_ids`` to padded batches too.
        **chat_options: TRL's tokenize step's (``service.data.protocol.SFT_CHAT_OPTIONS``): ``tools``,
            ``documents``, ``chat_template`` (a name), ``chat_template_kwargs``, ``assistant_masks_from``, and
            ``truncation`` with ``max_length`` (TRL's ``max_length``, which keeps each conversation's start).

    Raises:
        TypeError: a chat option TRL's tokenize step does not take; a row that is neither a dict nor a conversation.
        KeyError: a row without ``messages_field``.
        ValueError: a ``padding_side`` or ``pad_to_multiple_of`` out of range, an empty batch, or a field that
            clashes with an output key.
        InvalidRequest: when a batch is collated, what the service refuses (a template without generation
            markers with masks from ``"generation"``, a conversation the template refuses), naming the row.

    Example:
        ```python
        collate = client.chat_collator(truncation=True, max_length=2048)
        loader = DataLoader(rows, batch_size=16, num_workers=2, collate_fn=collate)  # rows: {"messages": [...]}
        batch = next(iter(loader))  # input_ids, labels (-100 where the loss does not count), attention_mask
        ```
    """

    def __init__(
        self,
        client: TokenizerLike,
        *,
        messages_field: str = "messages",
        pad_token_id: int | None = None,
        assistant_only_loss: bool = True,
        padding_free: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str = "right",
        return_position_ids: bool = False,
        **chat_options: Any,
    ) -> None:
        from ..extras import require_module

        require_module("torch", "torch", "a chat collator (client.chat_collator())")
        unknown = set(chat_options) - set(SFT_CHAT_OPTIONS)
        if unknown and unknown <= set(CHAT_OPTIONS):
            why = (
                "the collator encodes without padding and pads each batch itself, and asks for assistant masks "
                "when assistant_only_loss is set"
            )
            raise TypeError(f"{sorted(unknown)}: {why}; the chat options it takes are {list(SFT_CHAT_OPTIONS)}")
        check_options("ChatCollator()", chat_options, [*_CHAT_COLLATOR_SETTINGS, *SFT_CHAT_OPTIONS])
        from .sft import check_padding

        check_padding(padding_side, pad_to_multiple_of)
        self.client = client
        self.messages_field = messages_field
        self.pad_token_id = pad_token_id
        self.sft_options: dict[str, Any] = {
            "assistant_only_loss": bool(assistant_only_loss),
            "padding_free": bool(padding_free),
            "pad_to_multiple_of": pad_to_multiple_of,
            "padding_side": padding_side,
            "return_position_ids": bool(return_position_ids),
        }
        self.chat_options = dict(chat_options)

    def __call__(self, batch: Sequence[Any]) -> dict[str, Any]:
        if not batch:
            raise ValueError("cannot collate an empty batch")
        from .sft import split_conversations

        conversations, others = split_conversations(batch, self.messages_field)
        masks = self.sft_options["assistant_only_loss"]
        encoded = self.client.chat_encode_ragged(
            conversations, return_assistant_tokens_mask=masks, return_attention_mask=False, **self.chat_options
        )
        keys = ("input_ids", "assistant_masks") if masks else ("input_ids",)
        rows = [dict(zip(keys, row, strict=True)) for row in zip(*map(encoded.rows, keys), strict=True)]
        from .sft import collate_fields, collate_sft

        collated = collate_sft(rows, pad_token_id=self._pad_token_id(), **self.sft_options)
        collated.update(collate_fields(others, taken=list(collated)))
        return collated

    def _pad_token_id(self) -> int:
        if self.pad_token_id is None:
            info = self.client.info()
            pad = info.get("pad_token_id")
            if pad is None:
                pad = info.get("special_token_ids", {}).get("eos_token")
            if pad is None:
                raise ValueError(
                    "the served tokenizer has neither a pad token nor an eos token: pass pad_token_id= to the collator"
                )
            self.pad_token_id = int(pad)
        return self.pad_token_id

    def _budget_shape(self) -> tuple[bool, int | None]:
        return self.sft_options["padding_free"], self.sft_options["pad_to_multiple_of"]

    def _count_items(self, items: list[Any]) -> list[int]:
        from .sft import split_conversations

        conversations, _ = split_conversations(items, self.messages_field)
        encoded = self.client.chat_encode_ragged(conversations, return_attention_mask=False, **self.chat_options)
        return [int(n) for n in encoded.row_lengths.tolist()]

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in {**self.sft_options, **self.chat_options}.items())
        return f"ChatCollator({self.client!r}, messages_field={self.messages_field!r}, {options})"


# their own settings: a misspelt one lands in their **options
_COLLATOR_SETTINGS = keyword_only_parameters(Collator.__init__)
_CHAT_COLLATOR_SETTINGS = keyword_only_parameters(ChatCollator.__init__)
