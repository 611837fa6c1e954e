"""What one training run is asked to do: :class:`TrainConfig`, checked when it is built."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..jobs import JobConfig, is_url, parse_size
from ..jobs.flags import flag
from ..jobs.progress import human
from ..jobs.work_units import format_size
from .recipes import PRESETS

#: Model families, one per preset (:data:`.recipes.PRESETS`).
MODELS = tuple(PRESETS)
#: What this process does (``--phase``'s help).
PHASES = ("count", "merge", "all")
#: What one distinct pre-token costs a counting process (string, dict entry, count, its share of the sorted
#: keys when spilled), measured on CPython 3.12 with short words.
BYTES_PER_PRETOKEN = 256
DEFAULT_COUNT_MEMORY = 1 << 30


@dataclass(frozen=True, kw_only=True)
class TrainConfig(JobConfig):
    """Every knob of ``tokenizer-service train``, each field declaring its CLI flag (``--help`` says what each
    means); those every sharded job has are :class:`JobConfig`'s."""

    model: str | None = field(
        default=None,
        metadata=flag("model family and its preset (with --like: optional, the source's family)", choices=MODELS),
    )
    vocab_size: int = field(
        default=32000,
        metadata=flag("tokens in the vocabulary, special tokens included", parse=int, metavar="N", required=True),
    )
    min_frequency: int = field(
        default=0,
        metadata=flag(
            "BPE/WordPiece: the least count of a pair to be merged; Unigram: the least count of a pre-token to be "
            "kept; always counted over the whole corpus",
            parse=int,
            metavar="K",
        ),
    )
    special_tokens: tuple[str, ...] | None = field(
        default=None,
        metadata=flag(
            "the special tokens, in id order; put this flag after the inputs",
            nargs="+",
            metavar="TOKEN",
            convert=tuple,
            default_text="the preset's or the --like tokenizer's",
        ),
    )
    like: str | None = field(
        default=None,
        metadata=flag(
            "keep the normalizer, pre-tokenizer, post-processor, decoder, special tokens and config of this "
            "tokenizer (a tokenizer.json, a directory, a hub id, or either under a URL), learning only the "
            "vocabulary",
            metavar="SRC",
        ),
    )
    revision: str | None = field(default=None, metadata=flag("hub revision of --like (pin a commit)", metavar="REV"))
    limit_alphabet: int | None = field(
        default=None,
        metadata=flag(
            "BPE/WordPiece: keep only this many characters, the most frequent",
            parse=int,
            metavar="N",
            default_text="all",
        ),
    )
    model_max_length: int | None = field(
        default=None,
        metadata=flag("the tokenizer's model_max_length", parse=int, metavar="N", default_text="the recipe's"),
    )
    phase: str = field(
        default="all",
        metadata=flag(
            "count: count this worker's units; merge: sum all counts and train; all: count, then worker 0 merges "
            "and trains",
            choices=PHASES,
        ),
    )
    counts_dir: str | Path | None = field(
        default=None,
        metadata=flag(
            "where the counts go, shared by all workers; a local path or a URL",
            name="--counts",
            metavar="DIR",
            default_text="OUT.counts, beside the tokenizer: kept for reruns, delete it when done",
        ),
    )
    processes: int | None = field(
        default=None,
        metadata=flag(
            "counting processes on this worker", parse=int, metavar="N", default_text="the CPUs this process may use"
        ),
    )
    count_memory: int = field(
        default=DEFAULT_COUNT_MEMORY,
        metadata=flag(
            "memory of distinct pre-tokens per counting process before they spill to disk (counts stay exact)",
            parse=parse_size,
            metavar="SIZE",
            shown=format_size,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model is None and self.like is None:
            raise ValueError(f"name the model family with --model ({', '.join(MODELS)}), or a tokenizer with --like")
        if self.model is not None and self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, not {self.model!r}")
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {self.phase!r}")
        if self.revision is not None and self.like is None:
            raise ValueError("--revision applies to --like (a hub tokenizer to take the recipe from)")
        # vocab_size's floor is the recipe's, checked once it is built (vocabulary.check_lower_bound)
        for name in ("limit_alphabet", "model_max_length", "processes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        if self.min_frequency < 0:
            raise ValueError(f"min_frequency must be 0 or more, not {self.min_frequency}")
        if self.count_memory < 64 * BYTES_PER_PRETOKEN:
            raise ValueError(f"count_memory must be at least {human(64 * BYTES_PER_PRETOKEN, 'B')}")
        if self.special_tokens is not None:
            if any(not token for token in self.special_tokens):
                raise ValueError("a special token cannot be empty")
            repeated = sorted({t for t in self.special_tokens if self.special_tokens.count(t) > 1})
            if repeated:
                raise ValueError(f"special tokens named twice: {', '.join(repeated)}")

    @property
    def counts(self) -> str:
        """``--counts``, else ``<out>.counts``."""
        if self.counts_dir is not None:
            return str(self.counts_dir)
        out = self.out_location.rstrip("/")
        return out + ".counts" if is_url(out) else str(Path(out).resolve()) + ".counts"

    def outputs(self) -> dict[str, str]:
        return {**super().outputs(), "--counts": self.counts}

    @property
    def max_words(self) -> int:
        """Distinct pre-tokens a counting process holds before it spills."""
        return max(64, self.count_memory // BYTES_PER_PRETOKEN)

    def training_options(self) -> dict[str, Any]:
        """The options that shape the tokenizer beyond the counts (recorded in the manifest)."""
        return {
            "vocab_size": self.vocab_size,
            "min_frequency": self.min_frequency,
            "limit_alphabet": self.limit_alphabet,
            "special_tokens": list(self.special_tokens) if self.special_tokens is not None else None,
            "model_max_length": self.model_max_length,
        }
