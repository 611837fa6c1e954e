"""``tokenizer-service pretokenize``: a corpus to token shards through the service, one worker of many.

Runs on a client-only install (``pip install tokenizer-service``: numpy and the client); the Parquet
format and the progress bar come with the ``pipeline`` extra (pyarrow, tqdm).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from ..client import TokenizerServiceError
from ..corpus import TOTAL_ENV, CorpusError, flags, interrupt_on_sigterm
from ..wire import URL_ENV
from .manifest import MANIFEST_NAME, OutputConflict
from .settings import OUTPUT_FORMATS, PretokenizeConfig

#: Worker 0 did its units but other shards are not done: no manifest yet.
EXIT_INCOMPLETE = 3

DESCRIPTION = """\
Pre-tokenize a corpus through the service into token shards for training: one shard per work unit
(a small file, a line-aligned byte range of a big text/JSONL file, or Parquet row groups), so any number
of workers write the same files as one. Each worker takes units[index::count]; its index comes from
--shard-index/--num-shards, else JOB_COMPLETION_INDEX (with --num-shards or ${total}), else
SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, else RANK/WORLD_SIZE, else NODE_INDEX/NUM_NODES. Shards are
written atomically with a .done record; a rerun skips done shards and redoes the rest. Worker 0 waits for
the others and writes {manifest} (exit {incomplete} if they are still not done).
Every document's ids equal tokenizer(text, **options)["input_ids"] in-process (plus the eos id with
--append-eos).
"""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION.format(total=TOTAL_ENV, manifest=MANIFEST_NAME, incomplete=EXIT_INCOMPLETE),
        epilog=textwrap.dedent(f"""\
            exit status: 0 done; 1 failed (bad record, service unreachable after retries, conflicting output);
            2 wrong arguments; {EXIT_INCOMPLETE} worker 0 finished but other shards are missing (no manifest yet).
            example: {prog} 'data/*.jsonl.gz' --out tokens/ --url http://tok:8000 --format flat --append-eos"""),
    )
    flags.add_inputs(parser)
    parser.add_argument(
        "--out", required=True, type=Path, metavar="DIR", help="output directory (shared by all workers)"
    )
    parser.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help=f"service URL; repeat or comma-separate for several (default ${URL_ENV})",
    )
    parser.add_argument(
        "--format",
        dest="output_format",
        choices=OUTPUT_FORMATS,
        default="parquet",
        help="parquet: ids, position and kept fields per document (needs the pipeline extra); "
        "flat: one uint16/uint32 token array + uint64 document ends per shard (default: parquet)",
    )
    content = parser.add_argument_group("what each document becomes")
    flags.add_text_field(content)
    content.add_argument(
        "--keep-field",
        dest="keep_fields",
        action="append",
        default=[],
        metavar="FIELD",
        help="a field to carry into the Parquet output; repeat for several",
    )
    content.add_argument(
        "--no-add-special-tokens",
        dest="add_special_tokens",
        action="store_false",
        help="encode with add_special_tokens=False (no [CLS]/<s>...)",
    )
    content.add_argument("--truncation", action="store_true", default=None, help="truncation=True (with --max-length)")
    content.add_argument("--max-length", type=int, metavar="N", help="truncate every document to this many ids")
    content.add_argument("--append-eos", action="store_true", help="append the tokenizer's eos id after each document")
    content.add_argument(
        "--eos-id",
        dest="eos_token_id",
        type=int,
        metavar="ID",
        help="the id --append-eos appends (default: eos_token's)",
    )
    flags.add_bad_records(content)
    flags.add_workers(
        parser.add_argument_group("how the work is spread"),
        wait_help="worker 0: stop waiting for the others after this many seconds without a shard finishing "
        "(default 600; 0: do not wait)",
    )
    service = parser.add_argument_group("how the service is driven")
    service.add_argument("--concurrency", type=int, default=8, metavar="N", help="requests in flight (default 8)")
    service.add_argument(
        "--request-texts", type=int, default=256, metavar="N", help="most documents per request (default 256)"
    )
    service.add_argument(
        "--request-chars",
        type=int,
        default=256 * 1024,
        metavar="N",
        help="most characters per request (default 262144)",
    )
    service.add_argument("--api-key", metavar="KEY", help="the service's API key (default $TOKENIZER_SERVICE_API_KEY)")
    service.add_argument(
        "--expected-fingerprint", metavar="SHA", help="refuse a service whose tokenizer has another fingerprint"
    )
    service.add_argument(
        "--retry-deadline",
        metavar="SECONDS",
        type=float,
        default=300.0,
        help="seconds a request keeps retrying an unreachable or busy service before the worker fails (default 300)",
    )
    flags.add_progress(parser.add_argument_group("progress"))
    return parser


def config_from_args(args: argparse.Namespace) -> PretokenizeConfig:
    urls = tuple(part for value in args.url for part in value.split(",") if part.strip()) if args.url else None
    return PretokenizeConfig(
        inputs=tuple(args.inputs),
        out=args.out,
        url=urls,
        output_format=args.output_format,
        text_field=args.text_field,
        keep_fields=tuple(args.keep_fields),
        add_special_tokens=args.add_special_tokens,
        truncation=args.truncation,
        max_length=args.max_length,
        append_eos=args.append_eos,
        eos_token_id=args.eos_token_id,
        on_bad_record=args.on_bad_record,
        unit_bytes=args.unit_bytes,
        shard_index=args.shard_index,
        num_shards=args.num_shards,
        concurrency=args.concurrency,
        request_texts=args.request_texts,
        request_chars=args.request_chars,
        api_key=args.api_key,
        expected_fingerprint=args.expected_fingerprint,
        retry_deadline=args.retry_deadline,
        wait_seconds=args.wait_seconds,
        progress=args.progress,
        log_every=args.log_every,
    )


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service pretokenize") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    from .runner import describe_summary, pretokenize  # numpy and the async client: after argument checks

    interrupt_on_sigterm()  # the shard being written leaves no temporary file; done shards stay done
    try:
        summary = asyncio.run(pretokenize(config))
    except (CorpusError, OutputConflict, TokenizerServiceError, ValueError, OSError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; done shards stay done, a rerun finishes the rest", file=sys.stderr)
        return 130
    print(describe_summary(summary), file=sys.stderr)
    if summary.missing:
        names = ", ".join(summary.missing[:5]) + (
            f" and {len(summary.missing) - 5} more" if len(summary.missing) > 5 else ""
        )
        print(
            f"{prog}: {len(summary.missing)} shards are not done ({names}): no manifest yet. Run worker 0 again once "
            "the other workers have finished: it skips done shards and writes the manifest.",
            file=sys.stderr,
        )
        return EXIT_INCOMPLETE
    return 0
