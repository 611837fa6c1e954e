"""What the trainer is told besides the counts (:class:`VocabularyPlan`): the alphabet, the pieces given fixed
ids, the smallest vocabulary that holds them, the replay's separator. With an affix (``##x``, ``</w>``) the
alphabet and affixed pieces get their ids up front, in code-point order, not the trainers' hash order;
``--limit-alphabet`` breaks ties by code point (``docs/guides/train.md``, "Exactness")."""

from __future__ import annotations

from dataclasses import dataclass

from ..jobs import JobError
from .counting import ALONE, LAST, MIDDLE, CharStats
from .recipes import BYTE_PIECES, Recipe

#: Separators of replayed pre-tokens, in order of preference: the first absent from the corpus is used.
SEPARATOR_CANDIDATES = (
    "\x00",
    *map(chr, range(1, 32)),
    "\ufffe",
    "\uffff",
    *map(chr, range(0xF0000, 0xF0100)),
)


class VocabularyTooSmall(JobError):
    """``--vocab-size`` cannot hold the alphabet and the special tokens; the message names both numbers."""


@dataclass(frozen=True)
class VocabularyPlan:
    """``alphabet``: the characters the vocabulary starts from. ``seeds``: tokens with ids right after the special
    tokens (byte pieces, then, with affixes, the alphabet and its affixed pieces). ``minimum``: the smallest
    vocabulary holding the special tokens, seeds and alphabet. ``separator``: a character no pre-token holds."""

    alphabet: tuple[str, ...]
    seeds: tuple[str, ...]
    minimum: int
    specials: int
    byte_pieces: int
    affixed_pieces: int
    initial_alphabet: tuple[str, ...]
    limit_alphabet: int | None
    separator: str

    def describe(self) -> dict[str, object]:
        return {
            "alphabet": len(self.alphabet),
            "affixed_pieces": self.affixed_pieces,
            "byte_pieces": self.byte_pieces,
            "special_tokens": self.specials,
            "seeded_ids": len(self.seeds),
            "minimum_vocab_size": self.minimum,
            "limit_alphabet": self.limit_alphabet,
        }


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _too_small(
    vocab_size: int, minimum: int, parts: list[str], byte_pieces: int, specials: int, hint: str = ""
) -> VocabularyTooSmall:
    if byte_pieces:
        parts.append(_count(byte_pieces, "byte piece"))
    parts.append(_count(specials, "special token"))
    made_of = " plus ".join(parts) if minimum else "one token"
    minimum = max(1, minimum)
    return VocabularyTooSmall(
        f"--vocab-size {vocab_size:,} is smaller than {made_of}: at least {minimum:,} tokens are needed; raise "
        f"--vocab-size to {minimum:,} or more{hint}"
    )


def check_lower_bound(recipe: Recipe, vocab_size: int) -> None:
    """Refuse, before any work, a ``vocab_size`` below what the recipe needs whatever the corpus (special
    tokens, byte pieces, initial alphabet; at least one token)."""
    specials = set(recipe.special_contents)
    bytes_ = set(BYTE_PIECES) - specials if recipe.byte_fallback else set()
    initial = set(recipe.initial_alphabet) - specials - bytes_
    parts = [f"the alphabet ({_count(len(initial), 'byte-level symbol')})"] if initial else []
    minimum = len(specials) + len(bytes_) + len(initial)
    if vocab_size < max(1, minimum):
        raise _too_small(vocab_size, minimum, parts, len(bytes_), len(specials))


def plan_vocabulary(recipe: Recipe, stats: CharStats, vocab_size: int, limit_alphabet: int | None) -> VocabularyPlan:
    """The plan for a corpus whose characters are ``stats``, or :class:`VocabularyTooSmall`."""
    specials = recipe.special_contents
    special_set = set(specials)
    counts: dict[str, float] = dict(stats.counts)
    for char in recipe.initial_alphabet:
        counts[char] = float("inf")  # as the trainer does: the initial alphabet is always kept first
    limited = limit_alphabet is not None and limit_alphabet < len(counts)
    kept = sorted(counts, key=lambda char: (-counts[char], ord(char)))[:limit_alphabet] if limited else counts
    alphabet = tuple(sorted(kept))
    bytes_ = [piece for piece in BYTE_PIECES if piece not in special_set] if recipe.byte_fallback else []
    alphabet_new = [char for char in alphabet if char not in special_set and char not in bytes_]
    affixed: list[str] = []
    seeds: list[str] = list(bytes_)
    unigram = recipe.family == "unigram"
    if not unigram and (recipe.prefix or recipe.suffix):
        prefix, suffix = recipe.prefix, recipe.suffix
        pieces = set()
        for char in alphabet:
            mask = stats.masks.get(char, 0)
            if mask & MIDDLE:
                pieces.add(prefix + char)
            if mask & LAST:
                pieces.add(prefix + char + suffix)
            if mask & ALONE:
                pieces.add(char + suffix)
        taken = special_set | set(bytes_) | set(alphabet)
        affixed = sorted(pieces - taken)
        seeds += alphabet_new + affixed
    minimum = len(specials) + len(bytes_) + len(alphabet_new) + len(affixed)
    if vocab_size < minimum:
        parts = [f"the alphabet of the corpus ({_count(len(alphabet_new), 'character')})"]
        if affixed:
            parts.append(f"{_count(len(affixed), 'piece')} with {recipe.prefix or recipe.suffix!r}")
        hint = "" if unigram else ", or keep fewer characters with --limit-alphabet"
        raise _too_small(vocab_size, minimum, parts, len(bytes_), len(specials), hint)
    separator = next((c for c in SEPARATOR_CANDIDATES if c not in counts), None)
    if separator is None:  # pragma: no cover
        raise VocabularyTooSmall("the corpus uses every separator candidate; cannot replay its counts")
    return VocabularyPlan(
        alphabet=alphabet,
        seeds=tuple(seeds),
        minimum=minimum,
        specials=len(specials),
        byte_pieces=len(bytes_),
        affixed_pieces=len(affixed),
        initial_alphabet=alphabet if limited else recipe.initial_alphabet,
        limit_alphabet=len(alphabet) if limited else None,
        separator=separator,
    )
