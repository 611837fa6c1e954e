"""Side-by-side benchmark: tokenizer-service against in-process tokenization, same texts, same run.

    .venv/bin/python -m benchmarks.run              # full run: ~12 min on 2 cores, +~30 scenario 6, +~10 scaling
    .venv/bin/python -m benchmarks.run --scenarios 1,2,3,4,5,rss,split   # all but scenarios 6-8 and scaling
    .venv/bin/python -m benchmarks.run --scenarios scaling   # replicas and the workaround on 1-2 cores, projected
    .venv/bin/python -m benchmarks.run --smoke      # every scenario with tiny counts: ~90 s (CI)

Run from the repository root. It starts the servers itself (``python -m service serve`` on 127.0.0.1, a free
port; ``--model DIR`` for a non-default tokenizer, ``--no-batching`` for the comparison), runs bounded
scenarios, prints one table with absolute figures and the ratios measured in this run, and writes into
``--out-dir``: ``benchmark.json`` (every figure, the per-round values, and a ``targets`` section),
``benchmark.txt`` (the printed table), four PNG plots (throughput vs batch size, throughput vs concurrency,
latency percentiles, long-text scaling) and the server logs. Every process it starts is stopped by PID when it
ends, even on error or Ctrl-C. Exit status: 0, or 1 when a scenario failed (the files are still written).

Texts: real Chinese product reviews and English prose (testkit.assets), in three buckets -- short (natural
texts under 100 characters), medium (~300) and long (~1000; consecutive texts joined and cut). Tokenizers:
the embedded default (WordPiece) and Anthropic's byte-level BPE (``--tokenizers`` to choose).

Scenarios, each against its in-process counterpart on the same texts (``benchmarks/scenarios/``):

1. One client, batches of 256, padding="longest", truncation=True, max_length=128. Service JSON (decoded
   with orjson + numpy into torch tensors) and service binary (``Accept: application/vnd.safetensors``,
   decoded with ``safetensors.torch.load``) vs in-process Rust ``encode_batch`` and ``encode_batch_fast``
   (padding and truncation set on the Rust tokenizer; the fast one, which skips offsets, is the strongest
   in-process baseline) and vs transformers ``tokenizer(texts, ..., return_tensors="pt")``. Plus a
   batch-size sweep for the plot.
2. Concurrent clients sending one ~300-character text per request (64, and a 1/4/16/64 sweep), to a
   server with batching on (defaults: no gather window, a batch is whatever queued while the previous one
   ran), one with batching on and a 2 ms gather window (``--batch-wait-ms 2``) and one with batching off, vs
   the in-process rate of ``encode_batch`` (and ``encode_batch_fast``, transformers ``__call__``) in batches
   of 256. Load generator: a raw asyncio HTTP/1.1
   keep-alive client (``benchmarks.loadgen``, on uvloop). Reports latency percentiles, client CPU
   (process_time of the load generator) and server CPU per request (utime+stime of the server from
   /proc/<pid>/stat, all threads, tokenizing included; "overhead" subtracts the CPU in-process encode_batch
   spends per text).
3. DataLoader: runs ``python -m benchmarks.dataloader_compare`` in its own process and includes its figures.
   Without torch it is reported as skipped, with the reason; if it crashes or times out, the run fails.
4. Long-text scaling: tokens/s vs text length (100 to 50k characters, no truncation), service binary vs
   in-process ``encode_batch``, ``encode_batch_fast`` and transformers ``__call__``.
5. Less padding: runs ``python -m benchmarks.padding_compare`` in its own process: a DataLoader through the
   service on the review corpus with random batches (``padding="longest"``) vs ``TokenBudgetBatchSampler``
   vs packed batches, at the same token budget (padding fraction, real tokens/s into a modelled training
   step and into a loop that does nothing), and ``/lengths`` vs ``/encode`` texts/s on the same texts.
6. Pre-tokenizing a corpus (``benchmarks/scenarios/pretokenize.py``): ``tokenizer-service pretokenize`` vs the
   same reading and writing with in-process ``encode_batch`` in one process vs ``datasets.map(num_proc=2)``,
   each run in its own process on the same JSON Lines corpus (32 MiB; smoke 512 KiB); then the worker's peak
   RSS on a 1 GB corpus (smoke: 2 MiB; most of the scenario's ~30 minutes on 2 busy cores).
7. Pre-tokenizing from and to object storage (``benchmarks/scenarios/object_storage.py``): the same pretokenize
   worker on local files and on ``s3://`` of a real S3-protocol server on 127.0.0.1 (moto), tokens/s side by
   side (32 MiB, rounds interleaved), then its peak RSS on 256 MiB, local and s3:// (smoke: 512 KiB, 2 MiB).
8. Conversations (``benchmarks/chat_compare.py``, in its own process): conversations/s of ``/chat/encode``
   (batches of 64 and 256, binary: ragged, and padded as safetensors tensors; masks asked for) vs in-process
   ``apply_chat_template`` on the same conversations, with each side's parts alone (render, encode, ids only)
   to say where the time goes; and the chat collator in DataLoader workers vs ``apply_chat_template`` in the
   collate_fn.
Split ("split"): runs ``python -m benchmarks.cpu_split`` in its own process: one server's CPU per batch of 256
(3 clients, padding="longest", truncation, max_length=128), the GIL side (its Python threads) against the Rust
pool, beside one parallelism-off worker, on the corpora of issue 33's table; one process's ceiling is 1 / GIL
side.
Scaling ("scaling"): runs ``python -m benchmarks.scaling`` in its own process (~10 min on 2 cores): per corpus of
the split, the split itself, then batches/s on 1 and 2 cores (every process that makes the batches pinned to
them, the load generator included) of one replica x 2 threads, 2 replicas x 1 thread (``TokenizerClient.launch``)
and the workaround (2 parallelism-off processes), for batches of 256 and through the DataLoader collator; and a
PROJECTION to 16/64/128 cores for one process, ``replicas="auto"`` and the workaround, printed with its model
(``benchmarks.projection``).
Server memory: VmRSS at start, after each scenario and at the end, and VmHWM (peak), from /proc; and a
soak ("rss"): the default tokenizer's server in a real ``[server]``-only venv (``benchmarks.server_venv``, made
once under .cache/; torch absent -- in this venv transformers would import it, +180 MB), under rounds of the
same mixed load, RSS after each.

Fairness: the in-process baselines run in their own process (``benchmarks.inprocess``,
TOKENIZERS_PARALLELISM=true, the same number of Rust threads as the server, never forked), not beside the
load generator's event loop. Measurements are interleaved in rounds (each round measures every variant once,
in rotated order) and the median over rounds is reported; ratios are ratios of those medians. Every
measurement also records the CPU used by other processes on the machine ("other cores"); a note flags a
figure taken while the machine was busy; the run first waits (``--wait-quiet``, bounded) for a quiet machine.
Counts: every loop is bounded in iterations and in seconds (``benchmarks.profiles``).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks import loadgen
from benchmarks.machine import BUSY_CORES, available_cpus, wait_for_quiet
from benchmarks.processes import BenchServer, InProcessWorker, Startable, start_all
from benchmarks.profiles import FULL, SMOKE, Profile
from benchmarks.progress import log
from benchmarks.report import write_report
from benchmarks.scenarios import (
    batch_sizes,
    chat,
    concurrency,
    cpu_split,
    dataloader,
    long_texts,
    object_storage,
    padding,
    pretokenize,
    rss_soak,
    scaling,
)
from benchmarks.scenarios.measuring import Sides
from benchmarks.service_client import ServiceClient
from benchmarks.targets import evaluate_targets
from benchmarks.textsets import build_text_sets, write_text_sets
from testkit.servers import REPO

VERSIONS_OF = ("tokenizers", "transformers", "torch", "fastapi", "uvicorn", "orjson", "safetensors", "numpy")
NOT_SELECTED = "not selected (--scenarios)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; the help text is this module's docstring."""
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every scenario with tiny counts, default tokenizer only: ~90 s on 2 cores (for CI)",
    )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=REPO / "bench-results",
        help="where benchmark.json, the PNG plots and the logs go (default: bench-results/)",
    )
    parser.add_argument(
        "--tokenizers",
        default=None,
        help="comma-separated: default, bytelevel_bpe, sentencepiece (default: default,bytelevel_bpe; smoke: default)",
    )
    parser.add_argument(
        "--scenarios",
        default="1,2,3,4,5,6,7,8,rss,split,scaling",
        help="comma-separated subset of 1,2,3,4,5,6,7,8,rss,split,scaling (rss: the memory soak; split: the CPU "
        "split by thread; scaling: replicas and the workaround on 1 and 2 cores, and projected; default: all)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds per scenario (each round measures every variant once; medians are reported)",
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=None,
        metavar="SECONDS",
        help="before starting, wait at most this long for other processes to use under "
        f"{BUSY_CORES} cores (default: 120; smoke: 0)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every measurement duration by this (e.g. 0.5 for a quicker, noisier run)",
    )
    return parser.parse_args(argv)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def select_profile(args: argparse.Namespace) -> Profile:
    """The smoke or the full profile, narrowed by --tokenizers, --rounds and --time-scale."""
    profile = SMOKE if args.smoke else FULL
    if args.tokenizers:
        profile = profile.with_tokenizers(tuple(_names(args.tokenizers)))
    if args.rounds:
        profile = profile.with_rounds(args.rounds)
    if args.time_scale != 1.0:
        profile = profile.scaled(args.time_scale)
    return profile


