"""Scenario 8, conversations: ``/chat/encode`` against in-process ``apply_chat_template`` on the same
conversations, and the chat collator in DataLoader workers against tokenizing in the collate_fn.

    .venv/bin/python -m benchmarks.chat_compare --out bench-results/chat_compare.json
    .venv/bin/python -m benchmarks.chat_compare --smoke --out /tmp/chat.json     # < 60 s

One run, bounded: it starts its own server (``python -m service serve --model <dir>`` on 127.0.0.1, a free port:
the byte-level BPE tokenizer of the tests with our ChatML template, ``{% generation %}`` markers included),
measures, stops the server by PID (also on error, Ctrl-C or SIGTERM), and writes the figures side by side.

- **Throughput** (conversations/s, batches of 64 and 256, masks asked for: what SFT needs): the service's binary
  answers -- ``chat_encode_ragged`` (unpadded rows, the chat collator's path) and ``apply_chat_template(...,
  padding=True, return_tensors="pt")`` (safetensors) -- against ``tokenizer.apply_chat_template(...)`` in this
  process (lists, and padded ``"pt"``), ``TOKENIZERS_PARALLELISM=true`` with as many Rust threads as the
  server; and the ragged answer asked by two clients at once (as DataLoader workers ask: one request renders
  while another encodes). Where the time goes: each side's parts measured alone -- rendering (``/chat/render``;
  ``tokenize=False`` in-process), encoding the rendered texts (``/encode`` binary; the tokenizer call), and
  without masks (ids only). Rounds interleave the variants; medians are reported.
- **DataLoader** (batches/s, fork, 2 workers, 32 conversations per batch, ``max_length=1024``): the chat collator
  (``client.chat_collator``) against a collate_fn calling ``apply_chat_template`` with masks and making TRL's
  labels in the worker, the tokenizer loaded in the parent with ``TOKENIZERS_PARALLELISM=false`` (what avoids
  the fork freeze today). Same batches (checked identical). It runs in a child process of its own, as the
  variable must be set before tokenizers is imported.

Conversations: built from the real texts of the other scenarios (Chinese reviews as user turns, English
paragraphs as assistant turns, a system message in one of three), 2 to 3 exchanges, ~1,500 characters rendered.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.progress import log, publish
from testkit import assets
from testkit.servers import REPO, ServerProcess

FAMILY = "bytelevel_bpe"
LOADER_OPTIONS = {"truncation": True, "max_length": 1024}


def conversations(count: int) -> list[list[dict[str, str]]]:
    """``count`` conversations of real texts, deterministic."""
    zh, en = assets.chinese_reviews(), assets.english_paragraphs()
    made = []
    for i in range(count):
        messages = [{"role": "system", "content": "You answer briefly, in the user's language."}] if i % 3 == 0 else []
        for turn in range(2 + i % 2):
            messages.append({"role": "user", "content": zh[(i * 7919 + turn * 31) % len(zh)]})
            messages.append({"role": "assistant", "content": en[(i * 104729 + turn) % len(en)][:500]})
        made.append(messages)
    return made


def chat_tokenizer_dir(root: Path) -> Path:
    from testkit.chat import chat_tokenizer_dirs

    return chat_tokenizer_dirs({FAMILY: assets.tokenizer_dirs()[FAMILY]}, root)[FAMILY]


# -- throughput ---------------------------------------------------------------------------------------------
def rate(call: Callable[[], Any], items: int, seconds: float, max_calls: int) -> float:
    """Items per second of ``call`` (``items`` per call), over at least one call and at most ``seconds``."""
    call()  # warm
    calls, started = 0, time.perf_counter()
    while calls < max_calls:
        call()
        calls += 1
        if time.perf_counter() - started >= seconds:
            break
    return items * calls / (time.perf_counter() - started)


def concurrent_rate(call: Callable[[], Any], items: int, seconds: float, max_calls: int, streams: int) -> float:
    """Items per second of ``call`` made by ``streams`` threads at once (each at most ``max_calls``)."""
    call()  # warm
    counts = [0] * streams
    started = time.perf_counter()

    def stream(index: int) -> None:
        while counts[index] < max_calls and time.perf_counter() - started < seconds:
            call()
            counts[index] += 1

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return items * sum(counts) / (time.perf_counter() - started)


def throughput(url: str, model: Path, args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from service.client import TokenizerClient

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    client = TokenizerClient(url)
    results: dict[str, Any] = {}
    for size in args.batch_sizes:
        batch = conversations(size)
        texts = tokenizer.apply_chat_template(batch, tokenize=False)
        calls = throughput_variants(client, tokenizer, batch, texts)
        measures: dict[str, Callable[[], float]] = {
            name: functools.partial(rate, call, size, args.seconds, args.max_calls) for name, call in calls.items()
        }
        # two clients at once, as DataLoader workers ask: one request's render overlaps another's encode
        measures["service binary ragged, 2 clients"] = functools.partial(
            concurrent_rate, calls["service binary ragged"], size, args.seconds, args.max_calls, 2
        )
        check_identical(client, tokenizer, batch)
        runs: dict[str, list[float]] = {name: [] for name in measures}
        for round_ in range(args.rounds):
            order = list(measures)
            order = order[round_ % len(order) :] + order[: round_ % len(order)]
            for name in order:
                runs[name].append(measures[name]())
        medians = {name: statistics.median(values) for name, values in runs.items()}
        results[str(size)] = {
            "conversations_per_s": medians,
            "rounds": runs,
            "ratios": {
                "ragged_vs_apply_chat_template": medians["service binary ragged"]
                / medians["in-process apply_chat_template"],
                "pt_vs_apply_chat_template_pt": medians["service binary padded (pt)"]
                / medians["in-process apply_chat_template padded (pt)"],
                "ragged_2_clients_vs_apply_chat_template": medians["service binary ragged, 2 clients"]
                / medians["in-process apply_chat_template"],
            },
            "characters_rendered": sum(map(len, texts)),
        }
        log(
            f"batch {size}: "
            + ", ".join(f"{name} {value:,.0f}/s" for name, value in medians.items() if "only" not in name)
        )
    client.close()
    return results


def throughput_variants(client: Any, tokenizer: Any, batch: list, texts: list[str]) -> dict[str, Callable[[], Any]]:
    """name -> one call on ``batch`` (its rendered ``texts`` for the encode alone)."""
    masks = {"return_assistant_tokens_mask": True}
    return {
        "service binary ragged": lambda: client.chat_encode_ragged(batch, **masks),
        "service binary padded (pt)": lambda: client.apply_chat_template(
            batch, padding=True, return_tensors="pt", **masks
        ),
        "in-process apply_chat_template": lambda: tokenizer.apply_chat_template(batch, **masks),
        "in-process apply_chat_template padded (pt)": lambda: tokenizer.apply_chat_template(
            batch, padding=True, return_tensors="pt", **masks
        ),
        # where the time goes: the parts alone
        "service ids only (no masks)": lambda: client.chat_encode_ragged(batch),
        "in-process ids only (no masks)": lambda: tokenizer.apply_chat_template(batch),
        "service render (/chat/render)": lambda: client.apply_chat_template(batch, tokenize=False),
        "in-process render (tokenize=False)": lambda: tokenizer.apply_chat_template(batch, tokenize=False),
        "service encode of the rendered texts": lambda: client.encode_ragged(texts, add_special_tokens=False),
        "in-process encode of the rendered texts": lambda: tokenizer(texts, add_special_tokens=False),
    }


def check_identical(client: Any, tokenizer: Any, batch: list) -> None:
    """The service's answer is the in-process one (ids and masks), before anything is timed."""
    ours = client.chat_encode_ragged(batch, return_assistant_tokens_mask=True).tolist()
    theirs = tokenizer.apply_chat_template(batch, return_assistant_tokens_mask=True)
    for key in ("input_ids", "assistant_masks"):
        if ours[key] != [list(row) for row in theirs[key]]:
            raise AssertionError(f"the service's {key} differ from apply_chat_template's")


