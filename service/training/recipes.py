"""The recipe of the tokenizer to train (:class:`Recipe`): everything but what is learnt from the corpus. It
comes from a preset per model family (after the tokenizers library's ``implementations``) or from an existing
tokenizer (``--like``, loaded as the server loads it): ``docs/guides/train.md`` describes both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..jobs import JobError, Storage, fetch_tokenizer, is_url

#: Roles transformers knows special tokens by, in the order its config lists them.
ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
#: The models the trainers can learn (WordLevel has nothing to learn beyond counts).
FAMILY_OF_MODEL = {"BPE": "bpe", "WordPiece": "wordpiece", "Unigram": "unigram"}
#: The byte pieces a byte-fallback model needs in its vocabulary (SentencePiece's ``<0x00>``...).
BYTE_PIECES = tuple(f"<0x{byte:02X}>" for byte in range(256))


class RecipeError(JobError):
    """The recipe cannot work (an unknown source, a post-processor naming a missing token...)."""


def _special(content: str) -> dict[str, Any]:
    return dict(content=content, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)


@dataclass(frozen=True)
class Recipe:
    """What the trained tokenizer is besides what is learnt, in tokenizers' own JSON. ``model``: without its
    vocabulary; ``special_tokens`` (the first ids, in order) and ``added_tokens`` (added after training):
    AddedToken JSON without ids; ``config``: ``PreTrainedTokenizerFast``'s keyword arguments."""

    family: str
    model: dict[str, Any]
    unk_token: str | None
    normalizer: dict[str, Any] | None
    pre_tokenizer: dict[str, Any] | None
    post_processor: dict[str, Any] | None
    decoder: dict[str, Any] | None
    special_tokens: tuple[dict[str, Any], ...]
    added_tokens: tuple[dict[str, Any], ...] = ()
    initial_alphabet: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, Any] = field(default_factory=dict)

    @property
    def special_contents(self) -> list[str]:
        return [token["content"] for token in self.special_tokens]

    @property
    def prefix(self) -> str:
        """What the trainer puts before a piece that does not start a word ("##" for WordPiece)."""
        return str(self.model.get("continuing_subword_prefix") or "")

    @property
    def suffix(self) -> str:
        """What the trainer puts after a piece that ends a word ("</w>" in some BPEs)."""
        return str(self.model.get("end_of_word_suffix") or "")

    @property
    def byte_fallback(self) -> bool:
        return bool(self.model.get("byte_fallback"))

    def describe(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "origin": self.origin,
            "model": self.model,
            "unk_token": self.unk_token,
            "special_tokens": self.special_contents,
            "added_tokens": [token["content"] for token in self.added_tokens],
            "initial_alphabet": len(self.initial_alphabet),
            "normalizer": self.normalizer,
            "pre_tokenizer": self.pre_tokenizer,
            "post_processor": self.post_processor,
            "decoder": self.decoder,
            "config": self.config,
        }

    def key(self) -> str:
        """A hash of the whole recipe: a tokenizer made from another recipe is trained again."""
        return json_key(self.describe())