class Bench:
    """One run's measurements, in order: per tokenizer scenarios 1, 4 and 2 on the same servers; then the RSS
    soak on its own server; then scenarios 3 and 5, each in its own process; then scenarios 6 and 7 (each its
    own server and processes); then scenario 8, the CPU split and scaling, each in its own process."""

    def __init__(self, profile: Profile, out_dir: Path, scenarios: set[str], work_dir: Path) -> None:
        self.profile = profile
        self.out_dir = out_dir
        self.log_dir = out_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.scenarios = scenarios
        self.work_dir = work_dir
        self.threads = available_cpus()
        self.client = ServiceClient()
        self.sets = build_text_sets(profile)
        self.texts_file = write_text_sets(self.sets, work_dir / "texts.json")
        self.results: dict[str, Any] = {
            "scenario1": batch_sizes.empty_results(),
            "scenario2": concurrency.empty_results(),
            "scenario3": {},
            "scenario4": long_texts.empty_results(),
            "scenario5": {},
            "scenario6": pretokenize.empty_results(),
            "scenario7": object_storage.empty_results(),
            "scenario8": {},
            "split": {},
            "scaling": {},
            "servers": {},
            "rss_soak": {},
        }

    def run(self) -> dict[str, Any]:
        """Every selected scenario; the results, by section."""
        if self.scenarios & {"1", "2", "4"}:
            for tokenizer in self.profile.tokenizers:
                self.run_tokenizer(tokenizer)
        self.results["rss_soak"] = (
            rss_soak.soak(self.profile, self.sets, self.log_dir)
            if "rss" in self.scenarios
            else {"skipped": NOT_SELECTED}
        )
        self.results["scenario3"] = (
            dataloader.run(self.out_dir, self.profile) if "3" in self.scenarios else {"skipped": NOT_SELECTED}
        )
        self.results["scenario5"] = (
            padding.run(self.out_dir, self.profile) if "5" in self.scenarios else {"skipped": NOT_SELECTED}
        )
        self.results["scenario6"] = (
            pretokenize.run(self.profile, self.log_dir, self.work_dir)
            if "6" in self.scenarios
            else {**pretokenize.empty_results(), "skipped": NOT_SELECTED}
        )
        self.results["scenario7"] = (
            object_storage.run(self.profile, self.log_dir, self.work_dir)
            if "7" in self.scenarios
            else {**object_storage.empty_results(), "skipped": NOT_SELECTED}
        )
        self.results["scenario8"] = (
            chat.run(self.out_dir, self.profile) if "8" in self.scenarios else {"skipped": NOT_SELECTED}
        )
        self.results["split"] = (
            cpu_split.run(self.out_dir, self.profile) if "split" in self.scenarios else {"skipped": NOT_SELECTED}
        )
        self.results["scaling"] = (
            scaling.run(self.out_dir, self.profile) if "scaling" in self.scenarios else {"skipped": NOT_SELECTED}
        )
        return self.results

    def run_tokenizer(self, tokenizer: str) -> None:
        """Scenarios 1, 4 and 2 for one tokenizer, with its in-process worker and servers, stopped at the end."""
        worker = InProcessWorker(tokenizer, self.texts_file, self.log_dir, self.threads)
        on = BenchServer(tokenizer, True, self.log_dir)
        others = concurrency.extra_servers(tokenizer, self.profile, self.log_dir) if "2" in self.scenarios else {}
        started: list[Startable] = [worker, on, *others.values()]
        sides = Sides(worker, on, self.client, self.sets, self.profile.max_batches)
        try:
            log(f"{tokenizer}: starting {len(started) - 1} server(s) and the in-process worker")
            start_all(started)
            if "1" in self.scenarios:
                batch_sizes.measure(self.results["scenario1"], tokenizer, self.profile, sides)
                on.sample_memory("after scenario 1")
            if "4" in self.scenarios:
                long_texts.measure(self.results["scenario4"], tokenizer, self.profile, sides)
                on.sample_memory("after scenario 4")
            if others:
                concurrency.measure(
                    self.results["scenario2"], tokenizer, self.profile, worker, {"on": on, **others}, self.sets["s2"]
                )
                for server in (on, *others.values()):
                    server.sample_memory("after scenario 2")
            for server in (on, *others.values()):
                server.sample_memory("end")
                self.results["servers"][server.name] = server.describe()
        finally:
            for item in started:
                item.stop()


