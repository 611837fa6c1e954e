"""The benchmark: tokenizer-service against in-process tokenization, same texts, same run -- every scenario.

    python -m benchmarks.run                        # the default scenarios: ~30 min on 2 cores
    python -m benchmarks.run --scenarios 2,split    # some of them (names below)
    python -m benchmarks.run --smoke                # every default scenario once, tiny counts (CI)
    python -m benchmarks.run --report bench-results/benchmark.json   # print a saved run's table again

Run from the repository root. Each scenario (``benchmarks/scenarios/``) measures its variants in interleaved rounds
on one harness (``benchmarks.harness``); the servers run on 127.0.0.1 and are stopped by PID, also on error or
Ctrl-C. Scenarios that fork DataLoader workers or set process-wide state run in a process of their own (this command
again, shared by the scenarios that need the same one). It prints one table and writes ``benchmark.json``,
``benchmark.txt``, the plots and the logs into ``--out-dir``. Exit status: 0, or 1 when a scenario failed.
The GPU benchmark is its own command: ``python -m benchmarks.gpu_feed`` (docs/guides/performance.md).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks import report
from benchmarks.harness import BUSY_CORES, Scenario, Settings, log, wait_for_quiet
from benchmarks.scenarios import SCENARIOS
from benchmarks.scenarios.scaling import reproject
from service.sizing import available_cpus
from testkit.servers import REPO

DEFAULT_SCENARIOS = ("1", "2", "3", "4", "5", "6", "8", "rss", "split", "scaling")
VERSIONS_OF = ("tokenizers", "transformers", "torch", "fastapi", "uvicorn", "orjson", "safetensors", "numpy")
NOT_SELECTED = "not selected (--scenarios)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The one command line of the benchmarks; the help text is this module's docstring and the scenarios' list."""
    doc = __doc__ or ""
    listing = "\n".join(
        f"  {name:<9} {scenario.summary}{'' if name in DEFAULT_SCENARIOS else ' (not in the default run)'}"
        for name, scenario in SCENARIOS.items()
    )
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 2)[2] + "\n\nScenarios:\n" + listing,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help="each scenario once with tiny counts (for CI)")
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS), help="comma-separated names (below)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench-results", help="default: bench-results/")
    parser.add_argument(
        "--tokenizers",
        default=None,
        help="comma-separated: default, bytelevel_bpe, sentencepiece (default: default,bytelevel_bpe; smoke: default)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every scenario (medians reported)")
    parser.add_argument(
        "--time-scale", type=float, default=1.0, help="multiply every measurement's duration (0.5: quicker, noisier)"
    )
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"wait at most this long for other processes to use under {BUSY_CORES} cores (default 120; smoke: 0)",
    )
    parser.add_argument(
        "--calibration",
        type=Path,
        default=None,
        help="scaling's projection with this pool curve (`tokenizer-service calibrate --json` output or a kept record; "
        "default: tokenizers #2337's); with --report, a saved run projected again",
    )
    parser.add_argument("--report", type=Path, default=None, help="print the table of a saved benchmark.json")
    # a scenario run in a process of its own writes its section here; a child process of a scenario is a call
    parser.add_argument("--section-out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--call", nargs=2, metavar=("FUNCTION", "JSON"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.scenario_names = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = [name for name in args.scenario_names if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios {', '.join(unknown)}: choose among {', '.join(SCENARIOS)}")
    return args


def _call(function: str, arguments: str) -> int:
    module, name = function.split(":")
    result = getattr(importlib.import_module(module), name)(*json.loads(arguments))
    if isinstance(result, int):
        return result
    print(json.dumps(result), flush=True)
    return 0


def measure_here(scenario: Scenario, settings: Settings) -> dict[str, Any]:
    """The scenario's section, measured in this process; a crash is recorded as its failure."""
    if scenario.needs_torch and importlib.util.find_spec("torch") is None:
        return {"skipped": "torch is not installed (the DataLoader comparisons need torch.utils.data)"}
    try:
        return scenario.measure(settings)
    except Exception as exc:  # noqa: BLE001 -- one scenario's failure is reported; the others still run
        log(f"scenario {scenario.name} failed: {type(exc).__name__}: {exc}")
        return {"failed": f"{type(exc).__name__}: {exc}"}


def measure_in_own_process(scenarios: list[Scenario], settings: Settings, argv: list[str]) -> dict[str, Any]:
    """This command again for ``scenarios`` alone (they name the same process), in a new session, bounded by their
    timeouts; their sections, by name."""
    names = [scenario.name for scenario in scenarios]
    sections_file = settings.out_dir / f"sections-{names[0]}.json"
    command = [sys.executable, "-m", "benchmarks.run", *argv, "--scenarios", ",".join(names)]
    command += ["--section-out", str(sections_file), "--out-dir", str(settings.out_dir), "--wait-quiet", "0"]
    log_path = settings.log_dir / f"scenarios-{'-'.join(names)}.log"
    timeout = sum(scenario.timeout[1] if settings.smoke else scenario.timeout[0] for scenario in scenarios)
    log(f"scenarios {', '.join(names)}, in a process of their own ({scenarios[0].process}): {shlex.join(command)}")
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(command, cwd=REPO, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()  # it stops its own servers on SIGTERM
            proc.wait(30)
            return {name: {"failed": f"did not finish in {timeout:g} s; see {log_path}"} for name in names}
    if returncode != 0 or not sections_file.exists():
        tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-15:])
        log(f"scenarios {', '.join(names)} failed:\n{tail}")
        return {name: {"failed": f"exited with {returncode}; see {log_path}"} for name in names}
    sections: dict[str, Any] = json.loads(sections_file.read_text())
    sections_file.unlink()
    return sections


def run_meta(args: argparse.Namespace, settings: Settings, noise: float) -> dict[str, Any]:
    """The results' ``meta`` section: how this run was made and on what."""
    versions = {}
    for name in VERSIONS_OF:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "command": shlex.join([sys.executable, *sys.argv]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "smoke": settings.smoke,
        "cpus": available_cpus(),
        "tokenizers": list(settings.tokenizers),
        "scenarios": args.scenario_names,
        "other_cpu_cores_at_start": round(noise, 3),
        "python": sys.version.split()[0],
        "versions": versions,
    }


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the servers


def main(argv: list[str] | None = None) -> int:
    """Measure, report, and return the exit status: 1 if a scenario failed, else 0."""
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.call:
        return _call(*args.call)
    if args.report:
        saved = json.loads(args.report.read_text())
        if args.calibration and "scaling" in saved:  # the projection again, with a calibration's pool curve
            saved["scaling"] = reproject(saved["scaling"], args.calibration)
            saved["targets"] = report.targets_of(saved)
        print(report.render(saved))
        return 0
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    out_dir: Path = args.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    default_tokenizers = "default" if args.smoke else "default,bytelevel_bpe"
    tokenizers = tuple(name.strip() for name in (args.tokenizers or default_tokenizers).split(",") if name.strip())
    passed_on = [a for a in argv if a == "--smoke"] + (["--tokenizers", args.tokenizers] if args.tokenizers else [])
    passed_on += (["--rounds", str(args.rounds)] if args.rounds else []) + ["--time-scale", str(args.time_scale)]
    passed_on += ["--calibration", str(args.calibration.resolve())] if args.calibration else []

    started = time.time()
    with tempfile.TemporaryDirectory(prefix="tokenizer-bench-") as work:
        settings = Settings(args.smoke, out_dir, Path(work), tokenizers, args.rounds, args.time_scale, args.calibration)
        selected = [scenario for name, scenario in SCENARIOS.items() if name in args.scenario_names]
        if args.section_out:  # the scenarios of one process, in the process their runner started for them
            try:
                sections = {scenario.name: measure_here(scenario, settings) for scenario in selected}
            finally:
                settings.stop_shared()
            args.section_out.write_text(json.dumps(sections, default=str))
            return 0
        wait = args.wait_quiet if args.wait_quiet is not None else (0.0 if args.smoke else 120.0)
        noise = wait_for_quiet(wait)
        if noise > BUSY_CORES:
            log(f"warning: other processes are using {noise:.2f} cores; figures will be noisy")
        results: dict[str, Any] = {"meta": run_meta(args, settings, noise)}
        processes = {scenario.process: [s for s in selected if s.process == scenario.process] for scenario in selected}
        try:
            for scenario in processes.pop("", []):
                results[scenario.name] = measure_here(scenario, settings)
        finally:
            settings.stop_shared()
        for group in processes.values():
            results |= measure_in_own_process(group, settings, passed_on)
    results["meta"]["seconds"] = round(time.time() - started, 1)
    for name in SCENARIOS:
        results.setdefault(name, {"skipped": NOT_SELECTED})
    text = report.write(results, out_dir)
    print(text)
    print(f"\nwrote {out_dir / 'benchmark.json'}, benchmark.txt, the plots and logs/")
    failed = {name: section["failed"] for name, section in results.items() if "failed" in section}
    for name, reason in failed.items():
        log(f"failed: scenario {name}: {reason}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
