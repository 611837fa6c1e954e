"""How much a benchmark run measures: the counts and durations of the full run and of the smoke run.

Every loop of every scenario is bounded by these figures, in iterations and in seconds. The command line
can narrow a profile (tokenizers, rounds, a time scale) but never unbound it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Profile:
    """How much to measure. Every loop is bounded by these counts and durations."""

    tokenizers: tuple[str, ...] = ("default", "bytelevel_bpe")
    rounds: int = 3  # scenario 1 cells
    seconds: float = 0.4  # per scenario-1 measurement
    set_size: int = 1024  # texts per scenario-1 cell
    max_batches: int = 20_000  # per measurement, whatever the duration
    sweep_batches: tuple[int, ...] = (1, 8, 32, 128, 256, 1024)
    sweep_rounds: int = 2
    sweep_seconds: float = 0.3
    sweep_set_size: int = 2048
    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    s2_modes: tuple[str, ...] = ("on", "on-wait2", "off", "on-httptools", "on-h11")  # scenarios.concurrency.MODES
    s2_rounds: int = 2
    s2_warmup: float = 0.5
    s2_seconds: float = 1.5
    s2_max_requests: int = 50_000
    s2_set_size: int = 1024
    long_lengths: tuple[int, ...] = (100, 1_000, 10_000, 50_000)
    long_rounds: int = 2
    long_seconds: float = 0.8
    soak_rounds: int = 6  # RSS soak: rounds of mixed load, RSS read after each
    soak_seconds: float = 3.0  # per round: half one-client batches, half 64 concurrent clients
    dataloader_timeout: float = 300.0
    padding_timeout: float = 600.0  # scenario 5 (padding_compare): ~200 s on 2 busy cores
    chat_timeout: float = 600.0  # scenario 8 (chat_compare): ~160 s on 2 busy cores
    split_timeout: float = 600.0  # scenario split (cpu_split): ~2 min on 2 cores
    scaling_timeout: float = 1800.0  # scenario scaling (benchmarks.scaling): ~10 min on 2 cores
    pretok_bytes: int = 32 * 2**20  # scenario 6: the corpus every method pre-tokenizes
    pretok_rounds: int = 2
    pretok_rss_bytes: int = 2**30  # scenario 6, memory case: the service worker alone on this much input
    pretok_timeout: float = 3600.0  # per run
    storage_rss_bytes: int = 256 * 2**20  # scenario 7, memory case: local and s3:// (uploaded to moto first)
    smoke: bool = False  # passed on to dataloader_compare and padding_compare as --smoke

    def with_tokenizers(self, tokenizers: tuple[str, ...]) -> Profile:
        """The same profile for other tokenizers."""
        return replace(self, tokenizers=tokenizers)

    def with_rounds(self, rounds: int) -> Profile:
        """The same profile with ``rounds`` rounds in every scenario that measures in rounds."""
        return replace(self, rounds=rounds, sweep_rounds=rounds, s2_rounds=rounds, long_rounds=rounds)

    def scaled(self, factor: float) -> Profile:
        """The same profile with every measurement duration multiplied by ``factor``."""
        return replace(
            self,
            seconds=self.seconds * factor,
            sweep_seconds=self.sweep_seconds * factor,
            s2_seconds=self.s2_seconds * factor,
            long_seconds=self.long_seconds * factor,
        )


FULL = Profile()
SMOKE = Profile(
    smoke=True,
    tokenizers=("default",),
    rounds=1,
    seconds=0.05,
    set_size=256,
    max_batches=8,
    sweep_batches=(1, 32, 256),
    sweep_rounds=1,
    sweep_seconds=0.05,
    sweep_set_size=256,
    concurrency=(1, 8),
    s2_modes=("on", "off"),
    s2_rounds=1,
    s2_warmup=0.1,
    s2_seconds=0.4,
    s2_max_requests=2000,
    s2_set_size=64,
    long_lengths=(100, 10_000),
    long_rounds=1,
    long_seconds=0.05,
    soak_rounds=2,
    soak_seconds=0.4,
    dataloader_timeout=120.0,
    padding_timeout=150.0,
    chat_timeout=150.0,
    split_timeout=120.0,
    scaling_timeout=150.0,
    pretok_bytes=512 * 1024,
    pretok_rounds=1,
    pretok_rss_bytes=2 * 2**20,
    pretok_timeout=120.0,
    storage_rss_bytes=2 * 2**20,
)
