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
from pathlib import Path

from ..corpus import TOTAL_ENV, CorpusError, flags, interrupt_on_sigterm, parse_size
from ..corpus.progress import human
from .options import DEFAULT_COUNT_MEMORY, MODELS, PHASES, TrainConfig

for _needed in ("tokenizers", "transformers"):  # the server extra: service.cli names it when one is missing
    if importlib.util.find_spec(_needed) is None:
        raise ImportError(f"No module named {_needed!r}")

#: The merge gave up waiting: some units are not counted (nothing was trained).
EXIT_INCOMPLETE = 3

DESCRIPTION = """\
Train a tokenizer (BPE, byte-level BPE, WordPiece or Unigram) from a corpus too big for one machine,
exactly as if one process had trained it on the whole corpus. Phase 1 (every worker): count the
pre-tokens of its units of the corpus with the tokenizer's normalizer and pre-tokenizer, on all its cores,
in bounded memory; counts are written per unit, atomically, with a .done record, so a rerun counts only
what is unfinished. Phase 2 (worker 0, or --phase merge): wait for every unit, sum the counts, train once,
and write tokenizer.json + tokenizer_config.json + manifest.json into --out (loadable by AutoTokenizer and
by `tokenizer-service serve --model OUT`).
Units and worker index exactly as `tokenizer-service pretokenize`: --shard-index/--num-shards, else
JOB_COMPLETION_INDEX (with --num-shards or ${total}), else SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT,
else RANK/WORLD_SIZE, else NODE_INDEX/NUM_NODES; each worker counts units[index::count].
"""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION.format(total=TOTAL_ENV),
        epilog=textwrap.dedent(f"""\
            exit status: 0 done; 1 failed (bad record, recipe or vocabulary size refused, conflicting counts);
            2 wrong arguments; {EXIT_INCOMPLETE} the merge gave up waiting for units that are not counted.
            example: {prog} 'corpus/*.jsonl.gz' --out my-tokenizer --model byte-level-bpe --vocab-size 32000"""),
    )
    flags.add_inputs(parser)
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help="the tokenizer directory to write (worker 0); shared by all workers",
    )
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
        "tokenizer (a tokenizer.json, a directory or a hub id), learning only the vocabulary",
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
    flags.add_text_field(corpus)
    flags.add_bad_records(corpus)
    work = parser.add_argument_group("how the work is spread")
    work.add_argument(
        "--phase",
        choices=PHASES,
        default="all",
        help="count: count this worker's units; merge: sum all counts and train; all (default): count, then "
        "worker 0 merges and trains",
    )
    work.add_argument(
        "--counts", type=Path, metavar="DIR", help="where the counts go, shared by all workers (default: OUT/counts)"
    )
    flags.add_workers(
        work,
        wait_help="the merge stops waiting after this many seconds without a unit getting counted, and exits "
        f"{EXIT_INCOMPLETE} (default 600)",
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
    flags.add_progress(
        parser.add_argument_group("progress"),
        progress_help="auto (default): bars on a terminal (counting, and the trainer's own), log lines otherwise",
    )
    return parser


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        inputs=tuple(args.inputs),
        out=args.out,
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
        text_field=args.text_field,
        on_bad_record=args.on_bad_record,
        unit_bytes=args.unit_bytes,
        shard_index=args.shard_index,
        num_shards=args.num_shards,
        processes=args.processes,
        count_memory=args.count_memory,
        wait_seconds=args.wait_seconds,
        progress=args.progress,
        log_every=args.log_every,
    )


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service train") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    from ..engine.parallelism import available_cpus, configure_rust_parallelism

    if "RAYON_NUM_THREADS" not in os.environ:  # before tokenizers starts its pool: the trainer's threads are
        configure_rust_parallelism(available_cpus())  # the CPUs this process may use (cgroup quota included)
    from .assembly import MANIFEST_NAME
    from .counting import CountConflict
    from .learning import CountsMissing
    from .recipes import RecipeError
    from .runner import describe_summary, train
    from .vocabulary import VocabularyTooSmall

    interrupt_on_sigterm()  # the counting processes are stopped, the unit being counted leaves no temporary file
    try:
        summary = train(config)
    except CountsMissing as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE
    except (CorpusError, CountConflict, RecipeError, VocabularyTooSmall, OSError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; counted units stay counted, a rerun finishes the rest", file=sys.stderr)
        return 130
    print(describe_summary(summary), file=sys.stderr)
    if summary.training is not None:
        print(f"{prog}: {summary.training.out / MANIFEST_NAME}", file=sys.stderr)
    return 0
