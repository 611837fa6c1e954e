"""Training a tokenizer from a corpus sharded across workers, exactly as one process would on the whole corpus.

Server side (it runs the tokenizers trainers), but never the web layer or the client. It reads the corpus with
:mod:`service.jobs` exactly as ``tokenizer-service pretokenize`` does (formats, units, worker index).

- :mod:`.recipes`: what the tokenizer is besides its vocabulary (presets, or ``--like`` an existing one).
- :mod:`.counting`: phase 1, every worker counts the pre-tokens of its units (processes, spills, exact).
- :mod:`.countfiles`: sorted count files and their exact streaming merge.
- :mod:`.vocabulary`: alphabet, fixed ids, the smallest vocabulary, checked before training.
- :mod:`.learning`: phase 2, replay the summed counts into the trainer, train once.
- :mod:`.assembly`: the whole tokenizer, written atomically with its manifest.
- :mod:`.runner` / :mod:`.cli`: ``tokenizer-service train`` (:func:`train` with a :class:`TrainConfig`): the
  counting step and worker 0's merge on the sharded-job executor of :mod:`service.jobs` (records, refusals,
  waiting for every unit).
"""

from .assembly import MANIFEST_NAME, read_manifest
from .counting import CountStats
from .options import MODELS, PHASES, TrainConfig
from .recipes import PRESETS, Recipe, RecipeError, build_recipe, preset
from .runner import Summary, describe_summary, train
from .vocabulary import VocabularyTooSmall

__all__ = [
    "TrainConfig",
    "MODELS",
    "PHASES",
    "train",
    "Summary",
    "describe_summary",
    "Recipe",
    "RecipeError",
    "build_recipe",
    "preset",
    "PRESETS",
    "MANIFEST_NAME",
    "read_manifest",
    "CountStats",
    "VocabularyTooSmall",
]
