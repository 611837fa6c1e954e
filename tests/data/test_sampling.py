"""TokenBudgetBatchSampler on its own: properties over random lengths and settings (hypothesis), bad input,
import without torch, and its memory bound. Its use in DataLoaders through the service: test_packing.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.data import TokenBudgetBatchSampler
from testkit.servers import REPO


@st.composite
def sampler_setups(draw):
    lengths = draw(st.lists(st.integers(0, 300), min_size=0, max_size=300))
    packing = draw(st.booleans())
    pad_to_multiple_of = None if packing else draw(st.sampled_from([None, 1, 8]))
    longest = max([max(n, 1) for n in lengths], default=1)
    if pad_to_multiple_of:
        longest = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
    options = {
        "max_tokens": draw(st.integers(longest, longest * 40)),
        "max_batch_size": draw(st.sampled_from([None, 1, 2, 7, 64])),
        "packing": packing,
        "pad_to_multiple_of": pad_to_multiple_of,
        "shuffle": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**32)),
        "mega_batch_size": draw(st.sampled_from([None, 1, 5, 50, 10_000])),
        "drop_last": draw(st.booleans()),
    }
    replicas = draw(st.integers(1, 8))
    if len(lengths) < replicas and not options["drop_last"]:
        replicas = max(1, len(lengths))
    return lengths, replicas, options


def expected_cost(lengths, batch, packing, multiple) -> int:
    costs = [max(lengths[i], 1) for i in batch]
    if packing:
        return sum(costs)
    longest = max(costs)
    if multiple:
        longest = -(-longest // multiple) * multiple
    return longest * len(batch)


def epoch_of(lengths, replicas, options, epoch) -> list[list[list[int]]]:
    """Each rank's batches of ``epoch``, each rank from its own sampler, as on a real job."""
    ranks = []
    for rank in range(replicas):
        sampler = TokenBudgetBatchSampler(lengths, num_replicas=replicas, rank=rank, **options)
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        ranks.append(batches)
    return ranks


