"""``tokenizer-service calibrate``: measure this machine with a tokenizer, print the curve and the plan, keep it for
``replicas="auto"``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ..embedded import DEFAULT_TOKENIZER
from ..plurals import counted
from ..sizing import AUTO, MODEL, Plan, allowed_cpus, memory_limit, plan_replicas
from ..suggestions import ArgumentParser
from .measure import MAX_OTHERS, MAX_SPREAD, Calibration, CalibrationError, Noise, calibrate
from .probes import BATCH, OPTIONS
from .store import CALIBRATION_DIR_ENV, keep
from .texts import TextsError

__all__ = ["build_parser", "main", "report"]

GIB = 1 << 30
#: What the report prints for a figure a busy calibration did not measure (it stopped before that probe).
NOT_MEASURED = "not measured (busy)"


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=prog,
        description="Measure what one tokenizer does on this machine -- its Rust pool at 1, 2, 4, ... threads up to "
        "the cores this process may use, one server process's GIL side, a replica's memory, the workaround's worker "
        "-- in short probe processes (seconds), print the curve and the replicas x threads it plans, and keep it: "
        'replicas="auto" (TokenizerClient.launch, serve --replicas auto) then uses it on this machine.',
    )
    parser.add_argument("--model", help=f"the tokenizer, as serve --model takes it (default: {DEFAULT_TOKENIZER})")
    parser.add_argument("--revision", help="hub revision for a hub model id")
    parser.add_argument(
        "--texts",
        metavar="FILE",
        help="your texts (a text per line, or JSON Lines with a 'text' field; the first 1024 are read); default: "
        "a built-in mix of short, medium and long texts in the tokenizer's scripts",
    )
    parser.add_argument("--cores", type=int, help="calibrate on this many of the CPUs this process may use")
    parser.add_argument(
        "--max-spread",
        type=float,
        default=MAX_SPREAD,
        metavar="SHARE",
        help=f"a probe's rounds may differ by this share of their median (default {MAX_SPREAD}); beyond, the "
        "machine is busy: the calibration stops at that probe and nothing is planned from it",
    )
    parser.add_argument(
        "--max-others",
        type=float,
        default=MAX_OTHERS,
        metavar="SHARE",
        help=f"other processes may keep the probed CPUs busy this share of the time (default {MAX_OTHERS})",
    )
    parser.add_argument(
        "--no-keep", action="store_true", help=f"print only; keep nothing (kept: ${CALIBRATION_DIR_ENV})"
    )
    parser.add_argument("--json", action="store_true", help="print the calibration and its plan as JSON")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "tokenizer-service calibrate") -> int:
    args = build_parser(prog).parse_args(argv)
    say = (lambda line: None) if args.json else (lambda line: print(f"  measuring {line}...", file=sys.stderr))
    try:
        calibration = calibrate(
            args.model,
            args.revision,
            texts=args.texts,
            cores=args.cores,
            noise=Noise(args.max_spread, args.max_others),
            say=say,
        )
    except (CalibrationError, TextsError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    memory = memory_limit()
    plan = calibration.plan(memory)
    path = None
    if not args.no_keep and plan is not None:
        path = keep(calibration)
    if args.json:
        document: dict[str, Any] = {"calibration": calibration.to_json(), "not_run": calibration.not_run}
        document |= {"plan": asdict(plan) if plan else None, "kept": str(path) if path else None}
        print(json.dumps(document, indent=1))
        return 0
    print(report(calibration, plan, memory, args.model, path))
    return 0


def report(calibration: Calibration, plan: Plan | None, memory: int | None, model: str | None, path: object) -> str:
    """The calibration as a reader wants it: the machine, the curve, the costs, the plan; each figure labelled."""
    c = calibration
    options = ", ".join(f"{k}={v!r}" for k, v in OPTIONS.items())
    lines = [
        f"{model or DEFAULT_TOKENIZER} on {c.cores} of {len(allowed_cpus())} CPUs ({c.cpu_model}), memory limit "
        + (f"{memory / GIB:.1f} GiB" if memory else "unknown"),
        f"texts: {c.texts}; batches of {BATCH} ({options})",
        "",
        "The Rust pool of one tokenizer (measured):",
        "  threads  batches/s  speedup  per thread  spread  others",
    ]
    one = c.curve[0].rate
    for p in c.curve:
        lines.append(
            f"  {p.threads:>7}  {p.rate:>9.1f}  {p.rate / one:>6.2f}x  {p.rate / one / p.threads:>10.0%}  "
            f"{p.spread:>6.0%}  {p.others:>6.0%}"
        )
    lines += [f"  {t:>7}  {NOT_MEASURED}" for t in c.threads_not_run]
    rss = None if c.replica_bytes is None else c.replica_bytes / (1 << 20)
    lines += [
        "",
        "One server process, per batch:",
        _cost("G  GIL side", c.gil_ms, "ms", "a server of one Rust thread under load, its Python threads"),
        _cost("R  Rust pool", c.rust_ms, "ms", "its CPU on one thread (the curve: its wall time)"),
        _cost("W  one worker", c.worker_ms, "ms", "the workaround's, parallelism off, one CPU"),
        _cost("   replica RSS", rss, "MB", "the server's peak under load", ".0f"),
        "",
    ]
    if plan is None:
        fallback = plan_replicas(AUTO, cores=c.cores)
        lines += [
            "BUSY: this measurement is noise, and nothing is planned from it:",
            *(f"  - {reason}" for reason in c.busy),
            *(
                [
                    f"the calibration stopped there, at {c.stopped_at}: {_listed(c.not_run)} "
                    f"{'was' if len(c.not_run) == 1 else 'were'} not run (nothing is planned from a busy machine)"
                ]
                if c.not_run
                else []
            ),
            f'replicas="auto" uses {fallback.summary} until a calibration on a quieter machine is kept',
            "(run it again when the machine is quiet; --max-spread/--max-others say how much noise to accept).",
        ]
        return "\n".join(lines)
    each = "" if plan.replicas == 1 else "each "
    cores = counted(plan.cores, "core")
    lines += [
        f'Plan for {cores} (derived from the measurements by the model):  replicas="auto" = '
        f"{plan.replicas} x {counted(plan.threads, 'Rust thread')}",
        f"  Kubernetes: pods of one process with {counted(plan.threads, 'CPU')} {each}(cpu limit = "
        f"--threads {plan.threads}), {plan.replicas} per {cores} of this node type",
        f"  expected: {plan.batches_per_second:.0f} batches/s, {plan.versus_workaround:.2f}x the workaround "
        f"({counted(plan.cores, 'parallelism-off worker')}: {plan.workaround_per_second:.0f} batches/s) -- "
        "derived, not measured",
    ]
    if plan.memory_cap is not None:
        lines.append(f"  memory: the limit holds {plan.memory_cap} replicas, fewer than the cores would take")
    lines += [f"  model: {MODEL}", ""]
    if path is not None:
        lines.append(f'Kept at {path}: replicas="auto" on this machine, tokenizer and packages uses it.')
    else:
        lines.append("Not kept (--no-keep).")
    return "\n".join(lines)


def _cost(label: str, value: float | None, unit: str, how: str, form: str = ".2f") -> str:
    """A row of the costs: the figure and how it was measured, or that a busy calibration stopped before it."""
    if value is None:
        return f"  {label:<18}{NOT_MEASURED}"
    return f"  {label:<18}{value:8{form}} {unit}  measured: {how}"


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
