"""The trained model made into a whole tokenizer (:func:`assemble`) and saved (:func:`save`): staged locally,
loaded back as the server loads it (a check, and the fingerprint it will report), put into ``--out`` file by
file, each whole, and ``manifest.json`` last, naming every file's size and SHA-256: a folder with one is whole."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..jobs import Folder
from .recipes import Recipe, with_ids
from .vocabulary import VocabularyPlan

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


def assemble(trained: Any, recipe: Recipe, plan: VocabularyPlan) -> Any:
    """The trained model inside the recipe's pipeline; seeded pieces stay in the vocabulary, not added tokens."""
    from tokenizers import AddedToken, Tokenizer

    document = json.loads(trained.to_str())
    seeds = set(plan.seeds) - set(recipe.special_contents)
    document["added_tokens"] = [token for token in document["added_tokens"] if token["content"] not in seeds]
    vocab = trained.get_vocab(with_added_tokens=True)
    document["normalizer"] = recipe.normalizer
    document["pre_tokenizer"] = recipe.pre_tokenizer
    document["post_processor"] = with_ids(recipe.post_processor, vocab)
    document["decoder"] = recipe.decoder
    if recipe.family == "unigram":
        document["model"]["byte_fallback"] = recipe.byte_fallback
    tokenizer = Tokenizer.from_str(json.dumps(document, ensure_ascii=False))
    if recipe.added_tokens:
        tokenizer.add_tokens([AddedToken(**token) for token in recipe.added_tokens])
    return tokenizer


def _sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def save(tokenizer: Any, recipe: Recipe, out: Folder, manifest: dict[str, Any]) -> dict[str, Any]:
    """Save ``tokenizer`` with the recipe's config into ``out``; the manifest written."""
    from transformers import PreTrainedTokenizerFast

    from ..engine.loading import load_tokenizer

    staging = Path(tempfile.mkdtemp(prefix="tokenizer-service-tokenizer-"))
    try:
        wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **recipe.config)
        written = [Path(name) for name in wrapped.save_pretrained(str(staging))]
        loaded = load_tokenizer(str(staging))  # as `serve --model DIR` will load it
        if loaded.tokenizer.backend_tokenizer.get_vocab_size() != tokenizer.get_vocab_size():
            raise RuntimeError("the saved tokenizer does not load back with the trained vocabulary")
        files = {path.name: {"bytes": path.stat().st_size, "sha256": _sha256(path)} for path in sorted(written)}
        manifest = {
            "format_version": MANIFEST_VERSION,
            **manifest,
            "tokenizer": {
                "fingerprint": loaded.fingerprint,
                "vocab_size": tokenizer.get_vocab_size(),
                "files": files,
            },
        }
        out.remove(MANIFEST_NAME)  # from here on, no manifest until every file is in place
        for path in written:
            with out.writer(path.name) as stream, open(path, "rb") as source:
                shutil.copyfileobj(source, stream)
        out.write_bytes(MANIFEST_NAME, (json.dumps(manifest, indent=1, ensure_ascii=False) + "\n").encode())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def read_manifest(out: Folder) -> dict[str, Any] | None:
    """The manifest of a finished training in ``out``, or None (none, or a file it names is not whole)."""
    try:
        manifest = json.loads(out.read_bytes(MANIFEST_NAME))
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format_version") != MANIFEST_VERSION:
        return None
    listing = out.listing()
    for name, entry in manifest.get("tokenizer", {}).get("files", {}).items():
        if listing.get(name) != entry["bytes"]:
            return None
    return manifest