@settings(max_examples=300, deadline=None)
@given(setup=sampler_setups(), epoch=st.integers(0, 3))
def test_properties_of_every_epoch_on_every_rank_set(setup, epoch):
    lengths, replicas, options = setup
    ranks = epoch_of(lengths, replicas, options, epoch)

    # every rank the same number of batches: DDP never waits for a rank that has run out
    assert len({len(batches) for batches in ranks}) == 1
    for batches in ranks:
        for batch in batches:
            assert batch and all(isinstance(i, int) for i in batch)
            # the budget is never exceeded, by the sampler's own measure and by ours
            cost = expected_cost(lengths, batch, options["packing"], options["pad_to_multiple_of"])
            assert cost <= options["max_tokens"]
            assert TokenBudgetBatchSampler(lengths, **options).batch_cost(batch) == cost
            if options["max_batch_size"]:
                assert len(batch) <= options["max_batch_size"]

    # every index exactly once per epoch across the rank set (drop_last: at most once)
    seen = Counter(i for batches in ranks for batch in batches for i in batch)
    everything = set(range(len(lengths)))
    if options["drop_last"]:
        assert set(seen) <= everything and max(seen.values(), default=1) == 1
        global_batches = _global(lengths, options, epoch)
        dropped_at_most = sum(map(len, global_batches[max(0, len(global_batches) - (replicas - 1)) :]))
        assert len(seen) >= len(lengths) - dropped_at_most, (lengths, replicas, options, global_batches)
    else:
        assert set(seen) == everything
        global_batches = len(_global(lengths, options, epoch))
        if -(-global_batches // replicas) * replicas <= len(lengths):  # splitting can make the count even
            assert max(seen.values(), default=1) == 1
        else:  # nearly every item alone in its batch: a few batches repeat, as DistributedSampler pads
            repeated = sum(seen.values()) - len(lengths)
            assert repeated <= (replicas - 1) * max(map(len, ranks[0]))

    # the same seed and epoch give the same batches, on a fresh sampler
    assert epoch_of(lengths, replicas, options, epoch) == ranks


def _global(lengths, options, epoch):
    sampler = TokenBudgetBatchSampler(lengths, **{**options, "drop_last": False})
    sampler.set_epoch(epoch)
    return list(sampler)


@pytest.mark.parametrize("packing", [False, True])
@pytest.mark.parametrize("replicas", [1, 3])
def test_order_differs_per_epoch_and_per_seed(packing, replicas):
    lengths = np.random.default_rng(7).integers(1, 400, 2000)
    orders = {}
    for seed in (0, 1):
        for epoch in range(4):
            orders[seed, epoch] = epoch_of(
                lengths, replicas, {"max_tokens": 4096, "packing": packing, "seed": seed}, epoch
            )
    assert len({repr(order) for order in orders.values()}) == len(orders)  # all eight differ
    # ... and grouping by length still works in every one of them: little padding
    for ranks in orders.values():
        for batches in ranks:
            real = sum(int(lengths[b].sum()) for b in batches)
            cost = sum(expected_cost(lengths, b, packing, None) for b in batches)
            assert real / cost > 0.9


def test_grouping_cuts_padding_against_random_batches():
    """The point of it, on a long-tailed length distribution like real reviews: padded cost per real token."""
    lengths = np.minimum(np.random.default_rng(3).lognormal(3.8, 0.8, 5000).astype(int) + 2, 512)
    sampler = TokenBudgetBatchSampler(lengths, max_tokens=8192, seed=0)
    grouped = sum(expected_cost(lengths, b, False, None) for b in sampler)
    random_order = np.random.default_rng(0).permutation(len(lengths))
    rows = round(len(lengths) / len(sampler))  # random batches of the same mean size
    random_cost = sum(
        expected_cost(lengths, random_order[i : i + rows], False, None) for i in range(0, len(lengths), rows)
    )
    real = int(np.maximum(lengths, 1).sum())
    assert (grouped - real) / grouped < 0.5 * (random_cost - real) / random_cost


def test_without_shuffle_the_order_is_the_dataset_order_grouped():
    lengths = [5, 1, 9, 3, 3, 8, 2, 7]
    sampler = TokenBudgetBatchSampler(lengths, max_tokens=18, shuffle=False, mega_batch_size=4)
    assert list(sampler) == [[2, 0], [3, 1], [5, 7], [4, 6]]  # each mega-batch sorted longest first
    sampler.set_epoch(5)
    assert list(sampler) == [[2, 0], [3, 1], [5, 7], [4, 6]]


def test_packing_fills_the_budget():
    lengths = np.random.default_rng(1).integers(1, 300, 3000)
    sampler = TokenBudgetBatchSampler(lengths, max_tokens=4096, packing=True)
    fill = sum(int(lengths[b].sum()) for b in sampler) / (len(sampler) * 4096)
    assert fill > 0.97


def test_lengths_of_every_plain_kind_are_taken():
    import torch

    for lengths in ([3, 4, 5], (3, 4, 5), np.array([3, 4, 5], dtype=np.int32), torch.tensor([3, 4, 5]), [3.0, 4, 5]):
        sampler = TokenBudgetBatchSampler(lengths, max_tokens=10, shuffle=False, mega_batch_size=3)
        assert list(sampler) == [[2, 1], [0]]
    assert isinstance(sampler, torch.utils.data.Sampler)
    assert list(TokenBudgetBatchSampler([], max_tokens=10)) == []


@pytest.mark.parametrize(
    "lengths,options,error,words",
    [
        ([3], {"max_tokens": 0}, ValueError, "max_tokens must be an int >= 1, not 0"),
        ([3], {"max_tokens": -5}, ValueError, "max_tokens must be an int >= 1"),
        ([3], {"max_tokens": 2.5}, ValueError, "max_tokens must be an int >= 1"),
        ([3], {"max_tokens": True}, ValueError, "max_tokens must be an int >= 1"),
        ([3], {"max_tokens": 8, "max_batch_size": 0}, ValueError, "max_batch_size must be an int >= 1 or None"),
        ([3, 4], {"max_tokens": 8, "dataset": [0, 1, 2]}, ValueError, "lengths holds 2 counts but the dataset has 3"),
        (
            [3, 9, 4, 12],
            {"max_tokens": 8},
            ValueError,
            "2 item(s) do not fit max_tokens=8 even alone: item 1 (9 tokens), item 3 (12 tokens)",
        ),
        ([3, 7], {"max_tokens": 8, "pad_to_multiple_of": 8}, None, None),
        ([3, 9], {"max_tokens": 8, "pad_to_multiple_of": 8}, ValueError, "item 1 (9 tokens)"),
        ([[3, 4], [5, 6]], {"max_tokens": 8}, ValueError, "counts of overflow rows are not items"),
        ([[3, 4], [5]], {"max_tokens": 8}, TypeError, "counts of overflow rows are not items"),
        ([3, 4.5], {"max_tokens": 8}, TypeError, "lengths[1] is 4.5"),
        ([3, "4"], {"max_tokens": 8}, TypeError, "lengths[0] is '3'"),
        ([3, -1], {"max_tokens": 8}, ValueError, "lengths[1] is -1"),
        ([3, 4], {"max_tokens": 8, "num_replicas": 2, "rank": 2}, ValueError, "rank must be in [0, num_replicas=2)"),
        (
            [3, 4],
            {"max_tokens": 8, "num_replicas": 3, "rank": 0},
            ValueError,
            "2 items cannot give each of num_replicas=3",
        ),
        ([3], {"max_tokens": 8, "packing": True, "pad_to_multiple_of": 8}, ValueError, "no meaning with packing"),
        ([3], {"max_tokens": 8, "seed": -1}, ValueError, "seed must be an int >= 0"),
    ],
)
def test_bad_input_is_refused_at_construction_with_what_to_fix(lengths, options, error, words):
    if error is None:
        TokenBudgetBatchSampler(lengths, **options)
        return
    with pytest.raises(error) as caught:
        TokenBudgetBatchSampler(lengths, **options)
    assert words in str(caught.value)


def test_an_item_over_budget_is_fine_when_truncation_bounds_it():
    lengths = [30, 900, 45]
    with pytest.raises(ValueError, match=r"item 1 \(900 tokens\)"):
        TokenBudgetBatchSampler(lengths, max_tokens=512)
    sampler = TokenBudgetBatchSampler(lengths, max_tokens=512, max_length=512, shuffle=False, mega_batch_size=3)
    assert list(sampler) == [[1], [2, 0]] and sampler.batch_cost([1]) == 512


NO_TORCH = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # `import torch` now raises ImportError, as where it is not installed
    from service.data import TokenBudgetBatchSampler

    sampler = TokenBudgetBatchSampler([5, 1, 9, 3], max_tokens=12, num_replicas=2, rank=1, seed=3)
    sampler.set_epoch(1)
    print(type(sampler).__mro__[1].__name__, list(sampler), len(sampler))
""")


def test_importable_and_usable_without_torch():
    done = subprocess.run([sys.executable, "-c", NO_TORCH], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    base, batches, count = done.stdout.split(" ", 1)[0], *done.stdout.split(" ", 1)[1].rsplit(" ", 1)
    assert base == "object" and int(count) == len(eval(batches)) >= 1


MEMORY = textwrap.dedent("""
    import sys
    import numpy as np

    def peak_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024

    sys.modules["torch"] = None
    from service.data.sampling import TokenBudgetBatchSampler

    n = int(sys.argv[1])
    lengths = np.random.default_rng(0).integers(1, 500, n)
    before = peak_mb()
    for packing in (False, True):
        sampler = TokenBudgetBatchSampler(lengths, max_tokens=8192, packing=packing, num_replicas=8, rank=3)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for batch in sampler:
                pass
    print(peak_mb() - before)
""")


@pytest.mark.timeout(120)
def test_memory_is_bounded_per_item():
    """Lengths, costs, one epoch's permutation and this rank's batches: at most 64 bytes per item (+16 MB),
    measured as the peak RSS (VmHWM) of a process planning two epochs of a million items, both modes."""
    items = 1_000_000
    done = subprocess.run(
        [sys.executable, "-c", MEMORY, str(items)], cwd=REPO, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-2000:]
    grown_mb = float(done.stdout)
    assert grown_mb < (64 * items) / 2**20 + 16, f"planning {items} items grew the peak RSS by {grown_mb:.1f} MB"


COUNTING_MEMORY = textwrap.dedent("""
    import json, sys

    def peak_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024

    from service.client import TokenizerClient
    from service.data import TokenBudgetBatchSampler  # the sampler imports torch: not measured
    from service.transport import MockTransport, Response

    def count(request):  # the service's answer, without the service: a count per text
        texts = json.loads(request.body)["texts"]
        body = json.dumps({"lengths": [len(t) // 4 for t in texts]}).encode()
        return Response(200, {"content-type": "application/json"}, body)

    class Lazy:  # 400k texts of ~200 characters, made on the fly: ~80 MB (~200 MB as str objects) if all were kept
        def __len__(self):
            return 400_000

        def __getitem__(self, i):
            return {"text": str(i) * (200 // len(str(i))), "label": i % 2}

    client = TokenizerClient("http://127.0.0.1:9", transport=MockTransport(count))
    collate = client.collator(truncation=True, max_length=512)
    before = peak_mb()
    sampler = collate.batch_sampler(Lazy(), max_tokens=4096)
    assert len(sampler.lengths) == 400_000 and sampler.lengths[12345] == len("12345" * 40) // 4
    print(peak_mb() - before)
""")


@pytest.mark.timeout(120)
def test_counting_a_dataset_keeps_only_the_counts():
    """Collator.batch_sampler reads the dataset a chunk (4,096 items) at a time: counting 400k texts of ~200
    characters grows the peak RSS by the counts and the chunk only, under 48 MB (the texts alone are ~200 MB)."""
    done = subprocess.run(
        [sys.executable, "-c", COUNTING_MEMORY], cwd=REPO, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout) < 48, f"counting grew the peak RSS by {float(done.stdout):.1f} MB"