def run_meta(args: argparse.Namespace, profile: Profile, scenarios: set[str], noise: float) -> dict[str, Any]:
    """The results' ``meta`` section: how this run was made and on what."""
    return {
        "command": shlex.join([sys.executable, *sys.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "smoke": args.smoke,
        "cpus": available_cpus(),
        "tokenizers": list(profile.tokenizers),
        "scenarios": sorted(scenarios),
        "profile": asdict(profile),
        "load_generator": loadgen.LOAD_GENERATOR,
        "other_cpu_cores_at_start": round(noise, 3),
        "python": sys.version.split()[0],
        "versions": {name: _version(name) for name in VERSIONS_OF},
    }


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the servers


def main(argv: list[str] | None = None) -> int:
    """Measure, report, and return the exit status: 1 if a scenario failed, else 0."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    profile = select_profile(args)
    scenarios = set(_names(args.scenarios))
    out_dir: Path = args.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    started = time.time()
    noise = wait_for_quiet(args.wait_quiet if args.wait_quiet is not None else (0.0 if args.smoke else 120.0))
    if noise > BUSY_CORES:
        log(f"warning: other processes are using {noise:.2f} cores; figures will be noisy")
    meta = run_meta(args, profile, scenarios, noise)
    with tempfile.TemporaryDirectory(prefix="tokenizer-bench-") as work:
        results = {"meta": meta, **Bench(profile, out_dir, scenarios, Path(work)).run()}
    meta["seconds"] = round(time.time() - started, 1)
    results["targets"] = evaluate_targets(results, profile)
    print(write_report(results, profile, out_dir))
    print(
        f"\nwrote {out_dir / 'benchmark.json'}, benchmark.txt and "
        f"{', '.join(Path(p).name for p in results['plots'].values())}"
    )
    sections = (
        ("3", "scenario3"),
        ("5", "scenario5"),
        ("6", "scenario6"),
        ("7", "scenario7"),
        ("8", "scenario8"),
        ("rss", "rss_soak"),
        ("split", "split"),
        ("scaling", "scaling"),
    )
    failed = {name: results[key]["failed"] for name, key in sections if "failed" in results[key]}
    for name, reason in failed.items():
        log(f"failed: scenario {name}: {reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
