"""``tokenizer-service pretokenize``: a corpus to token shards through the service, one worker of many. Runs on a
client-only install; Parquet and the progress bar come with the ``pipeline`` extra (pyarrow, tqdm).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from ..helptext import HelpFormatter
from ..jobs import cli as jobcli
from ..jobs.flags import Layout, add_flags
from ..suggestions import ArgumentParser
from .manifest import MANIFEST_NAME
from .settings import PretokenizeConfig

# Paragraphs, filled to the terminal by the help's formatter (service.helptext).
DESCRIPTION = """\
Pre-tokenize a corpus through the service into token shards for training: one shard per work unit
(a small file, a line-aligned byte range of a big text/JSONL file, or Parquet row groups), so any number
of workers write the same files as one. Inputs and --out are local paths or URLs (s3://, gs://, az://).

Every shard file is written whole, then a .done record; a rerun skips done shards and redoes the rest.
Worker 0 waits for the others and writes {manifest} (exit {incomplete} if they are still not done).

Every document's ids equal tokenizer(text, **options)["input_ids"] in-process (plus the eos id with
--append-eos); with --messages-field, conversations: apply_chat_template's ids, and loss masks beside them.
"""

#: The job's configuration: every flag is one of its fields (:func:`service.jobs.flags.add_flags`).
CONFIG = PretokenizeConfig


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        formatter_class=HelpFormatter,
        description=DESCRIPTION.format(manifest=MANIFEST_NAME, incomplete=jobcli.EXIT_INCOMPLETE),
        epilog=f"""\
exit status: 0 done; 1 failed (bad record, service or store unreachable after retries, conflicting output);
2 wrong arguments; {jobcli.EXIT_INCOMPLETE} worker 0 finished but other shards are missing (no manifest yet).

example:
  {prog} 's3://corpus/*.jsonl.gz' \\
    --out s3://tokens/run1 --url http://tok:8000 --format flat""",
    )
    add_flags(parser, PretokenizeConfig, LAYOUT, HELPS)
    return parser


#: The help's sections and the flags in each (every field of :class:`PretokenizeConfig` that is a flag, once).
LAYOUT: Layout = (
    (None, None, ("inputs", "out", "url", "output_format")),
    (
        "what each document becomes",
        None,
        (
            "text_field",
            "keep_fields",
            "add_special_tokens",
            "truncation",
            "max_length",
            "append_eos",
            "eos_token_id",
            "on_bad_record",
        ),
    ),
    (
        "conversations: apply_chat_template, and loss masks beside the ids",
        "With --messages-field, each record's document is a conversation (a JSON array or a Parquet list of "
        "messages, each with a role) rendered by the served tokenizer's chat template; every document's ids equal "
        'apply_chat_template(messages, ...)["input_ids"] in-process, and its loss mask (1 = the token counts '
        "toward the loss: the assistant wrote it) is written beside them: Parquet an assistant_masks column, flat a "
        "<shard>.ds.loss file (datatrove's), megatron a <shard>.loss.bin/.idx indexed dataset of uint8.",
        ("messages_field", "chat_template", "chat_template_kwargs", "assistant_masks_from", "loss_masks"),
    ),
    (
        "how the work is spread",
        jobcli.WORKERS_DESCRIPTION,
        ("shard_index", "num_shards", "unit_bytes", "wait_seconds"),
    ),
    (
        "how the service and the stores are driven",
        None,
        (
            "concurrency",
            "request_texts",
            "request_chars",
            "api_key",
            "expected_fingerprint",
            "storage_options",
            "retry_deadline",
        ),
    ),
    ("progress", None, ("progress", "log_every")),
)
#: pretokenize's own words for flags every job has.
HELPS = {
    "out": "output folder (shared by all workers); a local path or a URL (s3://...)",
    "wait_seconds": "worker 0: stop waiting for the others after this many seconds without a shard finishing "
    "(0: do not wait)",
    "retry_deadline": "seconds an unreachable or busy service or store is retried -- said at once, naming the URL, "
    "then counted down -- before the worker fails",
}


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service pretokenize") -> int:
    config = jobcli.parse(build_parser(prog), argv, CONFIG)
    from ..client import TokenizerServiceError  # numpy and the async client: after argument checks
    from .runner import describe_summary, pretokenize

    status, summary = jobcli.run_job(prog, lambda: asyncio.run(pretokenize(config)), failures=(TokenizerServiceError,))
    if summary is not None:
        print(describe_summary(summary), file=sys.stderr)
    return status
