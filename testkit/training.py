"""References for tokenizer training, built with the tokenizers API directly (as a user would), not with the
package's training code: ``train_from_iterator`` on raw texts, and the pre-tokens a trainer counts. Shared by
the tests and the training benchmark."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any


def _pipeline(family: str) -> Any:
    """A tokenizer holding the preset's normalizer and pre-tokenizer (and a WordLevel model with no vocabulary)."""
    from tokenizers import Tokenizer

    from service.training import preset

    recipe = preset(family)
    return Tokenizer.from_str(
        json.dumps(
            {
                "version": "1.0",
                "normalizer": recipe.normalizer,
                "pre_tokenizer": recipe.pre_tokenizer,
                "model": {"type": "WordLevel", "vocab": {}, "unk_token": "<unk>"},
            }
        )
    )


def reference_tokenizer(family: str, texts: Sequence[str], vocab_size: int, seeds: Sequence[str] = ()) -> Any:
    """``train_from_iterator`` on the raw ``texts`` in this process, with the preset's model, normalizer,
    pre-tokenizer and special tokens, and the trainers' defaults otherwise. ``seeds`` get ids right after the
    special tokens (passed as special tokens, then taken out of the added tokens)."""
    from tokenizers import AddedToken, Tokenizer, models, trainers

    from service.training import preset

    recipe = preset(family)
    model_type = {"bpe": models.BPE, "byte-level-bpe": models.BPE, "wordpiece": models.WordPiece}
    options = {k: v for k, v in recipe.model.items() if k != "type" and v is not None}
    tokenizer = Tokenizer(model_type[family](**options) if family in model_type else models.Unigram())
    pipeline = _pipeline(family)
    tokenizer.normalizer, tokenizer.pre_tokenizer = pipeline.normalizer, pipeline.pre_tokenizer
    specials = [AddedToken(**token) for token in recipe.special_tokens] + [
        AddedToken(seed, special=True, normalized=False) for seed in seeds
    ]
    trainer: Any
    if family == "wordpiece":
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    elif family == "unigram":
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=specials, unk_token=recipe.unk_token, show_progress=False
        )
    else:
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=list(recipe.initial_alphabet),
            show_progress=False,
        )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=len(texts))
    if seeds:
        document = json.loads(tokenizer.to_str())
        document["added_tokens"] = [t for t in document["added_tokens"] if t["content"] not in set(seeds)]
        tokenizer = Tokenizer.from_str(json.dumps(document))
    return tokenizer


def pretokens(family: str, texts: Sequence[str]) -> Counter[str]:
    """The pre-tokens of the raw ``texts`` (``normalize_str`` then ``pre_tokenize_str``), counted."""
    pipeline = _pipeline(family)
    counts: Counter[str] = Counter()
    for text in texts:
        normalized = pipeline.normalizer.normalize_str(text) if pipeline.normalizer else text
        counts.update(word for word, _ in pipeline.pre_tokenizer.pre_tokenize_str(normalized))
    return counts
