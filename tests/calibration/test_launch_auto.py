"""``TokenizerClient.launch(replicas="auto")`` takes its plan from this machine's kept calibration for the tokenizer:
a kept curve that says one pool scales gives one replica of every core; one that says a pool does not scale gives a
replica per core. The launch says which plan and where it came from in one log line, and either way the launched
replicas answer exactly what the in-process transformers tokenizer returns."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from service.calibration.measure import Calibration, Point, identify, thread_counts
from service.calibration.store import CALIBRATION_DIR_ENV, keep
from service.client import TokenizerClient
from service.launch.rendezvous import LAUNCH_DIR_ENV
from service.sizing import available_cpus, cpu_model
from testkit.launching import private_launch_directory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
OPTIONS = {"padding": "longest", "truncation": True, "max_length": 64}


def kept_calibration(identity: dict, cores: int, rate_per_thread: list[float]) -> Calibration:
    """A calibration of this machine and tokenizer whose pool runs at ``rate_per_thread`` x t batches/s."""
    curve = tuple(Point(t, r * t, 0.02, 0.0) for t, r in zip(thread_counts(cores), rate_per_thread, strict=True))
    return Calibration(
        cpu_model=cpu_model(),
        cores=cores,
        fingerprint=identity["fingerprint"],
        versions=identity["versions"],
        texts="built-in mix",
        measured_at="2026-12-06 00:00:00 UTC",
        curve=curve,
        gil_ms=1.0,
        rust_ms=100.0,
        worker_ms=101.0,
        replica_bytes=150 << 20,
    )


def test_the_launch_plans_from_the_kept_curve_and_the_tensors_stay_the_in_process_ones(
    tmp_path, monkeypatch, caplog, reference_tokenizers, corpus
):
    cores = available_cpus()
    if cores < 2:
        pytest.skip("one core allows one plan only (1 x 1): nothing to tell apart")
    monkeypatch.setenv(CALIBRATION_DIR_ENV, str(tmp_path))
    identity = identify(None)  # the real probe: this tokenizer's fingerprint, this interpreter's packages
    scales = [10.0] * len(thread_counts(cores))  # every thread as fast as the first: one pool takes every core
    flat = [10.0 / t for t in thread_counts(cores)]  # t threads no faster than one: a replica per core
    texts = corpus["zh"][:40] + corpus["en"][:24]
    expected = reference_tokenizers["wordpiece_default"](texts, **OPTIONS, return_tensors="np")
    seen = []
    for rates, plan in ((scales, (1, cores)), (flat, (cores, 1))):
        path = keep(kept_calibration(identity, cores, rates))
        with private_launch_directory() as folder:
            monkeypatch.setenv(LAUNCH_DIR_ENV, str(folder))
            caplog.clear()
            with (
                caplog.at_level(logging.INFO, logger="service.launch"),
                TokenizerClient.launch(replicas="auto") as client,
            ):
                answer = client(texts, **OPTIONS, return_tensors="np")
                threads = {TokenizerClient(url).info()["parallelism"]["rust_threads"] for url in client.service.urls}
                seen.append((client.service.replicas, threads))
        lines = [r.getMessage() for r in caplog.records if "replicas='auto'" in r.getMessage()]
        assert len(lines) == 1 and f"the calibration kept at {path}" in lines[0], lines
        assert seen[-1] == (plan[0], {plan[1]}), seen
        for key, value in expected.items():
            assert np.array_equal(answer[key], value), key
    assert seen[0] != seen[1]  # the kept curve, and nothing else, changed the plan
