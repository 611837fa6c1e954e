"""Bake a hub tokenizer into an image (the Dockerfile's `baked` target runs this at build time).

    python bake_tokenizer.py MODEL_ID REVISION OUT_DIR

Downloads only the tokenizer files of MODEL_ID at REVISION, copies them into OUT_DIR (plain files, no cache
layout), proves the service loads them as a fast tokenizer, and writes OUT_DIR/source.json with the model
id, the revision asked for, the commit it resolved to, and the tokenizer fingerprint the server will report
in X-Tokenizer-Fingerprint. Pods of the baked image then load OUT_DIR and never touch the network.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

# Everything AutoTokenizer may read for a tokenizer, nothing of the model weights.
TOKENIZER_FILES = [
    "tokenizer*",  # tokenizer.json, tokenizer_config.json, tokenizer.model
    "special_tokens_map.json",
    "added_tokens.json",
    "config.json",  # AutoTokenizer reads the model type from it when tokenizer_config.json does not say
    "vocab*",
    "merges.txt",
    "*.model",  # SentencePiece (spiece.model, sentencepiece.bpe.model, ...)
    "*.tiktoken",
]


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not all(argv):
        print(
            "usage: bake_tokenizer.py MODEL_ID REVISION OUT_DIR  (docker build --target baked needs "
            "--build-arg TOKENIZER_MODEL=<hub id> --build-arg TOKENIZER_REVISION=<commit sha>)",
            file=sys.stderr,
        )
        return 2
    model, revision, out = argv[0], argv[1], Path(argv[2])

    from huggingface_hub import snapshot_download

    snapshot = Path(snapshot_download(model, revision=revision, allow_patterns=TOKENIZER_FILES))
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(snapshot.rglob("*")):
        if path.is_file():
            target = out / path.relative_to(snapshot)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path.resolve(), target)  # the cache holds symlinks into blobs/

    from service.engine.loading import load_tokenizer

    loaded = load_tokenizer(str(out))
    source = {"model": model, "revision": revision, "commit": snapshot.name, "fingerprint": loaded.fingerprint}
    (out / "source.json").write_text(json.dumps(source, indent=2) + "\n")
    print(f"baked {model}@{snapshot.name} into {out}: {type(loaded.tokenizer).__name__}, {loaded.fingerprint}")
    if revision != snapshot.name:
        print(f"note: revision {revision!r} is not a commit; pin {snapshot.name} for a reproducible image")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
