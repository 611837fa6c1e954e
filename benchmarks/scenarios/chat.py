"""Scenario 8, conversations: ``/chat/encode`` against in-process ``apply_chat_template`` on the same conversations
(binary answers, ragged and padded, masks asked for; and each side's parts alone: rendering, encoding, ids only),
and the chat collator in DataLoader workers against ``apply_chat_template`` + TRL's labels in the collate_fn.

In a process of its own (``TOKENIZERS_PARALLELISM=true``: the in-process side at its best), against its own server
of the byte-level BPE with our ChatML template; the DataLoader part runs in a child process (:func:`loader_part`), as
``TOKENIZERS_PARALLELISM=false`` must be set before tokenizers is imported. Figures: docs/guides/performance.md,
"Conversations".
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    TOKENIZES_WITH_PARALLELISM_ON,
    Row,
    Scenario,
    Settings,
    call_in_own_process,
    human,
    in_rounds,
    in_threads,
    log,
    medians,
    not_run,
    per_cell_target,
)
from benchmarks.scenarios import dataloader
from benchmarks.scenarios.dataloader import IN_PROCESS, Variants, measure_cells
from testkit import assets
from testkit.servers import ServerProcess

FAMILY = "bytelevel_bpe"
LOADER_OPTIONS = {"truncation": True, "max_length": 1024}
TARGETS = {"s8_chat_encode_vs_apply_chat_template": 1.0, "s8_chat_collator_vs_collate_fn": 1.0}
BASELINE_OF = {
    "service binary ragged": "in-process apply_chat_template",
    "service binary ragged, 2 clients": "in-process apply_chat_template",
    "service binary padded (pt)": "in-process apply_chat_template padded (pt)",
    "service ids only (no masks)": "in-process ids only (no masks)",
    "service render (/chat/render)": "in-process render (tokenize=False)",
    "service encode of the rendered texts": "in-process encode of the rendered texts",
}


@dataclass(frozen=True)
class Counts:
    batch_sizes: tuple[int, ...] = (64, 256)
    rounds: int = 3
    seconds: float = 2.0
    max_calls: int = 1000
    loader_batch: int = 32
    loader_items: int = 2048
    loader_batches: int = 40


FULL = Counts()
SMOKE = Counts((8,), rounds=1, seconds=0.3, max_calls=2, loader_batch=8, loader_items=64, loader_batches=4)


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
def rate(call: Callable[[], Any], items: int, seconds: float, max_calls: int, streams: int = 1) -> float:
    """Items per second of ``call`` (``items`` per call) made by ``streams`` threads at once, each at most
    ``max_calls`` calls and for about ``seconds``."""
    call()  # warm
    counts = [0] * streams
    started = time.perf_counter()

    def stream(index: int) -> None:
        while counts[index] < max_calls and time.perf_counter() - started < seconds:
            call()
            counts[index] += 1

    in_threads(stream, streams)
    return items * sum(counts) / (time.perf_counter() - started)


def throughput(url: str, model: Path, counts: Counts) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from service.client import TokenizerClient

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    client = TokenizerClient(url)
    results: dict[str, Any] = {}
    for size in counts.batch_sizes:
        batch = conversations(size)
        texts = tokenizer.apply_chat_template(batch, tokenize=False)
        calls = throughput_variants(client, tokenizer, batch, texts)
        measures: dict[str, Callable[[], float]] = {
            name: functools.partial(rate, call, size, counts.seconds, counts.max_calls) for name, call in calls.items()
        }
        # two clients at once, as DataLoader workers ask: one request's render overlaps another's encode
        measures["service binary ragged, 2 clients"] = functools.partial(
            rate, calls["service binary ragged"], size, counts.seconds, counts.max_calls, 2
        )
        check_identical(client, tokenizer, batch)
        runs = in_rounds(list(measures), lambda name, measures=measures: {"rate": measures[name]()}, counts.rounds)
        found = {name: medians(values)["rate"] for name, values in runs.items()}
        lists, tensors = found["in-process apply_chat_template"], found["in-process apply_chat_template padded (pt)"]
        results[str(size)] = {
            "conversations_per_s": found,
            "rounds": {name: [r["rate"] for r in values] for name, values in runs.items()},
            "ratios": {
                "ragged_vs_apply_chat_template": found["service binary ragged"] / lists,
                "pt_vs_apply_chat_template_pt": found["service binary padded (pt)"] / tensors,
                "ragged_2_clients_vs_apply_chat_template": found["service binary ragged, 2 clients"] / lists,
            },
            "characters_rendered": sum(map(len, texts)),
        }
        log(
            f"batch {size}: "
            + ", ".join(f"{name} {value:,.0f}/s" for name, value in found.items() if "only" not in name)
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


def loader_part(url: str, model: str, server_pid: int, counts: dict[str, Any]) -> list[dict[str, Any]]:
    """The DataLoader cell (a child process, ``TOKENIZERS_PARALLELISM=false``)."""
    from transformers import AutoTokenizer

    from service.client import TokenizerClient

    chat = Counts(**{k: tuple(v) if isinstance(v, list) else v for k, v in counts.items()})
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = [{"messages": messages} for messages in conversations(chat.loader_items)]
    variants: Variants = {
        "chat collator": (TokenizerClient(url).chat_collator(**LOADER_OPTIONS), (server_pid,)),
        IN_PROCESS: (InProcessChatCollate(tokenizer), ()),
    }
    loader = dataloader.Counts((2,), (chat.loader_batch,), chat.rounds, chat.loader_batches, chat.seconds * 2)
    return measure_cells(variants, rows, loader)


# -- the run ------------------------------------------------------------------------------------------------
def measure(settings: Settings) -> dict[str, Any]:
    counts = settings.counts(FULL, SMOKE)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"  # the in-process side at its best (no fork in this process)
    model = chat_tokenizer_dir(settings.work_dir)
    log_path = settings.log_dir / "server-chat.log"
    with ServerProcess("--model", str(model), "--drain-listen-seconds", "0", log_path=log_path) as server:
        section: dict[str, Any] = {"tokenizer": FAMILY, "throughput": throughput(server.url, model, counts)}
        arguments = (server.url, str(model), server.pid, asdict(counts))
        env = {"TOKENIZERS_PARALLELISM": "false"}  # before tokenizers is imported: in a process of its own
        section["dataloader"] = call_in_own_process(
            "benchmarks.scenarios.chat:loader_part", *arguments, timeout=900, env=env
        )
    loader = {"workers": 2, "batch_size": counts.loader_batch, **LOADER_OPTIONS}
    return {**section, "settings": {**asdict(counts), "loader": loader}}


def rows(section: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for size, figures in section.get("throughput", {}).items():
        rates = figures["conversations_per_s"]
        for name, value in rates.items():
            baseline = BASELINE_OF.get(name)
            ratio = f"{value / rates[baseline]:.2f}x in-proc" if baseline else "baseline"
            row = {"scenario": "8", "texts": f"{size} conversations", "variant": name, "ratio": ratio}
            out.append({**row, "rate": human(value) + " conv/s"})
    return out + dataloader.loader_rows("8", section.get("dataloader", []))


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    if "throughput" not in section:
        return [
            not_run(name, f"scenario 8: >= {threshold:g}", threshold, section) for name, threshold in TARGETS.items()
        ]
    figures = section["throughput"]
    forms = (
        ("tensors (pt vs pt)", "pt_vs_apply_chat_template_pt"),
        ("ragged vs lists", "ragged_vs_apply_chat_template"),
    )
    per_cell = {f"batch {size}, {form}": figures[size]["ratios"][key] for size in figures for form, key in forms}
    cells = {
        f"{c['workers']} workers, batch {c['batch_size']}": c["vs_in_process"]["chat collator"]
        for c in section["dataloader"]
    }
    return [
        per_cell_target(
            "s8_chat_encode_vs_apply_chat_template",
            "scenario 8: conversations/s of /chat/encode (binary, with masks) / in-process apply_chat_template on the "
            f"same conversations, one client (geometric mean over the {len(per_cell)} cells)",
            per_cell,
            TARGETS["s8_chat_encode_vs_apply_chat_template"],
        ),
        per_cell_target(
            "s8_chat_collator_vs_collate_fn",
            "scenario 8: DataLoader batches/s through the chat collator / apply_chat_template with masks and TRL's "
            "labels in the collate_fn (TOKENIZERS_PARALLELISM=false)",
            cells,
            TARGETS["s8_chat_collator_vs_collate_fn"],
        ),
    ]


SCENARIO = Scenario(
    "8",
    "conversations: /chat/encode vs apply_chat_template, and the chat collator in a DataLoader",
    measure,
    rows,
    targets,
    process=TOKENIZES_WITH_PARALLELISM_ON,
    needs_torch=True,
    timeout=(600.0, 150.0),
)