def json_key(value: Any) -> str:
    """The SHA-256 of ``value``'s canonical JSON (sorted keys, no spaces), as records and manifests store it."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


_COMPONENTS = ("normalizer", "pre_tokenizer", "post_processor", "decoder")


def _preset(
    family: str, model: dict[str, Any], unk_token: str | None, specials: list[str], *components: Any, **fields: Any
) -> Recipe:
    """A preset recipe; ``components``: the tokenizers objects of :data:`_COMPONENTS` (or None)."""
    from tokenizers import Tokenizer, models

    holder = Tokenizer(models.BPE())
    for name, component in zip(_COMPONENTS, components, strict=True):
        if component is not None:
            setattr(holder, name, component)
    document = json.loads(holder.to_str())
    return Recipe(
        family=family,
        model=model,
        unk_token=unk_token,
        special_tokens=tuple(map(_special, specials)),
        origin={"preset": family},
        **{name: document[name] for name in _COMPONENTS},
        **fields,
    )


def _model_options(model: Any) -> dict[str, Any]:
    from tokenizers import Tokenizer

    options = json.loads(Tokenizer(model).to_str())["model"]
    return {key: value for key, value in options.items() if key not in ("vocab", "merges")}


def _wordpiece() -> Recipe:
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

    return _preset(
        "wordpiece",
        _model_options(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100)),
        "[UNK]",
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True),
        pre_tokenizers.BertPreTokenizer(),
        processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
        ),
        decoders.WordPiece(prefix="##"),
        config={
            "unk_token": "[UNK]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "cls_token": "[CLS]",
            "mask_token": "[MASK]",
            "model_max_length": 512,
            "model_input_names": ["input_ids", "token_type_ids", "attention_mask"],
            "clean_up_tokenization_spaces": True,
        },
    )


def _byte_level_bpe() -> Recipe:
    from tokenizers import decoders, models, pre_tokenizers, processors

    return _preset(
        "byte-level-bpe",
        _model_options(models.BPE()),
        None,
        ["<|endoftext|>"],
        None,
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        processors.ByteLevel(trim_offsets=False),
        decoders.ByteLevel(),
        initial_alphabet=tuple(sorted(pre_tokenizers.ByteLevel.alphabet())),
        config={
            **dict.fromkeys(("bos_token", "eos_token", "unk_token", "pad_token"), "<|endoftext|>"),
            "model_max_length": 1024,
            "model_input_names": ["input_ids", "attention_mask"],
        },
    )


def _bpe() -> Recipe:
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

    return _preset(
        "bpe",
        _model_options(models.BPE(unk_token="<unk>")),
        "<unk>",
        ["<unk>", "<s>", "</s>", "<pad>"],
        normalizers.NFKC(),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
        processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1", special_tokens=[("<s>", 1)]),
        decoders.Metaspace(replacement="▁", prepend_scheme="always"),
        config={
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            "model_max_length": 2048,
            "model_input_names": ["input_ids", "attention_mask"],
        },
    )


def _unigram() -> Recipe:
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers, processors

    return _preset(
        "unigram",
        {"type": "Unigram", "byte_fallback": False},
        "<unk>",
        ["<pad>", "</s>", "<unk>"],
        normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
        processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B:1 </s>:1", special_tokens=[("</s>", 1)]),
        decoders.Metaspace(replacement="▁", prepend_scheme="always"),
        config={
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            "model_max_length": 512,
            "model_input_names": ["input_ids", "attention_mask"],
        },
    )


#: The preset of each model family; :func:`preset` builds one.
PRESETS: dict[str, Callable[[], Recipe]] = {
    "wordpiece": _wordpiece,
    "byte-level-bpe": _byte_level_bpe,
    "bpe": _bpe,
    "unigram": _unigram,
}


def preset(family: str) -> Recipe:
    build = PRESETS.get(family)
    if build is None:
        raise RecipeError(f"no preset for model family {family!r} (presets: {', '.join(PRESETS)})")
    return build()


def _uses_byte_level(component: dict[str, Any] | None) -> bool:
    if not component:
        return False
    return component.get("type") == "ByteLevel" or any(map(_uses_byte_level, component.get("pretokenizers") or []))


def recipe_like(source: str, revision: str | None, family: str | None, storage: Storage | None) -> Recipe:
    """The recipe of an existing tokenizer (file, directory, hub id, or either under an object-store URL)."""
    from ..engine.loading import TokenizerLoadError, load_tokenizer

    try:
        local = fetch_tokenizer(source, storage) if is_url(source) and not source.startswith("hf://") else source
        loaded = load_tokenizer(local, revision, option="--like")
    except TokenizerLoadError as exc:
        raise RecipeError(f"--like: {exc}") from exc
    tokenizer = loaded.tokenizer
    document = json.loads(tokenizer.backend_tokenizer.to_str())
    model = {key: value for key, value in document["model"].items() if key not in ("vocab", "merges")}
    model_type = model.get("type")
    if model_type not in FAMILY_OF_MODEL:
        raise RecipeError(
            f"--like {source}: its model is {model_type}, which no trainer here learns "
            f"({', '.join(FAMILY_OF_MODEL)} can be trained)"
        )
    byte_level = _uses_byte_level(document.get("pre_tokenizer"))
    own_family = "byte-level-bpe" if model_type == "BPE" and byte_level else FAMILY_OF_MODEL[model_type]
    if family is not None and family != own_family:
        raise RecipeError(
            f"--like {source} is a {own_family} tokenizer, not {family}: omit --model to keep its family, or "
            "train a preset of another family without --like"
        )
    unk_token = None
    if model_type == "Unigram":
        unk_id = model.pop("unk_id", None)
        vocab = document["model"].get("vocab") or []
        if isinstance(unk_id, int) and 0 <= unk_id < len(vocab):
            unk_token = str(vocab[unk_id][0])
    elif model.get("unk_token"):
        unk_token = str(model["unk_token"])
    added = sorted(document.get("added_tokens") or [], key=lambda token: token["id"])
    strip_id = [{key: value for key, value in token.items() if key != "id"} for token in added]
    config: dict[str, Any] = {
        "model_max_length": tokenizer.model_max_length,
        "padding_side": tokenizer.padding_side,
        "truncation_side": tokenizer.truncation_side,
        "model_input_names": list(tokenizer.model_input_names),
        "clean_up_tokenization_spaces": bool(getattr(tokenizer, "clean_up_tokenization_spaces", False)),
    }
    if getattr(tokenizer, "split_special_tokens", False):
        config["split_special_tokens"] = True
    roles = {role: str(value) for role, value in tokenizer.special_tokens_map.items() if role in ROLES}
    config.update(roles)
    extras = [str(token) for token in getattr(tokenizer, "extra_special_tokens", None) or []]
    extras = [token for token in dict.fromkeys(extras) if token not in roles.values()]
    if extras:
        config["extra_special_tokens"] = extras
    if getattr(tokenizer, "chat_template", None):
        config["chat_template"] = tokenizer.chat_template
    from tokenizers import pre_tokenizers

    return Recipe(
        family=own_family,
        model=model,
        unk_token=unk_token,
        normalizer=document.get("normalizer"),
        pre_tokenizer=document.get("pre_tokenizer"),
        post_processor=document.get("post_processor"),
        decoder=document.get("decoder"),
        special_tokens=tuple(token for token in strip_id if token.get("special")),
        added_tokens=tuple(token for token in strip_id if not token.get("special")),
        initial_alphabet=tuple(sorted(pre_tokenizers.ByteLevel.alphabet())) if byte_level else (),
        config=config,
        origin={
            "like": source if local != source else loaded.source,
            "revision": loaded.revision,
            "fingerprint": loaded.fingerprint,
        },
    )


def customize(recipe: Recipe, special_tokens: tuple[str, ...] | None, model_max_length: int | None) -> Recipe:
    """Apply ``--special-tokens`` (the whole list, in id order: known tokens keep their flags) and
    ``--model-max-length``, then :func:`check`."""
    config = dict(recipe.config)
    if model_max_length is not None:
        config["model_max_length"] = model_max_length
    specials = recipe.special_tokens
    if special_tokens is not None:
        known = {token["content"]: token for token in recipe.special_tokens}
        specials = tuple(known.get(content, _special(content)) for content in special_tokens)
        roles = {config.get(role) for role in ROLES}
        extras = [t for t in special_tokens if t not in roles and t not in config.get("extra_special_tokens", [])]
        kept = [t for t in config.get("extra_special_tokens", []) if t in special_tokens]
        if kept or extras:
            config["extra_special_tokens"] = kept + extras
        else:
            config.pop("extra_special_tokens", None)
    recipe = replace(recipe, special_tokens=specials, config=config)
    check(recipe)
    return recipe


def check(recipe: Recipe) -> None:
    """Refuse a token the recipe names (its unknown token, the post-processor's, the roles) but does not hold."""
    specials = set(recipe.special_contents)
    known = specials | {token["content"] for token in recipe.added_tokens}
    where = "pass them in --special-tokens" if recipe.origin.get("preset") else "keep them in --special-tokens"
    if recipe.unk_token is not None and recipe.unk_token not in specials:
        raise RecipeError(
            f"the unknown token {recipe.unk_token!r} of the {recipe.family} model is not a special token: {where}"
        )
    missing = [t for t in post_processor_tokens(recipe.post_processor) if t not in specials]
    if missing:
        raise RecipeError(f"the post-processor adds {', '.join(map(repr, missing))}, not special tokens: {where}")
    roles = [
        f"{role}={recipe.config[role]!r}"
        for role in ROLES
        if role in recipe.config and recipe.config[role] not in known
    ]
    if roles:
        raise RecipeError(f"the config names {', '.join(roles)}, not special tokens: {where}")


def post_processor_tokens(processor: dict[str, Any] | None) -> list[str]:
    """The tokens a post-processor inserts."""
    if not processor:
        return []
    kind = processor.get("type")
    if kind == "Sequence":
        return [token for inner in processor.get("processors", []) for token in post_processor_tokens(inner)]
    if kind == "TemplateProcessing":
        return [token for entry in processor.get("special_tokens", {}).values() for token in entry["tokens"]]
    if kind in ("BertProcessing", "RobertaProcessing"):
        return [processor["sep"][0], processor["cls"][0]]
    return []


def with_ids(processor: dict[str, Any] | None, vocab: dict[str, int]) -> dict[str, Any] | None:
    """The post-processor with the ids of its tokens taken from the trained ``vocab``."""
    if not processor:
        return processor
    processor = json.loads(json.dumps(processor))
    kind = processor.get("type")
    if kind == "Sequence":
        processor["processors"] = [with_ids(inner, vocab) for inner in processor.get("processors", [])]
    elif kind == "TemplateProcessing":
        for entry in processor.get("special_tokens", {}).values():
            entry["ids"] = [vocab[token] for token in entry["tokens"]]
    elif kind in ("BertProcessing", "RobertaProcessing"):
        for name in ("sep", "cls"):
            processor[name] = [processor[name][0], vocab[processor[name][0]]]
    return processor


def build_recipe(
    family: str | None,
    like: str | None,
    revision: str | None,
    special_tokens: tuple[str, ...] | None,
    model_max_length: int | None,
    storage: Storage | None = None,
) -> Recipe:
    """The preset of ``family``, or the recipe of ``like``, with the overrides."""
    if like is not None:
        recipe = recipe_like(like, revision, family, storage)
    elif family is not None:
        recipe = preset(family)
    else:
        raise RecipeError("name the model family (--model) or a tokenizer to take the recipe from (--like)")
    return customize(recipe, special_tokens, model_max_length)
