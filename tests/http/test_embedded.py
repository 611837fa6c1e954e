"""The embedded default tokenizer by a name that works from any folder (``service/embedded.py``).

Defect: the examples named it ``service/default_tokenizer``, a path relative to the clone's root: anywhere else
``AutoTokenizer.from_pretrained`` waited 49 s on the hub's retries, then blamed the hub, and ``--like
service/default_tokenizer`` failed likewise. Now ``embedded:default`` is taken wherever a tokenizer source is,
``service.DEFAULT_TOKENIZER_DIR`` is its folder, and ``tokenizer-service default-tokenizer`` prints or copies it;
each is run here from a folder outside the clone. (The client-only install has them too:
``tests/shipping/test_installs.py``.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import service
from service.engine.loading import TokenizerLoadError, describe_source, load_tokenizer
from service.launch.command import ServeCommand
from testkit.servers import REPO


def command(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``tokenizer-service ARGS`` run in ``cwd`` (a folder outside the clone): this checkout's package."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from service.cli import main; sys.exit(main())", *args],
        cwd=cwd,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_name_loads_the_embedded_default_as_no_source_does():
    named, unnamed = load_tokenizer(service.DEFAULT_TOKENIZER), load_tokenizer(None)
    assert service.DEFAULT_TOKENIZER == "embedded:default"
    assert named.source == unnamed.source == "embedded:default"
    assert named.fingerprint == unnamed.fingerprint
    assert describe_source(service.DEFAULT_TOKENIZER) == describe_source(None)
    with pytest.raises(TokenizerLoadError, match="--revision applies to hub ids"):
        load_tokenizer(service.DEFAULT_TOKENIZER, "main")


def test_the_folder_is_the_embedded_default_for_transformers_from_any_folder(tmp_path):
    from transformers import AutoTokenizer

    printed = command("default-tokenizer", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    folder = Path(printed.stdout.strip())
    assert folder == service.DEFAULT_TOKENIZER_DIR and folder.is_absolute()
    ours = load_tokenizer(None).tokenizer
    theirs = AutoTokenizer.from_pretrained(service.DEFAULT_TOKENIZER_DIR)
    texts = ["今天天气很好", "The weather is nice today."]
    assert theirs(texts, padding=True) == ours(texts, padding=True)


def test_copy_puts_its_files_in_a_folder_of_ones_own_and_overwrites_nothing(tmp_path):
    from transformers import AutoTokenizer

    copied = command("default-tokenizer", "--copy", "mine/tokenizer", cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    assert copied.stdout.strip() == "mine/tokenizer"
    names = sorted(path.name for path in (tmp_path / "mine/tokenizer").iterdir())
    assert names == sorted(path.name for path in service.DEFAULT_TOKENIZER_DIR.iterdir() if path.is_file())
    loaded = AutoTokenizer.from_pretrained(tmp_path / "mine/tokenizer")
    assert loaded("今天")["input_ids"] == load_tokenizer(None).tokenizer("今天")["input_ids"]
    (tmp_path / "mine/tokenizer/tokenizer.json").write_text("{}")  # the user's own edit
    again = command("default-tokenizer", "--copy", "mine/tokenizer", cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        "tokenizer-service default-tokenizer: --copy mine/tokenizer: mine/tokenizer/tokenizer.json exists already: "
        "copy into another folder, or remove it"
    )
    assert (tmp_path / "mine/tokenizer/tokenizer.json").read_text() == "{}"


def test_launch_by_the_name_is_the_launch_without_a_model():
    named = ServeCommand.build(service.DEFAULT_TOKENIZER, {}, None, sys.executable)
    unnamed = ServeCommand.build(None, {}, None, sys.executable)
    assert named == unnamed and named.key() == unnamed.key()  # one service for both, found under one key


def test_train_like_the_name_keeps_the_embedded_defaults_recipe(tmp_path):
    from service.training import TrainConfig, train

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"今天天气很好 {i}"}) + "\n" for i in range(50)))
    options = {"inputs": (str(corpus),), "vocab_size": 300, "progress": "none", "processes": 1}
    for name, like in [("named", service.DEFAULT_TOKENIZER), ("folder", str(service.DEFAULT_TOKENIZER_DIR))]:
        train(TrainConfig(out=tmp_path / name, like=like, **options), log=lambda line: None)
    named, folder = (json.loads((tmp_path / name / "tokenizer.json").read_text()) for name in ("named", "folder"))
    assert named == folder
    manifest = json.loads((tmp_path / "named" / "manifest.json").read_text())
    assert manifest["recipe"]["origin"]["like"] == "embedded:default"
