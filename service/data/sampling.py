"""``TokenBudgetBatchSampler``: batches sized by tokens, not by rows, for a DataLoader's ``batch_sampler`` (why:
docs/guides/less-padding.md), and the counting through the service that the collators' ``batch_sampler`` do.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import TYPE_CHECKING, Any

import numpy as np

from ..wire import LENGTHS_BATCH_TEXTS
from .protocol import TokenizerLike

if TYPE_CHECKING:
    _SamplerBase = object
else:
    try:  # a real torch Sampler where torch is (isinstance checks in training libraries), plain object elsewhere
        from torch.utils.data import Sampler as _SamplerBase
    except ImportError:  # pragma: no cover - depends on the environment
        _SamplerBase = object

__all__ = ["TokenBudgetBatchSampler"]

# As transformers' get_length_grouped_indices: a mega-batch holds 50 batches, or a quarter of the data when
# that is less, so that there are at least four of them.
_MEGA_BATCHES = 50


def _positive_int(value: Any, name: str, *, allow_none: bool = False, minimum: int = 1) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}{' or None' if allow_none else ''}, not {value!r}")
    return int(value)


class TokenBudgetBatchSampler(_SamplerBase):
    """Yields lists of dataset indices whose cost stays within ``max_tokens``; pass it as ``batch_sampler=``.

    A batch costs rows x its longest length, what ``padding="longest"`` makes of it (or the sum of its lengths, with
    ``packing``); an item counts at least one token. Each epoch the indices are shuffled (``seed`` and the epoch:
    :meth:`set_epoch`), cut into mega-batches, sorted by length within each and cut greedily under the budget; the
    batches are shuffled too, the one holding the longest item first (an out-of-memory shows at once).

    Distributed, every rank computes the same batches and takes every ``num_replicas``-th one; the batches with the
    most rows are split in two until their number divides evenly, so every rank gets as many (DDP never waits on a
    rank that has run out) and every index comes once per epoch across the ranks. Only when nearly every item is a
    batch of its own can splitting not get there: then up to ``num_replicas - 1`` batches repeat, as
    ``DistributedSampler`` pads.

    ``len(sampler)``: this rank's batches this epoch (it can differ by a few between epochs). It imports without
    torch, and is a ``torch.utils.data.Sampler`` where torch is. :meth:`Collator.batch_sampler` and
    :meth:`from_client` count the texts for you.

    Args:
        lengths: one token count per dataset item (a list, tuple, numpy array or 1-D tensor of ints), counted
            with the options the collator encodes with: ``client.lengths(...)``.
        max_tokens: the budget of one batch, in token positions (its cost, above).
        max_batch_size: the most rows in a batch, beside the budget.
        packing: cost a batch as the sum of its lengths (for ``client.collator(packing=True)``).
        max_length: a length above it costs ``max_length`` (the collator truncates, the counts did not).
        pad_to_multiple_of: as the collator's: the padded length is rounded up to a multiple of it.
        shuffle: False keeps the dataset order (for evaluation).
        seed: the shuffles' seed; the same on every rank.
        mega_batch_size: items sorted together (default: about 50 batches' worth, as ``LengthGroupedSampler``).
        num_replicas: ranks sharing the batches (default: ``torch.distributed``'s when initialised, else 1).
        rank: this rank (default: ``torch.distributed``'s, else 0).
        drop_last: drop the batches that do not divide evenly over the ranks instead of splitting batches.
        dataset: if given, ``lengths`` must hold one count per item of it.

    Raises:
        ValueError: at construction, naming what to fix: an item over ``max_tokens`` on its own, ``max_tokens < 1``,
            lengths that are not one int per item (nested counts of ``return_overflowing_tokens``), a count that
            differs from ``len(dataset)``, fewer items than ranks, ``pad_to_multiple_of`` with ``packing``.

    Example:
        ```python
        lengths = client.lengths(texts, truncation=True, max_length=512)
        sampler = TokenBudgetBatchSampler(lengths, max_tokens=4096, max_batch_size=64)
        loader = DataLoader(texts, batch_sampler=sampler, collate_fn=client.collator(padding="longest",
                            truncation=True, max_length=512))
        for epoch in range(3):
            sampler.set_epoch(epoch)
            for batch in loader: ...
        ```
    """

    def __init__(
        self,
        lengths: Sequence[int] | Any,
        *,
        max_tokens: int,
        max_batch_size: int | None = None,
        packing: bool = False,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        mega_batch_size: int | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        drop_last: bool = False,
        dataset: Sized | None = None,
    ) -> None:
        self.max_tokens: int = _positive_int(max_tokens, "max_tokens")
        self.max_batch_size: int | None = _positive_int(max_batch_size, "max_batch_size", allow_none=True)
        self.max_length: int | None = _positive_int(max_length, "max_length", allow_none=True)
        self.pad_to_multiple_of: int | None = _positive_int(pad_to_multiple_of, "pad_to_multiple_of", allow_none=True)
        self.seed: int = _positive_int(seed, "seed", minimum=0)
        self.packing = bool(packing)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        if self.packing and self.pad_to_multiple_of is not None:
            raise ValueError("pad_to_multiple_of has no meaning with packing=True: packed batches hold no padding")
        self.num_replicas, self.rank = _replicas(num_replicas, rank)
        self.lengths = _as_lengths(lengths)
        if dataset is not None and len(dataset) != len(self.lengths):
            raise ValueError(
                f"lengths holds {len(self.lengths)} counts but the dataset has {len(dataset)} items: "
                "give one count per item, in dataset order"
            )
        self._costs = self._item_costs()
        self._refuse_items_over_budget()
        n = len(self.lengths)
        if self.num_replicas > n > 0 and not self.drop_last:
            raise ValueError(
                f"{n} items cannot give each of num_replicas={self.num_replicas} ranks a batch; "
                "use fewer ranks, more data, or drop_last=True"
            )
        self.mega_batch_size: int = (
            _positive_int(mega_batch_size, "mega_batch_size") if mega_batch_size is not None else self._default_mega()
        )
        self.epoch = 0
        self._planned: tuple[int, list[np.ndarray]] | None = None

    @classmethod
    def from_client(
        cls,
        client: TokenizerLike,
        texts: Sequence[str] | Iterable[str],
        text_pairs: Sequence[str] | None = None,
        *,
        max_tokens: int,
        add_special_tokens: bool = True,
        truncation: bool | str | None = None,
        max_length: int | None = None,
        count_chunk_size: int = LENGTHS_BATCH_TEXTS,
        share_counting: bool = True,
        **sampler_options: Any,
    ) -> TokenBudgetBatchSampler:
        """The sampler on the counts of ``texts`` (and ``text_pairs``) through the service: ``client.lengths`` with the
        options the collator encodes with, ``count_chunk_size`` texts per request. ``sampler_options`` are the
        constructor's. ``client``: any :class:`~.protocol.TokenizerLike`, or an async client (its ``as_sync()`` twin
        counts). In a ``torch.distributed`` job (``share_counting``, the default) each rank counts its share and the
        ranks exchange the counts, so every rank must call this.
        """
        as_sync = getattr(client, "as_sync", None)  # an async client counts through its sync twin
        client = as_sync() if as_sync is not None else client
        texts = list(texts)
        pairs = None if text_pairs is None else list(text_pairs)
        options = {"add_special_tokens": add_special_tokens, "truncation": truncation, "max_length": max_length}

        def count(start: int, step: int) -> list[int]:
            mine = texts[start::step]
            if not mine:
                return []
            return list(
                client.lengths(
                    mine, None if pairs is None else pairs[start::step], batch_size=count_chunk_size, **options
                )
            )

        lengths = count_across_ranks(count, len(texts), share_counting)
        return cls(lengths, max_tokens=max_tokens, **sampler_options)

    # -- the sampler protocol ---------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Use the order of ``epoch`` (call it before each epoch, with the same value on every rank)."""
        self.epoch = _positive_int(epoch, "epoch", minimum=0)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._rank_batches():
            yield batch.tolist()

    def __len__(self) -> int:
        return len(self._rank_batches())

    def __repr__(self) -> str:
        mode = "packing" if self.packing else "padded"
        return (
            f"TokenBudgetBatchSampler({len(self.lengths)} items, max_tokens={self.max_tokens}, {mode}, "
            f"max_batch_size={self.max_batch_size}, rank {self.rank} of {self.num_replicas}, epoch {self.epoch})"
        )

    def batch_cost(self, batch: Sequence[int]) -> int:
        """What ``batch`` (indices) costs against ``max_tokens``: rows x longest (rounded up to
        ``pad_to_multiple_of``), or with packing the sum of its lengths."""
        costs = self._costs[np.asarray(batch, dtype=np.int64)]
        if self.packing:
            return int(costs.sum())
        return int(costs.max(initial=0)) * len(costs)

    # -- planning ---------------------------------------------------------------------------------------
    def _item_costs(self) -> np.ndarray:
        costs: np.ndarray = self.lengths
        if self.max_length is not None:
            costs = np.minimum(costs, self.max_length)
        costs = np.maximum(costs, 1)
        multiple = self.pad_to_multiple_of
        if multiple is not None and multiple > 1:
            costs = -(-costs // multiple) * multiple
        return costs

    def _refuse_items_over_budget(self) -> None:
        over = np.flatnonzero(self._costs > self.max_tokens)
        if not len(over):
            return
        shown = ", ".join(f"item {i} ({self.lengths[i]} tokens)" for i in over[:5].tolist())
        more = f" and {len(over) - 5} more" if len(over) > 5 else ""
        rounded = f" rounded up to pad_to_multiple_of={self.pad_to_multiple_of}" if self.pad_to_multiple_of else ""
        raise ValueError(
            f"{len(over)} item(s) do not fit max_tokens={self.max_tokens} even alone{rounded}: {shown}{more}. "
            "Raise max_tokens, truncate (count the lengths with truncation=True and max_length=..., or pass "
            "max_length= here when the collator truncates), or leave those items out of the dataset"
        )

    def _default_mega(self) -> int:
        n = len(self.lengths)
        if n == 0:
            return 1
        per_batch = max(1, self.max_tokens // max(1, int(self._costs.mean())))
        if self.max_batch_size is not None:
            per_batch = min(per_batch, self.max_batch_size)
        return per_batch * max(1, min(n // (per_batch * 4), _MEGA_BATCHES))

    def _rank_batches(self) -> list[np.ndarray]:
        if self._planned is None or self._planned[0] != self.epoch:
            batches = self._distributed(self._global_batches(self.epoch))
            self._planned = (self.epoch, batches[self.rank :: self.num_replicas])
        return self._planned[1]

    def _global_batches(self, epoch: int) -> list[np.ndarray]:
        """Every rank's batches of ``epoch``, in order: the same on every rank."""
        n = len(self.lengths)
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        cut = self._cut_packed if self.packing else self._cut_padded
        batches: list[np.ndarray] = []
        for start in range(0, n, self.mega_batch_size):
            mega = order[start : start + self.mega_batch_size]
            # longest first; ties keep their (random) order
            mega = mega[np.argsort(-self._costs[mega], kind="stable")]
            batches.extend(cut(mega))
        if self.shuffle and batches:
            batches = [batches[i] for i in rng.permutation(len(batches))]
            longest = int(np.argmax([self._costs[b[0]] for b in batches]))  # each batch is sorted: b[0] is longest
            batches[0], batches[longest] = batches[longest], batches[0]
        return batches

    def _cut_padded(self, mega: np.ndarray) -> list[np.ndarray]:
        """Sorted longest first, so a batch's first item is its longest: it takes as many rows as fit."""
        batches, start, costs = [], 0, self._costs
        while start < len(mega):
            rows = self.max_tokens // int(costs[mega[start]])
            if self.max_batch_size is not None:
                rows = min(rows, self.max_batch_size)
            batches.append(mega[start : start + rows])
            start += rows
        return batches

    def _cut_packed(self, mega: np.ndarray) -> list[np.ndarray]:
        """Sorted longest first: each batch starts with the longest items left and is topped up with the
        shortest ones, which fills the budget closely without a bin-packing search."""
        costs = self._costs[mega].tolist()
        budget, cap = self.max_tokens, self.max_batch_size or len(mega)
        batches, low, high = [], 0, len(mega) - 1
        while low <= high:
            taken, total = [low], costs[low]
            low += 1
            while low <= high and len(taken) < cap and total + costs[low] <= budget:
                taken.append(low)
                total += costs[low]
                low += 1
            while low <= high and len(taken) < cap and total + costs[high] <= budget:
                taken.append(high)
                total += costs[high]
                high -= 1
            batches.append(mega[taken])
        return batches

    def _distributed(self, batches: list[np.ndarray]) -> list[np.ndarray]:
        """Make the number of batches a multiple of ``num_replicas``: split the fullest batches (or drop the
        last ones with ``drop_last``); repeat a few only when nothing is left to split."""
        replicas = self.num_replicas
        short = -len(batches) % replicas
        if not short:
            return batches
        if self.drop_last:
            return batches[: len(batches) - (replicas - short)]
        # split the batch with the most rows in two (its first half stays, the second goes last), until even
        batches = list(batches)
        heap = [(-len(b), i) for i, b in enumerate(batches) if len(b) > 1]
        heapq.heapify(heap)
        while short and heap:
            _, i = heapq.heappop(heap)
            whole = batches[i]
            middle = (len(whole) + 1) // 2
            batches[i] = whole[:middle]
            batches.append(whole[middle:])
            for j in (i, len(batches) - 1):
                if len(batches[j]) > 1:
                    heapq.heappush(heap, (-len(batches[j]), j))
            short -= 1
        batches.extend(batches[:short])  # nothing left to split: a few batches repeat
        return batches


def _as_lengths(lengths: Any) -> np.ndarray:
    if hasattr(lengths, "detach"):  # a torch tensor
        lengths = lengths.detach().cpu().numpy()
    try:
        array = np.asarray(lengths)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"lengths must be a flat sequence of ints, one per item ({exc}); counts of overflow rows are not "
            "items: count without return_overflowing_tokens"
        ) from None
    if array.ndim != 1:
        raise ValueError(
            f"lengths must be one int per item (a flat sequence), got shape {array.shape}; counts of overflow "
            "rows are not items: count without return_overflowing_tokens"
        )
    if array.dtype.kind not in "iu" and not (array.dtype.kind == "f" and np.all(np.mod(array, 1) == 0)):
        values = array.tolist()  # not ints, nor whole floats (an empty list's): name the first that is not
        first = next(i for i, v in enumerate(values) if not _whole(v))
        raise TypeError(f"lengths must be ints; lengths[{first}] is {values[first]!r}")
    array = array.astype(np.int64, copy=False)
    negative = np.flatnonzero(array < 0)
    if len(negative):
        raise ValueError(f"lengths must be >= 0; lengths[{negative[0]}] is {array[negative[0]]}")
    return array


def _whole(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or (math.isfinite(value) and value == int(value))


def _replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        world, me = distributed_world()
        num_replicas = world if num_replicas is None else num_replicas
        rank = me if rank is None else rank
    replicas = _positive_int(num_replicas, "num_replicas")
    own = _positive_int(rank, "rank", minimum=0)
    if own >= replicas:
        raise ValueError(f"rank must be in [0, num_replicas={replicas}), not {own}")
    return replicas, own


def distributed_world() -> tuple[int, int]:
    """(world size, rank) of ``torch.distributed`` when it is initialised, else (1, 0); torch not needed."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - depends on the environment
        return 1, 0
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def count_across_ranks(count: Callable[[int, int], list[int]], items: int, share: bool = True) -> list[int]:
    """Token counts of ``items`` items; ``count(start, step)`` counts the items ``start, start + step, ...``. In an
    initialised process group (and ``share``) each rank counts every world-size-th item and one ``all_gather_object``
    gives every rank all of them: each count is asked once, not once per rank. Every rank must call it."""
    world, rank = distributed_world() if share else (1, 0)
    if world == 1:
        return count(0, 1)
    import torch.distributed as dist

    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, count(rank, world))
    lengths = [0] * items
    for start, part in enumerate(parts):
        lengths[start::world] = part
    return lengths
