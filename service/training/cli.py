"""``tokenizer-service train``: train a tokenizer from a corpus sharded across workers, exactly.

Server side of the package (it runs the tokenizers trainers): ``pip install 'tokenizer-service[server]'``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import textwrap
from collections.abc import Sequence

from ..corpus import jobcli, parse_size
from ..corpus.progress import human
from ..suggestions import ArgumentParser
from .options import DEFAULT_COUNT_MEMORY, MODELS, PHASES, TrainConfig

for _needed in ("tokenizers", "transformers"):  # the server extra: service.cli names it when one is missing
    if importlib.util.find_spec(_needed) is None:
        raise ImportError(f"No module named {_needed!r}")

DESCRIPTION = """\
Train a tokenizer (BPE, byte-level BPE, WordPiece or Unigram) from a corpus too big for one machine,
exactly as if one process had trained it on the whole corpus. Phase 1 (every worker): count the
pre-tokens of its units of the corpus with the tokenizer's normalizer and pre-tokenizer, on all its cores,
in bounded memory; counts are written per unit, whole, with a .done record, so a rerun counts only what is
unfinished. Phase 2 (worker 0, or --phase merge): wait for every unit, sum the counts, train once, and
write tokenizer.json + tokenizer_config.json + manifest.json into --out (loadable by AutoTokenizer and by
`tokenizer-service serve --model OUT`). Inputs, --out, --counts and --like are local paths or URLs
(s3://, gs://, az://...): no shared file system is needed.
Units and worker index exactly as `tokenizer-service pretokenize`: {sources}; each worker counts
units[index::count].
"""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION.format(sources=jobcli.WORKER_SOURCES),
        epilog=textwrap.dedent(f"""\
            exit status: 0 done; 1 failed (bad record, recipe or vocabulary size refused, conflicting counts,
            store unreachable after retries); 2 wrong arguments; {jobcli.EXIT_INCOMPLETE} the merge gave up
            waiting for units that are not counted.
            example: {prog} 'corpus/*.jsonl.gz' --out my-tokenizer --model byte-level-bpe --vocab-size 32000"""),
    )
    jobcli.add_inputs(parser)
    jobcli.add_out(parser, "the tokenizer folder worker 0 writes")
    model = parser.add_argument_group("the tokenizer")
    model.add_argument(
        "--model",
        choices=MODELS,
        help="model family and its preset (with --like: optional, the source's family)",
    )
    model.add_argument(
        "--vocab-size", type=int, required=True, metavar="N", help="tokens in the vocabulary, special tokens included"
    )
    model.add_argument(
        "--min-frequency",
        type=int,
        default=0,
        metavar="K",
        help="BPE/WordPiece: the least count of a pair to be merged; Unigram: the least count of a pre-token to be "
        "kept; always counted over the whole corpus (default 0)",
    )
    model.add_argument(
        "--special-tokens",
        nargs="+",
        metavar="TOKEN",
        help="the special tokens, in id order (default: the preset's or the --like tokenizer's); put this flag after "
        "the inputs",
    )
    model.add_argument(
        "--like",
        metavar="SRC",
        help="keep the normalizer, pre-tokenizer, post-processor, decoder, special tokens and config of this "
        "tokenizer (a tokenizer.json, a directory, a hub id, or either under a URL), learning only the vocabulary",
    )
    model.add_argument("--revision", metavar="REV", help="hub revision of --like (pin a commit)")
    model.add_argument(
        "--limit-alphabet",
        type=int,
        metavar="N",
        help="BPE/WordPiece: keep only this many characters, the most frequent (default: all)",
    )
    model.add_argument(
        "--model-max-length", type=int, metavar="N", help="the tokenizer's model_max_length (default: the recipe's)"
    )
    corpus = parser.add_argument_group("the corpus (as pretokenize reads it)")
    jobcli.add_text_field(corpus)
    jobcli.add_bad_records(corpus)
    work = parser.add_argument_group("how the work is spread")
    work.add_argument(
        "--phase",
        choices=PHASES,
        default="all",
        help="count: count this worker's units; merge: sum all counts and train; all (default): count, then "
        "worker 0 merges and trains",
    )
    work.add_argument(
        "--counts",
        metavar="DIR",
        help="where the counts go, shared by all workers; a local path or a URL (default: OUT.counts, beside the "
        "tokenizer: kept for reruns, delete it when done)",
    )
    jobcli.add_workers(
        work,
        wait_help="the merge stops waiting after this many seconds without a unit getting counted, and exits "
        f"{jobcli.EXIT_INCOMPLETE} (default 600)",
    )
    work.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="counting processes on this worker (default: the CPUs this process may use)",
    )
    work.add_argument(
        "--count-memory",
        type=parse_size,
        metavar="SIZE",
        default=DEFAULT_COUNT_MEMORY,
        help=f"memory of distinct pre-tokens per counting process before they spill to disk (default "
        f"{human(DEFAULT_COUNT_MEMORY, 'B')}; counts stay exact)",
    )
    jobcli.add_storage(
        parser.add_argument_group("object stores"),
        retry_help="seconds an unreachable or throttling store is retried -- said at once, naming the URL, then "
        "counted down -- before the worker fails (default 300)",
    )
    jobcli.add_progress(
        parser.add_argument_group("progress"),
        progress_help="auto (default): bars on a terminal (counting, and the trainer's own), log lines otherwise",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        **jobcli.job_fields(args),
        model=args.model,
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        special_tokens=tuple(args.special_tokens) if args.special_tokens is not None else None,
        like=args.like,
        revision=args.revision,
        limit_alphabet=args.limit_alphabet,
        model_max_length=args.model_max_length,
        phase=args.phase,
        counts_dir=args.counts,
        processes=args.processes,
        count_memory=args.count_memory,
    )


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service train") -> int:
    config = jobcli.parse(build_parser(prog), argv, config_from_args)
    from ..engine.parallelism import available_cpus, configure_rust_parallelism

    if "RAYON_NUM_THREADS" not in os.environ:  # before tokenizers starts its pool: the trainer's threads are
        configure_rust_parallelism(available_cpus())  # the CPUs this process may use (cgroup quota included)
    from .assembly import MANIFEST_NAME
    from .runner import describe_summary, train

    status, summary = jobcli.run_job(prog, lambda: train(config))
    if summary is not None:
        print(describe_summary(summary), file=sys.stderr)
        if summary.training is not None:
            print(f"{prog}: {summary.training.out.rstrip('/')}/{MANIFEST_NAME}", file=sys.stderr)
    return status
