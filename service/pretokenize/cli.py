"""``tokenizer-service pretokenize``: a corpus to token shards through the service, one worker of many.

Runs on a client-only install (``pip install tokenizer-service``: numpy and the client); the Parquet
format and the progress bar come with the ``pipeline`` extra (pyarrow, tqdm).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
from collections.abc import Sequence

from ..corpus import jobcli
from ..suggestions import ArgumentParser
from ..wire import ASSISTANT_MASK_SOURCES, URL_ENV
from .manifest import MANIFEST_NAME
from .settings import OUTPUT_FORMATS, PretokenizeConfig

DESCRIPTION = """\
Pre-tokenize a corpus through the service into token shards for training: one shard per work unit
(a small file, a line-aligned byte range of a big text/JSONL file, or Parquet row groups), so any number
of workers write the same files as one. Inputs and --out are local paths or URLs (s3://, gs://, az://,
hf://...). Each worker takes units[index::count]; its index comes from {sources}. Every shard file is
written whole, then a .done record; a rerun skips done shards and redoes the rest. Worker 0 waits for the
others and writes {manifest} (exit {incomplete} if they are still not done).
Every document's ids equal tokenizer(text, **options)["input_ids"] in-process (plus the eos id with
--append-eos); with --messages-field, conversations: apply_chat_template's ids, and loss masks beside them.
"""


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION.format(
            sources=jobcli.WORKER_SOURCES, manifest=MANIFEST_NAME, incomplete=jobcli.EXIT_INCOMPLETE
        ),
        epilog=textwrap.dedent(f"""\
            exit status: 0 done; 1 failed (bad record, service or store unreachable after retries, conflicting
            output); 2 wrong arguments; {jobcli.EXIT_INCOMPLETE} worker 0 finished but other shards are missing
            (no manifest yet).
            example: {prog} 's3://corpus/*.jsonl.gz' --out s3://tokens/run1 --url http://tok:8000 --format flat"""),
    )
    jobcli.add_inputs(parser)
    jobcli.add_out(parser, "output folder (shared by all workers)")
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
        "flat: datatrove's .ds + .ds.index + .ds.metadata (one uint16/uint32 token array per shard); "
        "megatron: Megatron-LM's .bin + .idx (default: parquet)",
    )
    content = parser.add_argument_group("what each document becomes")
    jobcli.add_text_field(content)
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
    jobcli.add_bad_records(content)
    chat = parser.add_argument_group(
        "conversations: apply_chat_template, and loss masks beside the ids",
        "With --messages-field, each record's document is a conversation (a JSON array or a Parquet list of "
        "messages, each with a role) rendered by the served tokenizer's chat template; every document's ids equal "
        'apply_chat_template(messages, ...)["input_ids"] in-process, and its loss mask (1 = the token counts '
        "toward the loss: the assistant wrote it) is written beside them: Parquet an assistant_masks column, flat a "
        "<shard>.ds.loss file (datatrove's), megatron a <shard>.loss.bin/.idx indexed dataset of uint8.",
    )
    chat.add_argument(
        "--messages-field", metavar="FIELD", help="the JSON field or Parquet column holding each conversation"
    )
    chat.add_argument("--chat-template", metavar="NAME", help="one of the tokenizer's named templates (GET /info)")
    chat.add_argument(
        "--chat-template-kwargs",
        type=_json_object,
        metavar="JSON",
        help="template variables, as a JSON object (e.g. '{\"enable_thinking\": false}')",
    )
    chat.add_argument(
        "--assistant-masks-from",
        choices=ASSISTANT_MASK_SOURCES,
        default="generation",
        help="generation: the template's {%% generation %%} markers (a template without them is refused, never an "
        "all-zero mask); turns: each assistant message's rendered turn (exact, or the conversation is refused)",
    )
    chat.add_argument(
        "--no-loss-masks", dest="loss_masks", action="store_false", help="write the ids of conversations only"
    )
    jobcli.add_workers(
        parser.add_argument_group("how the work is spread"),
        wait_help="worker 0: stop waiting for the others after this many seconds without a shard finishing "
        "(default 600; 0: do not wait)",
    )
    service = parser.add_argument_group("how the service and the stores are driven")
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
    jobcli.add_storage(
        service,
        retry_help="seconds an unreachable or busy service or store is retried -- said at once, naming the URL, "
        "then counted down -- before the worker fails (default 300)",
    )
    jobcli.add_progress(parser.add_argument_group("progress"))
    return parser


def config_from_args(args: argparse.Namespace) -> PretokenizeConfig:
    urls = tuple(part for value in args.url for part in value.split(",") if part.strip()) if args.url else None
    return PretokenizeConfig(
        **jobcli.job_fields(args),
        url=urls,
        output_format=args.output_format,
        keep_fields=tuple(args.keep_fields),
        add_special_tokens=args.add_special_tokens,
        truncation=args.truncation,
        max_length=args.max_length,
        append_eos=args.append_eos,
        eos_token_id=args.eos_token_id,
        concurrency=args.concurrency,
        request_texts=args.request_texts,
        request_chars=args.request_chars,
        api_key=args.api_key,
        expected_fingerprint=args.expected_fingerprint,
        messages_field=args.messages_field,
        chat_template=args.chat_template,
        chat_template_kwargs=args.chat_template_kwargs,
        assistant_masks_from=args.assistant_masks_from,
        loss_masks=args.loss_masks,
    )


def _json_object(value: str) -> dict[str, object]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("must be a JSON object of template variables")
    return parsed


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service pretokenize") -> int:
    config = jobcli.parse(build_parser(prog), argv, config_from_args)
    from ..client import TokenizerServiceError  # numpy and the async client: after argument checks
    from .runner import describe_summary, pretokenize

    status, summary = jobcli.run_job(prog, lambda: asyncio.run(pretokenize(config)), failures=(TokenizerServiceError,))
    if summary is not None:
        print(describe_summary(summary), file=sys.stderr)
    return status
