"""The one client that measures the service in scenarios 1 and 4: sequential requests over one keep-alive
connection, each answer decoded into torch tensors the way a training loop would use it (JSON with orjson +
numpy, binary with ``safetensors.torch.load``), timed from request to tensors.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from benchmarks.loadgen import SAFETENSORS_MEDIA_TYPE, CpuProbe
from benchmarks.processes import BenchServer
from benchmarks.timing import time_batches


def _decode_binary(payload: bytes) -> dict[str, Any]:
    from safetensors.torch import load

    return load(payload)


def _decode_json(payload: bytes) -> dict[str, Any]:
    import numpy as np
    import torch

    return {k: torch.from_numpy(np.asarray(v, dtype=np.int64)) for k, v in orjson.loads(payload).items()}


class ServiceClient:
    """Sequential requests over one keep-alive connection, decoded to torch tensors like a training loop would."""

    def __init__(self) -> None:
        self._tokens: dict[tuple[str, str, int, str], list[int]] = {}

    def measure(
        self,
        server: BenchServer,
        set_key: str,
        batches: list[list[str]],
        options: dict[str, Any],
        accept: str,
        seconds: float,
        max_batches: int,
    ) -> dict[str, Any]:
        """Cycle through ``batches`` for ``seconds`` (at most ``max_batches`` requests): counts, latencies, CPU.

        The first measurement of a set also makes one untimed pass that counts its real (unpadded) tokens;
        later ones warm up with one request.
        """
        decode = _decode_binary if accept == SAFETENSORS_MEDIA_TYPE else _decode_json

        def one(batch: list[str]) -> dict[str, Any]:
            return decode(server.encode(orjson.dumps({"texts": batch, **options}), accept))

        key = (server.name, set_key, len(batches[0]), json.dumps(options, sort_keys=True))
        if key not in self._tokens:  # untimed warm-up pass that also counts the real tokens
            self._tokens[key] = [int(one(b)["attention_mask"].sum()) for b in batches]
        else:
            one(batches[0])
        probe = CpuProbe(server.pid)
        before = probe.snapshot()
        timed = time_batches(one, batches, self._tokens[key], seconds, max_batches)
        return {**timed, "cpu": CpuProbe.delta(before, probe.snapshot())}
