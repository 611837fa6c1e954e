"""What a calibration tokenizes: the user's texts (``--texts``: JSON Lines with a ``text`` field, or plain text, a
text per line), else a built-in mix of short, medium and long texts in the scripts the tokenizer covers: English
prose of Python's own documentation (``pydoc_data``, in every Python) for a tokenizer with Latin letters, and for
each other script with many single-character tokens in its vocabulary (Han, Hangul, Cyrillic...), text made of
those characters. Deterministic: every probe of one calibration gets the same texts."""

from __future__ import annotations

import json
import random
import unicodedata
from collections.abc import Iterable
from pathlib import Path

__all__ = ["BUILT_IN", "TEXTS", "TextsError", "built_in_texts", "read_texts"]

#: How many texts a calibration cycles through: enough for batches unlike each other, bounded in memory.
TEXTS = 1024
#: How ``--texts`` unset is named in a calibration's report and record.
BUILT_IN = "built-in mix"
#: (name, lowest, highest length in characters), in equal numbers.
LENGTHS = (("short", 20, 100), ("medium", 240, 360), ("long", 800, 1200))
#: A script counts as covered from this many single-character tokens in the vocabulary.
MIN_SCRIPT_TOKENS = 200
#: Scripts written without spaces between words.
UNSPACED = frozenset({"CJK", "HIRAGANA", "KATAKANA", "THAI"})


class TextsError(Exception):
    """``--texts`` cannot be read or holds no text: the message says what to pass instead."""


def read_texts(path: str | Path, limit: int = TEXTS) -> list[str]:
    """Up to ``limit`` non-empty texts of ``path``: a ``text`` field per line for ``.jsonl``/``.json``, else a
    text per line. Reads no further than it needs (a corpus file may be large)."""
    path = Path(path)
    jsonl = path.suffix in (".jsonl", ".json")
    texts: list[str] = []
    try:
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if len(texts) >= limit:
                    break
                if not line.strip():
                    continue
                texts.append(_json_text(line, path, number) if jsonl else line.rstrip("\n"))
    except FileNotFoundError:
        raise TextsError(
            f"--texts {path}: no such file; pass a file of your texts (a text per line, or JSON Lines "
            "with a 'text' field), or leave --texts out for the built-in mix"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TextsError(f"--texts {path}: cannot be read ({exc}); pass a UTF-8 text or JSON Lines file") from None
    texts = [text for text in texts if text.strip()]
    if not texts:
        raise TextsError(
            f"--texts {path} holds no text; pass a file with a text per line (or JSON Lines with a "
            "'text' field), or leave --texts out for the built-in mix"
        )
    return texts


def _json_text(line: str, path: Path, number: int) -> str:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise TextsError(f"--texts {path}:{number}: malformed JSON ({exc}); fix the line or pass a text file") from None
    text = record.get("text") if isinstance(record, dict) else None
    if not isinstance(text, str):
        raise TextsError(f"--texts {path}:{number}: no 'text' string in this record; each line needs one")
    return text


def built_in_texts(vocabulary: Iterable[str], count: int = TEXTS, seed: int = 0) -> list[str]:
    """``count`` texts, the lengths of :data:`LENGTHS` in turn, spread over the scripts ``vocabulary`` covers."""
    scripts = _covered_scripts(vocabulary)
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        script, characters = scripts[i % len(scripts)]
        _, low, high = LENGTHS[(i // len(scripts)) % len(LENGTHS)]
        length = rng.randint(low, high)
        texts.append(_prose(length, rng) if script == "LATIN" else _made_of(characters, script, length, rng))
    return texts


def _covered_scripts(vocabulary: Iterable[str]) -> list[tuple[str, list[str]]]:
    """(script, its single-character tokens) for each script with enough; Latin first, always where letters are."""
    by_script: dict[str, set[str]] = {}
    for token in vocabulary:
        character = token.removeprefix("##").removeprefix("\u0120").removeprefix("\u2581")
        if len(character) == 1 and character.isalpha():
            by_script.setdefault(_script(character), set()).add(character)
    covered = [(name, sorted(chars)) for name, chars in sorted(by_script.items()) if len(chars) >= MIN_SCRIPT_TOKENS]
    latin = [entry for entry in covered if entry[0] == "LATIN"]
    others = [entry for entry in covered if entry[0] != "LATIN"]
    if not latin and len(by_script.get("LATIN", ())) >= 26:
        latin = [("LATIN", sorted(by_script["LATIN"]))]  # a byte-level or small vocabulary: English still reads
    return latin + others or [("LATIN", [])]


def _script(character: str) -> str:
    name = unicodedata.name(character, "")
    return name.split(" ")[0] if name else "UNKNOWN"


def _prose(length: int, rng: random.Random) -> str:
    paragraphs = _paragraphs()
    parts: list[str] = []
    size = 0
    position = rng.randrange(len(paragraphs))
    while size < length:
        parts.append(paragraphs[position % len(paragraphs)])
        size += len(parts[-1]) + 1
        position += 1
    return " ".join(parts)[:length]


def _made_of(characters: list[str], script: str, length: int, rng: random.Random) -> str:
    spaced = script not in UNSPACED
    out: list[str] = []
    size = 0
    while size < length:
        word = "".join(rng.choice(characters) for _ in range(rng.randint(1, 4 if spaced else 12)))
        out.append(word)
        size += len(word) + spaced
    return (" " if spaced else "，").join(out)[:length]


_PARAGRAPHS: list[str] = []


def _paragraphs() -> list[str]:
    """Paragraphs of Python's own documentation (``pydoc_data.topics``), read once."""
    if not _PARAGRAPHS:
        from pydoc_data.topics import topics

        for key in sorted(topics):
            _PARAGRAPHS.extend(p for p in (" ".join(b.split()) for b in topics[key].split("\n\n")) if len(p) >= 20)
    return _PARAGRAPHS