# -- DataLoader (in a child process: TOKENIZERS_PARALLELISM=false before tokenizers is imported) -------------
class InProcessChatCollate:
    """What training code does today: apply_chat_template in the worker, then TRL's labels and padding."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        from service.data.sft import collate_sft

        encoded = self.tokenizer.apply_chat_template(
            [row["messages"] for row in rows], return_assistant_tokens_mask=True, **LOADER_OPTIONS
        )
        features = [
            {"input_ids": ids, "assistant_masks": mask}
            for ids, mask in zip(encoded["input_ids"], encoded["assistant_masks"], strict=True)
        ]
        return collate_sft(features, pad_token_id=self.tokenizer.pad_token_id)


def loader_part(url: str, model: Path, server_pid: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch
    from transformers import AutoTokenizer

    from benchmarks.dataloader_compare import measure_loader
    from service.client import TokenizerClient

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    rows = [{"messages": messages} for messages in conversations(args.loader_items)]
    variants: dict[str, tuple[Callable, int | None]] = {
        "chat collator": (TokenizerClient(url).chat_collator(**LOADER_OPTIONS), server_pid),
        "in-process": (InProcessChatCollate(tokenizer), None),
    }
    sample = rows[: args.loader_batch]
    ours, theirs = variants["chat collator"][0](sample), variants["in-process"][0](sample)
    if list(ours) != list(theirs) or not all(torch.equal(ours[k], theirs[k]) for k in theirs):
        raise AssertionError("the chat collator's batch differs from the in-process one")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        order = list(variants)[round_ % 2 :] + list(variants)[: round_ % 2]
        for name in order:
            collate, pid = variants[name]
            runs[name].append(
                measure_loader(rows, collate, 2, args.loader_batch, args.loader_batches, args.seconds * 2, pid)
            )
    cell: dict[str, Any] = {"workers": 2, "batch_size": args.loader_batch, "identical_batches": True}
    for name, values in runs.items():
        cell[name] = {
            field: statistics.median(v[field] for v in values)
            for field in ("batches_per_s", "collate_cpu_ms_per_batch", "server_cpu_ms_per_batch")
        } | {"rounds": values}
    cell["ratio_vs_inprocess"] = cell["chat collator"]["batches_per_s"] / cell["in-process"]["batches_per_s"]
    log(
        f"DataLoader: chat collator {cell['chat collator']['batches_per_s']:.1f} b/s, in-process "
        f"{cell['in-process']['batches_per_s']:.1f} b/s"
    )
    return [cell]


# -- the run ------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chat_compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the figures go (JSON)")
    parser.add_argument("--smoke", action="store_true", help="tiny counts, one round (< 60 s)")
    parser.add_argument("--part", choices=("loader",), help=argparse.SUPPRESS)  # the child process's
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    smoke = args.smoke
    args.batch_sizes = [8] if smoke else [64, 256]
    args.rounds = 1 if smoke else 3
    args.seconds = 0.3 if smoke else 2.0
    args.max_calls = 2 if smoke else 1000
    args.loader_batch = 8 if smoke else 32
    args.loader_items = 64 if smoke else 2048
    args.loader_batches = 4 if smoke else 40
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    if args.part == "loader":
        args.out.write_text(json.dumps({"dataloader": loader_part(args.url, args.model, args.server_pid, args)}))
        return 0
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    os.environ["TOKENIZERS_PARALLELISM"] = "true"  # the in-process side at its best (no fork in this process)
    with tempfile.TemporaryDirectory(prefix="chat-bench-") as work:
        model = chat_tokenizer_dir(Path(work))
        log_path = args.out.parent / "logs" / "chat_compare_server.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with ServerProcess("--model", str(model), "--drain-listen-seconds", "0", log_path=log_path) as server:
            results: dict[str, Any] = {"tokenizer": FAMILY, "throughput": throughput(server.url, model, args)}
            part = Path(work) / "loader.json"
            command = [sys.executable, "-m", "benchmarks.chat_compare", "--part", "loader", "--out", str(part)]
            command += ["--url", server.url, "--model", str(model), "--server-pid", str(server.pid)]
            command += ["--smoke"] if args.smoke else []
            env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
            subprocess.run(command, cwd=REPO, env=env, check=True, timeout=900)
            results.update(json.loads(part.read_text()))
    results["settings"] = {
        "batch_sizes": args.batch_sizes,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "loader": {"workers": 2, "batch_size": args.loader_batch, **LOADER_OPTIONS},
    }
    results["seconds"] = time.time() - started
    publish(results, args.out, print_table)
    return 0


def print_table(results: dict[str, Any]) -> None:
    for size, figures in results["throughput"].items():
        print(f"\nconversations/s, batch of {size} ({figures['characters_rendered']:,} characters rendered):")
        for name, value in figures["conversations_per_s"].items():
            print(f"  {name:<45} {value:>10,.0f}")
        for name, value in figures["ratios"].items():
            print(f"  {name:<45} {value:>10.2f}x")
    for cell in results["dataloader"]:
        print(f"\nDataLoader, {cell['workers']} workers, batch {cell['batch_size']}: batches/s")
        for name in ("chat collator", "in-process"):
            figures = cell[name]
            collate, server = figures["collate_cpu_ms_per_batch"], figures["server_cpu_ms_per_batch"]
            print(
                f"  {name:<20} {figures['batches_per_s']:>8.1f}  (collate CPU {collate:.1f} ms/batch, "
                f"server CPU {server:.1f} ms/batch)"
            )
        print(f"  {'ratio':<20} {cell['ratio_vs_inprocess']:>8.2f}x")


if __name__ == "__main__":
    sys.exit(main())
