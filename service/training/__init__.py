"""Training a tokenizer from a corpus sharded across workers, exactly as one process would on the whole corpus
(``docs/guides/train.md``; the modules: ``docs/explanations/how-it-works.md``). Server side, never the web layer
or the client; it reads the corpus with :mod:`service.jobs` as ``pretokenize`` does."""

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
