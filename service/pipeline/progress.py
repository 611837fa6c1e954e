"""Progress of a pre-tokenization worker: :class:`service.corpus.progress.Progress`, shared with the other
offline jobs (kept importable from here)."""

from ..corpus.progress import Progress, duration, human

__all__ = ["Progress", "duration", "human"]
