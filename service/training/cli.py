"""``tokenizer-service train`` (the ``server`` extra: it runs the tokenizers trainers)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence

from ..helptext import HelpFormatter
from ..jobs import cli as jobcli
from ..jobs.flags import Layout, add_flags
from ..suggestions import ArgumentParser
from .options import TrainConfig

for _needed in ("tokenizers", "transformers"):  # the server extra: service.cli names it when one is missing
    if importlib.util.find_spec(_needed) is None:
        raise ImportError(f"No module named {_needed!r}")

# Paragraphs, filled to the terminal by the help's formatter (service.helptext).
DESCRIPTION = """\
Train a tokenizer (BPE, byte-level BPE, WordPiece or Unigram) from a corpus too big for one machine, exactly
as if one process had trained it on the whole corpus.

Phase 1 (every worker): count the pre-tokens of its units with the tokenizer's normalizer and pre-tokenizer,
on all its cores, in bounded memory, each unit's counts written whole with a .done record (a rerun counts
only what is unfinished). Phase 2 (worker 0, or --phase merge): wait for every unit, sum the counts, train
once, and write tokenizer.json, tokenizer_config.json and manifest.json into --out (loadable by
AutoTokenizer and `tokenizer-service serve --model OUT`).

Inputs, --out, --counts and --like are local paths or URLs (s3://, gs://, az://...): no shared file system
is needed. Units as `tokenizer-service pretokenize` makes them; the worker index: "how the work is spread".
"""


#: The job's configuration: every flag is one of its fields (:func:`service.jobs.flags.add_flags`).
CONFIG = TrainConfig


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        formatter_class=HelpFormatter,
        description=DESCRIPTION,
        epilog=f"""\
exit status: 0 done; 1 failed (bad record, recipe or vocabulary size refused, conflicting counts, store
unreachable after retries); 2 wrong arguments; {jobcli.EXIT_INCOMPLETE} the merge gave up waiting for units that are
not counted.

example:
  {prog} 'corpus/*.jsonl.gz' --out my-tokenizer \\
    --model byte-level-bpe --vocab-size 32000""",
    )
    add_flags(parser, TrainConfig, LAYOUT, HELPS)
    return parser


#: The help's sections and their flags (each of :class:`TrainConfig`'s, once).
LAYOUT: Layout = (
    (None, None, ("inputs", "out")),
    (
        "the tokenizer",
        None,
        (
            "model",
            "vocab_size",
            "min_frequency",
            "special_tokens",
            "like",
            "revision",
            "limit_alphabet",
            "model_max_length",
        ),
    ),
    ("the corpus (as pretokenize reads it)", None, ("text_field", "on_bad_record")),
    (
        "how the work is spread",
        jobcli.WORKERS_DESCRIPTION,
        ("phase", "counts_dir", "shard_index", "num_shards", "unit_bytes", "wait_seconds", "processes", "count_memory"),
    ),
    ("object stores", None, ("storage_options", "retry_deadline")),
    ("progress", None, ("progress", "log_every")),
)
#: train's own words for flags every job has.
HELPS = {
    "out": "the tokenizer folder worker 0 writes; a local path or a URL (s3://...)",
    "wait_seconds": "the merge stops waiting after this many seconds without a unit getting counted, and exits "
    f"{jobcli.EXIT_INCOMPLETE}",
    "retry_deadline": "seconds an unreachable or throttling store is retried -- said at once, naming the URL, then "
    "counted down -- before the worker fails",
    "progress": "auto: bars on a terminal (counting, and the trainer's own), log lines otherwise",
}


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service train") -> int:
    config = jobcli.parse(build_parser(prog), argv, CONFIG)
    from ..engine.loading import keep_torch_out
    from ..engine.parallelism import available_cpus, configure_rust_parallelism

    if "RAYON_NUM_THREADS" not in os.environ:  # before tokenizers starts its pool: the trainer's threads are
        configure_rust_parallelism(available_cpus())  # the CPUs this process may use (cgroup quota included)
    keep_torch_out()  # a worker counts and trains with tokenizers alone: transformers without torch, as serve
    from .assembly import MANIFEST_NAME
    from .runner import describe_summary, train

    status, summary = jobcli.run_job(prog, lambda: train(config))
    if summary is not None:
        print(describe_summary(summary), file=sys.stderr)
        if summary.training is not None:
            print(f"{prog}: {summary.training.out.rstrip('/')}/{MANIFEST_NAME}", file=sys.stderr)
    return status
