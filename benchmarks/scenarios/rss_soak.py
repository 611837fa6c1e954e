"""The RSS soak ("rss"): server memory under rounds of the same mixed load, as a ``[server]``-only install runs it.

The default tokenizer's server in a real torch-free venv (``benchmarks.server_venv``: the ``[server]`` extra
only, as ``pip install '.[server]'`` and the container image have it; in the dev venv transformers would
import torch, +180 MB), under rounds of: one client sending batches of 256 (every scenario-1 text set, and
10k-character texts), then 64 clients sending one text each. RSS is read after every round. The smoke run
soaks a server of this venv instead (no venv to build in CI; its figure then says whether torch was loaded).
"""

from __future__ import annotations

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
from benchmarks.server_venv import ServerVenvError, server_python

CONCURRENCY = 64
MAX_BATCHES_PER_ROUND = 100_000


def soak(profile: Profile, sets: dict[str, list[str]], log_dir: Path) -> dict[str, Any]:
    """Run the soak on its own server; its description, memory readings and RSS figures."""
    if profile.smoke:
        server = BenchServer("default", True, log_dir, variant="this venv")
    else:
        try:
            python = server_python()
        except ServerVenvError as exc:
            return {"failed": f"no torch-free venv for the soak: {exc}"}
        server = BenchServer("default", True, log_dir, variant="[server]-only venv, no torch", python=str(python))
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
