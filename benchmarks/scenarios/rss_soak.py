"""The RSS soak ("rss"): server memory under rounds of the same mixed load, as a ``[server]``-only install runs it.

The default tokenizer's server without torch (it is not installed there; in this venv transformers would
import it, +180 MB; here it is hidden from the server with a sitecustomize), under rounds of: one client
sending batches of 256 (every scenario-1 text set, and 10k-character texts), then 64 clients sending one
text each. RSS is read after every round.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks import corpus
from benchmarks.loadgen import SAFETENSORS_MEDIA_TYPE
from benchmarks.processes import BenchServer
from benchmarks.profiles import Profile
from benchmarks.progress import log
from benchmarks.scenarios.concurrency import one_text_bodies, raw_requests, run_load
from benchmarks.scenarios.measuring import OPTIONS_BATCH

CONCURRENCY = 64
MAX_BATCHES_PER_ROUND = 100_000


def _without_torch(work_dir: Path) -> str:
    """A PYTHONPATH whose sitecustomize hides torch, as in a ``[server]``-only install."""
    site = work_dir / "without_torch"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import sys\n\n# as in a [server]-only install, where torch is absent\nsys.modules.setdefault('torch', None)\n"
    )
    return os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))


def soak(profile: Profile, sets: dict[str, list[str]], log_dir: Path, work_dir: Path) -> dict[str, Any]:
    """Run the soak on its own server; its description, memory readings and RSS figures."""
    server = BenchServer(
        "default", True, log_dir, env={"PYTHONPATH": _without_torch(work_dir)}, variant="torch not installed"
    )
    batches = [
        b
        for name in sorted(sets)
        if name.split("-")[0] in corpus.LANGUAGES
        for b in corpus.batches_of(sets[name], 256, limit=4)
    ]
    batches += corpus.batches_of(sets.get("chars-10000", sets["zh-long"]), 25, limit=2)
    bodies = one_text_bodies(sets["s2"])
    try:
        log(f"RSS soak: {profile.soak_rounds} rounds on {server.name}")
        server.start()
        requests = raw_requests(server, bodies)
        for round_ in range(profile.soak_rounds):
            deadline = time.perf_counter() + profile.soak_seconds / 2
            sent = 0
            while time.perf_counter() < deadline or sent < len(batches):
                server.encode(
                    orjson.dumps({"texts": batches[sent % len(batches)], **OPTIONS_BATCH}), SAFETENSORS_MEDIA_TYPE
                )
                sent += 1
                if sent >= MAX_BATCHES_PER_ROUND:
                    break
            run_load(
                server,
                requests,
                concurrency=CONCURRENCY,
                warmup=0.0,
                duration=profile.soak_seconds / 2,
                max_requests=profile.s2_max_requests,
            )
            server.sample_memory(f"after round {round_ + 1}")
    finally:
        server.stop()
    rss = [m["rss_mb"] for m in server.memory]
    return {
        **server.describe(),
        "rss_start_mb": rss[0],
        "rss_end_mb": rss[-1],
        "peak_mb": max(m["peak_mb"] for m in server.memory),
        "growth_after_first_round_mb": rss[-1] - rss[1] if len(rss) > 1 else 0.0,
    }
