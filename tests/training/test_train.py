"""``tokenizer-service train``: exactness against ``train_from_iterator`` on the raw corpus, N workers equal to
one, the recipe of ``--like`` kept, refusals before any work, reruns after a killed worker, a merge that never
trains on part of the counts, bounded counting memory, and a trained tokenizer served by a real server.

The corpus is real text (Chinese reviews and English prose from testkit.assets), cut to ~400 KB so the suite
stays fast; a benchmark of the whole corpus (``benchmarks/scenarios/train.py`` at commit 2064602) is quoted in
docs/guides/train.md. References are built here with the tokenizers API directly, as a user would, not with the
package's training code.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from service.jobs import CorpusError, OutputConflict, UnitsMissing
from service.training import RecipeError, TrainConfig, VocabularyTooSmall, preset, train
from service.training.options import MODELS
from service.training.vocabulary import check_lower_bound
from testkit import assets
from testkit.gates import wait_until
from testkit.servers import REPO, ServerProcess, free_port
from testkit.training import pretokens, reference_tokenizer

UNIT = 48 * 1024
#: What merging up to 64 spilled runs may hold besides the budget (their read buffers), documented in the README.
MERGE_BUFFERS = 25 * 2**20
QUIET = {"progress": "none"}


def silent(message: str) -> None:
    pass


def counts_of(out: Path) -> Path:
    """Where ``train --out OUT`` keeps its counts by default: ``OUT.counts``, beside the tokenizer."""
    return Path(f"{out}.counts")


def spills_of(unit: str) -> list[Path]:
    """The spill directories of ``unit`` in every counting process's private spool (under the temp dir)."""
    digest = hashlib.sha256(unit.encode()).hexdigest()[:16]
    return list(Path(tempfile.gettempdir()).glob(f"tokenizer-service-spool-*/spill-*-{digest}"))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """~400 KB of real documents: Chinese reviews and English paragraphs, interleaved."""
    chinese, english = assets.chinese_reviews()[:1300], assets.english_paragraphs()[:320]
    mixed = chinese + english
    mixed[::5], mixed[1::5] = mixed[1::5], mixed[::5]  # not sorted by language, so every unit has both
    return mixed


def write_corpus(root: Path, texts: list[str]) -> Path:
    """Three files in three formats (units cut from the big ones): every third document in each."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "a.jsonl", "w", encoding="utf-8") as out:
        for i, text in enumerate(texts[0::3]):
            out.write(json.dumps({"id": i, "text": text}, ensure_ascii=False) + "\n")
    (root / "b.txt").write_text("".join(text + "\n" for text in texts[1::3]), encoding="utf-8")
    with gzip.open(root / "c.jsonl.gz", "wt", encoding="utf-8") as out:
        for text in texts[2::3]:
            out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, texts) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"), texts)


def config(corpus: Path, out: Path, **options: Any) -> TrainConfig:
    settings: dict[str, Any] = {"unit_bytes": UNIT, "processes": 1, **QUIET, **options}
    return TrainConfig(inputs=(str(corpus),), out=out, **settings)


def train_workers(corpus: Path, out: Path, workers: int, **options: Any) -> dict[str, Any]:
    """Workers 1..n-1 count their units, then worker 0 counts its own and merges: its tokenizer.json."""
    for index in range(1, workers):
        train(config(corpus, out, phase="count", shard_index=index, num_shards=workers, **options), log=silent)
    summary = train(config(corpus, out, phase="all", shard_index=0, num_shards=workers, **options), log=silent)
    assert summary.training is not None
    return json.loads((out / "tokenizer.json").read_text("utf-8"))


def reference(family: str, texts: list[str], vocab_size: int, seeds: list[str] = ()) -> dict[str, Any]:
    """The tokenizer.json of ``train_from_iterator`` on the raw texts in one process (testkit.training)."""
    return json.loads(reference_tokenizer(family, texts, vocab_size, seeds).to_str())


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", "train", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


# -- exactness -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("family", "vocab_size"), [("byte-level-bpe", 1200), ("bpe", 3400)])
def test_bpe_equals_train_from_iterator_on_the_raw_corpus_with_any_number_of_workers(
    corpus, texts, tmp_path, family, vocab_size
):
    one = train_workers(corpus, tmp_path / "one", 1, model=family, vocab_size=vocab_size)
    three = train_workers(corpus, tmp_path / "three", 3, model=family, vocab_size=vocab_size, processes=2)
    assert three == one
    assert (tmp_path / "three" / "tokenizer.json").read_bytes() == (tmp_path / "one" / "tokenizer.json").read_bytes()
    expected = reference(family, texts, vocab_size)
    assert one["model"]["vocab"] == expected["model"]["vocab"]  # the same tokens with the same ids
    assert one["model"]["merges"] == expected["model"]["merges"]  # in the same order
    assert one["added_tokens"] == expected["added_tokens"]
    assert len(one["model"]["merges"]) > 500


def test_wordpiece_is_the_same_for_any_number_of_workers_and_exact_given_the_same_tie_breaking(corpus, texts, tmp_path):
    vocab_size = 3600
    one = train_workers(corpus, tmp_path / "one", 1, model="wordpiece", vocab_size=vocab_size)
    three = train_workers(corpus, tmp_path / "three", 3, model="wordpiece", vocab_size=vocab_size)
    assert three == one  # ids included: the affixed pieces get their ids in code-point order, not hash order
    words = pretokens("wordpiece", texts)
    alphabet = sorted({char for word in words for char in word})
    continuing = sorted({"##" + char for word in words for char in word[1:]})
    seeded = reference("wordpiece", texts, vocab_size, seeds=alphabet + continuing)
    assert one["model"]["vocab"] == seeded["model"]["vocab"]  # the counts are exactly the raw corpus's
    plain = reference("wordpiece", texts, vocab_size)["model"]["vocab"]
    ours = one["model"]["vocab"]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert [ours[t] for t in specials] == [plain[t] for t in specials] == [0, 1, 2, 3, 4]
    assert {t: ours[t] for t in alphabet} == {t: plain[t] for t in alphabet}  # code-point order, after them
    assert {t for t in ours if t.startswith("##") and len(t) == 3} == {
        t for t in plain if t.startswith("##") and len(t) == 3
    }
    # The rest differs from a plain run only where the trainer breaks ties in hash order: two plain runs
    # differ as much from each other (see the README).
    assert len(set(ours) & set(plain)) >= 0.98 * len(plain)


def test_limit_alphabet_keeps_the_most_frequent_characters_ties_broken_by_code_point(corpus, texts, tmp_path):
    one = train_workers(corpus, tmp_path / "one", 1, model="bpe", vocab_size=700, limit_alphabet=300)
    three = train_workers(corpus, tmp_path / "three", 3, model="bpe", vocab_size=700, limit_alphabet=300)
    assert three == one
    chars: Counter[str] = Counter()
    for word, count in pretokens("bpe", texts).items():
        for char in word:
            chars[char] += count
    kept = sorted(sorted(chars, key=lambda c: (-chars[c], ord(c)))[:300])
    vocab = one["model"]["vocab"]
    assert [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])[4:304]] == kept
    assert all(len(token) > 1 for token, index in vocab.items() if index >= 304)  # then only merges


def unigram_scores(document: dict[str, Any]) -> dict[str, float]:
    return {piece: score for piece, score in document["model"]["vocab"]}


def test_unigram_has_the_token_set_and_scores_of_train_from_iterator_but_for_the_readded_characters(texts, tmp_path):
    """What holds for Unigram (see the README): the same pieces as train_from_iterator on the raw corpus, with
    the same scores (to float summation order), except the characters the trainer re-adds after EM with
    small penalty scores handed out in hash order -- the same scores, in another order, so ids differ."""
    corpus = write_corpus(tmp_path / "corpus", texts[:500])
    one = train_workers(corpus, tmp_path / "one", 1, model="unigram", vocab_size=2200)
    three = train_workers(corpus, tmp_path / "three", 3, model="unigram", vocab_size=2200)
    expected = reference("unigram", texts[:500], 2200)
    assert one["added_tokens"] == expected["added_tokens"]
    for ours in (unigram_scores(one), unigram_scores(three)):
        theirs = unigram_scores(expected)
        assert set(ours) == set(theirs) and len(ours) == 2200
        readded = {piece for piece in ours if abs(ours[piece] - theirs[piece]) > 1e-6}
        assert all(len(piece) == 1 for piece in readded) and len(readded) < len(ours) // 4
        assert sorted(ours[p] for p in readded) == pytest.approx(sorted(theirs[p] for p in readded), abs=1e-6)


def test_counting_through_the_trainer_equals_normalize_and_pre_tokenize_in_python(texts):
    """Counting reads the counts from a WordLevel trainer's state (its own Rust word-count path); the Python
    fallback, for a tokenizers release that would not expose them, gives the same counts."""
    from service.training.counting import PreTokenCounter

    for family in ("wordpiece", "byte-level-bpe", "unigram"):
        recipe = preset(family)
        counter = PreTokenCounter(recipe.normalizer, recipe.pre_tokenizer)
        assert counter.by_trainer
        by_trainer = counter.count(texts[:600])
        counter.by_trainer = False
        assert counter.count(texts[:600]) == by_trainer == pretokens(family, texts[:600])


# -- a killed worker, partial counts, reruns ------------------------------------------------------------
def test_merge_never_trains_on_part_of_the_counts_and_names_the_missing_units(corpus, tmp_path):
    out = tmp_path / "out"
    options = {"model": "bpe", "vocab_size": 3400, "num_shards": 3}
    train(config(corpus, out, phase="count", shard_index=1, **options), log=silent)
    with pytest.raises(UnitsMissing) as missing:
        train(config(corpus, out, phase="all", shard_index=0, wait_seconds=0.3, **options), log=silent)
    message = str(missing.value)
    assert "(worker 2)" in message and "(worker 1)" not in message and "never trained" in message
    assert not (out / "tokenizer.json").exists() and not (out / "manifest.json").exists()
    train(config(corpus, out, phase="count", shard_index=2, **options), log=silent)
    counts = sorted(counts_of(out).rglob("*.counts"))
    with open(counts[-1], "r+b") as damaged:  # a unit whose file lost its end: not done, whatever its record says
        damaged.truncate(counts[-1].stat().st_size - 10)
    with pytest.raises(UnitsMissing, match=counts[-1].name.removesuffix(".counts")):
        train(config(corpus, out, phase="merge", wait_seconds=0.3, model="bpe", vocab_size=3400), log=silent)
    assert not (out / "tokenizer.json").exists()


@contextmanager
def stuck_in_a_fifo(fifo: Path, args: list[str], data: bytes, out: Path) -> Iterator[subprocess.Popen[str]]:
    """A ``train`` worker whose last unit is the FIFO ``fifo`` (named ``*.txt.gz``: read to its end, whatever its
    size): started, fed ``data`` through the FIFO once it opens it, and yielded when it has spilled counts of
    that unit to disk and blocks waiting for more -- a worker caught in the middle of a unit, deterministically.
    Stopped by PID at the end if still running."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "service", "train", *args], cwd=REPO, stderr=subprocess.PIPE, text=True
    )
    writer: list[int] = []
    try:

        def opened() -> bool:  # the worker reaches the FIFO after every other unit
            try:
                writer.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                return worker.poll() is not None
            return True

        wait_until(opened, timeout=120, what="the worker opening the FIFO")
        assert writer, worker.stderr.read() if worker.stderr else ""
        os.set_blocking(writer[0], True)
        os.write(writer[0], data)
        wait_until(lambda: any(p.glob("*.counts") for p in spills_of(f"{fifo.name}.00000")), timeout=60, what="a spill")
        yield worker
    finally:
        for descriptor in writer:
            os.close(descriptor)
        if worker.poll() is None:
            worker.kill()
            worker.wait(30)


def test_a_killed_worker_is_rerun_for_its_unfinished_units_only(texts, tmp_path):
    """The worker is SIGKILLed while counting its last unit (a FIFO the test feeds: it blocks there, its spills
    on disk); the rerun keeps the units it finished, clears what the killed one left, and the tokenizer
    equals a clean run's."""
    corpus = write_corpus(tmp_path / "corpus", texts[:900])
    tail = "".join(text + "\n" for text in texts[900:])
    whole = gzip.compress(tail.encode())
    fifo = corpus / "z.txt.gz"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    args = [
        str(corpus),
        "--out",
        str(out),
        "--model",
        "bpe",
        "--vocab-size",
        "3400",
        "--unit-bytes",
        "48K",
        "--processes",
        "1",
        "--count-memory",
        "16K",
        "--progress",
        "none",
    ]
    with stuck_in_a_fifo(fifo, [*args, "--phase", "count"], whole[: len(whole) // 2], out) as worker:
        worker.kill()  # SIGKILL: no clean-up at all
        worker.wait(30)
    counts = counts_of(out)
    done = {
        path.name: (path.stat().st_mtime_ns, json.loads(path.read_text())["stats"]["pid"])
        for path in counts.rglob("*.done")
    }
    assert len(done) >= 3 and "z.txt.gz.00000.done" not in done
    fifo.unlink()
    fifo.write_bytes(whole)
    rerun = cli(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert "1 to count" in rerun.stderr
    for name, (mtime, pid) in done.items():  # the finished units were not counted again
        path = next(counts.rglob(name))
        assert (path.stat().st_mtime_ns, json.loads(path.read_text())["stats"]["pid"]) == (mtime, pid)
    assert not spills_of("z.txt.gz.00000") and not list(counts.rglob("*.partial-*"))  # the killed one's spills too
    assert not (out / "counts").exists()  # the coordination files stay apart from the tokenizer
    clean = train_workers(corpus, tmp_path / "clean", 1, model="bpe", vocab_size=3400)
    assert json.loads((out / "tokenizer.json").read_text("utf-8")) == clean


def test_sigterm_stops_the_counting_processes_and_leaves_no_temporary_file(texts, tmp_path):
    """SIGTERM while a counting process (of a pool of 2) is in the middle of a unit (blocked on a FIFO the
    test feeds, with spills on disk): the worker exits 130, its processes are gone, and nothing half-written
    is left -- only the units that were done."""
    corpus = write_corpus(tmp_path / "corpus", texts[:300])
    fifo = corpus / "z.txt.gz"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    args = [str(corpus), "--out", str(out), "--model", "bpe", "--vocab-size", "3400", "--unit-bytes", "48K"]
    half = gzip.compress("".join(t + "\n" for t in texts[300:600]).encode())[:20_000]
    options = ["--processes", "2", "--count-memory", "16K", "--phase", "count"]
    with stuck_in_a_fifo(fifo, [*args, *options], half, out) as worker:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 130 and "interrupted" in err
    assert not spills_of("z.txt.gz.00000") and not list(counts_of(out).rglob(".*partial-*"))
    assert not (counts_of(out) / "z.txt.gz.00000.done").exists()
    for done in counts_of(out).rglob("*.done"):  # every unit marked done is whole
        record = json.loads(done.read_text())
        for entry in record["files"]:
            assert (done.parent / entry["name"]).stat().st_size == entry["bytes"]


def test_a_rerun_retrains_only_what_changed_and_refuses_counts_of_another_recipe(corpus, tmp_path):
    out = tmp_path / "out"
    first = train(config(corpus, out, model="byte-level-bpe", vocab_size=700), log=silent)
    assert first.count is not None and first.count.counted > 3 and first.training is not None
    again = train(config(corpus, out, model="byte-level-bpe", vocab_size=700), log=silent)
    assert again.count is not None and again.count.counted == 0 and again.training is not None
    assert again.training.already_trained and again.training.fingerprint == first.training.fingerprint
    bigger = train(config(corpus, out, model="byte-level-bpe", vocab_size=800), log=silent)
    assert bigger.count is not None and bigger.count.counted == 0  # the counts do not depend on the vocab size
    assert bigger.training is not None and bigger.training.vocab_size == 800 and not bigger.training.already_trained
    with pytest.raises(OutputConflict, match=r"other settings \(.*normalizer: .* then, .* now; pre_tokenizer: "):
        train(config(corpus, out, model="wordpiece", vocab_size=5000), log=silent)


# -- refusals --------------------------------------------------------------------------------------------
def test_a_vocabulary_smaller_than_alphabet_and_special_tokens_is_refused_naming_both(corpus, tmp_path):
    with pytest.raises(VocabularyTooSmall) as refused:  # known before any work: the 256 byte symbols
        train(config(corpus, tmp_path / "a", model="byte-level-bpe", vocab_size=200), log=silent)
    assert "the alphabet (256 byte-level symbols) plus 1 special token" in str(refused.value)
    assert "at least 257 tokens" in str(refused.value)
    assert not (tmp_path / "a").exists()  # nothing was done
    done = cli(str(corpus), "--out", str(tmp_path / "b"), "--model", "byte-level-bpe", "--vocab-size", "256")
    assert done.returncode == 1 and "--vocab-size 256 is smaller than" in done.stderr and "257" in done.stderr
    chinese = sum(1 for c in {c for t in assets.chinese_reviews()[:1300] for c in t} if ord(c) > 0x2E80)
    with pytest.raises(VocabularyTooSmall) as refused:  # a character alphabet is known once counted
        train(config(corpus, tmp_path / "c", model="wordpiece", vocab_size=chinese), log=silent)
    message = str(refused.value)
    assert f"--vocab-size {chinese:,} is smaller than the alphabet of the corpus (" in message
    assert "pieces with '##'" in message and "plus 5 special tokens" in message and "--limit-alphabet" in message
    assert not (tmp_path / "c" / "tokenizer.json").exists()


@pytest.mark.parametrize("family", MODELS)
def test_the_smallest_vocabulary_is_the_floor_of_the_real_trainer(family, corpus, tmp_path):
    """Defect: `train --vocab-size 0` said "at least 1" where byte-level BPE cannot have fewer than 257
    tokens. The floor the refusal names is what the family's own trainer gives when it learns nothing (an
    empty corpus, vocab_size 1): its special tokens and the initial alphabet it always keeps."""
    floor = reference_tokenizer(family, [], 1).get_vocab_size()
    for too_small in (0, floor - 1):
        with pytest.raises(VocabularyTooSmall) as refused:
            train(config(corpus, tmp_path / "a", model=family, vocab_size=too_small), log=silent)
        assert f"--vocab-size {too_small:,} is smaller than" in str(refused.value)
        assert f"at least {floor:,} tokens are needed" in str(refused.value)
    check_lower_bound(preset(family), floor)  # the floor itself is not refused before the corpus is read
    assert not (tmp_path / "a").exists()  # nothing was done
    if family == "byte-level-bpe":  # as a user sees it
        done = cli(str(corpus), "--out", str(tmp_path / "b"), "--model", family, "--vocab-size", "0")
        assert done.returncode == 1, done.stderr
        assert f"at least {floor:,} tokens are needed" in done.stderr.strip().splitlines()[-1]


def test_an_output_or_counts_folder_that_is_a_file_is_refused_in_words_before_any_work(corpus, tmp_path):
    (tmp_path / "afile").write_text("not a folder\n")
    for flag, out, options in [
        ("--out", tmp_path / "afile", {}),
        ("--counts", tmp_path / "o", {"counts_dir": tmp_path / "afile"}),
    ]:
        with pytest.raises(CorpusError) as refused:
            train(config(corpus, out, model="bpe", vocab_size=3400, **options), log=silent)
        assert str(refused.value).startswith(f"{flag} {tmp_path / 'afile'}: {tmp_path / 'afile'} is a file, not a")
    assert (tmp_path / "afile").read_text() == "not a folder\n" and not (tmp_path / "o.counts").exists()


def test_recipes_naming_tokens_they_lack_are_refused(corpus, tmp_path):
    with pytest.raises(RecipeError, match=r"post-processor adds '\[CLS\]'"):
        train(config(corpus, tmp_path / "a", model="wordpiece", special_tokens=("[PAD]", "[UNK]", "[SEP]")), log=silent)
    with pytest.raises(RecipeError, match="unknown token '<unk>'"):
        train(config(corpus, tmp_path / "a", model="unigram", special_tokens=("<pad>", "</s>")), log=silent)
    with pytest.raises(RecipeError, match="--limit-alphabet applies to BPE and WordPiece"):
        train(config(corpus, tmp_path / "a", model="unigram", limit_alphabet=100), log=silent)
    assert not (tmp_path / "a").exists()


# -- --like, and the trained tokenizer in AutoTokenizer and the server ------------------------------------
def test_like_keeps_the_recipe_and_config_of_an_existing_tokenizer(corpus, tmp_path, tokenizer_dirs):
    from transformers import AutoTokenizer

    source = AutoTokenizer.from_pretrained(str(tokenizer_dirs["bytelevel_bpe"]))
    train(config(corpus, tmp_path / "out", like=str(tokenizer_dirs["bytelevel_bpe"]), vocab_size=900), log=silent)
    trained = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    ours, theirs = json.loads(trained.backend_tokenizer.to_str()), json.loads(source.backend_tokenizer.to_str())
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        assert ours[part] == theirs[part], part
    assert ours["added_tokens"] == theirs["added_tokens"]  # the same special tokens with the same ids (0..4)
    assert {k: v for k, v in ours["model"].items() if k not in ("vocab", "merges")} == {
        k: v for k, v in theirs["model"].items() if k not in ("vocab", "merges")
    }
    assert len(trained) == 900 and trained.model_max_length == 2048 and trained.pad_token == "<EOT>"
    assert trained.special_tokens_map == source.special_tokens_map
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["recipe"]["origin"]["like"] == str(tokenizer_dirs["bytelevel_bpe"])
    assert manifest["recipe"]["family"] == "byte-level-bpe"

    spm = tokenizer_dirs["sentencepiece"]  # a byte-fallback BPE: SentencePiece's byte pieces come along
    train(config(corpus, tmp_path / "spm", like=str(spm), vocab_size=4000, unit_bytes=1 << 20), log=silent)
    trained = AutoTokenizer.from_pretrained(str(tmp_path / "spm"))
    assert trained.convert_ids_to_tokens([0, 1, 2, 3, 258]) == ["<unk>", "<s>", "</s>", "<0x00>", "<0xFF>"]
    assert trained("😀 hi")["input_ids"][:1] == [1] and trained.padding_side == "left"
    assert trained.decode(trained("😀 天气")["input_ids"], skip_special_tokens=True) == "😀 天气"
    with pytest.raises(RecipeError, match="is a byte-level-bpe tokenizer, not wordpiece"):
        train(config(corpus, tmp_path / "x", like=str(tokenizer_dirs["bytelevel_bpe"]), model="wordpiece"), log=silent)


def test_a_train_worker_keeps_torch_out_and_trains_as_in_a_process_with_torch(corpus, tmp_path, tokenizer_dirs):
    """`train` runs transformers (``--like``) without the torch it never uses (engine.loading.keep_torch_out):
    the command's process, as the console script runs it, ends with torch unloaded though this venv has it
    (this process imported it), and its tokenizer is the one trained where torch is loaded (here)."""
    import torch

    like = str(tokenizer_dirs["bytelevel_bpe"])
    args = [str(corpus), "--out", str(tmp_path / "cli"), "--like", like, "--vocab-size", "900"]
    program = f"import sys; from service.cli import main; status = main(['train', *{args!r}]); "
    program += "print('torch loaded' if sys.modules.get('torch') else 'no torch'); sys.exit(status)"
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert torch.__version__ and done.stdout.splitlines()[-1] == "no torch"
    train(config(corpus, tmp_path / "here", like=like, vocab_size=900), log=silent)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_a_trained_tokenizer_is_served_and_encodes_as_in_process(corpus, texts, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "tokenizer"
    done = cli(
        str(corpus),
        "--out",
        str(out),
        "--model",
        "wordpiece",
        "--vocab-size",
        "4000",
        "--unit-bytes",
        "48K",
        "--processes",
        "2",
        "--num-shards",
        "1",
        "--shard-index",
        "0",
        "--progress",
        "log",
        "--log-every",
        "0",
    )
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "train: count:" in err and "pre-tokens/s" in err  # progress lines off a terminal
    assert "documents" in err and "distinct -> 4,000 tokens" in err and "peak RSS" in err  # the summary
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["documents"] == len(texts)
    assert manifest["counts"]["pretokens"] == sum(pretokens("wordpiece", texts).values())
    assert manifest["counts"]["distinct_pretokens"] == len(pretokens("wordpiece", texts))
    assert set(manifest["versions"]) >= {"tokenizers", "transformers", "python"}
    local = AutoTokenizer.from_pretrained(str(out))
    assert local.model_max_length == 512 and local.mask_token == "[MASK]" and len(local) == 4000
    sample = [*texts[::97], "今天天气很好", "The weather is nice today.", ""]
    with ServerProcess("--model", str(out), log_path=tmp_path / "server.log") as server:
        info = json.loads(urllib.request.urlopen(server.url + "/info", timeout=30).read())
        assert info["fingerprint"] == manifest["tokenizer"]["fingerprint"]
        for options in ({}, {"padding": True, "truncation": True, "max_length": 32}):
            served = post(server.url + "/encode", {"texts": sample, **options})
            expected = local(sample, **options)
            assert served["input_ids"] == expected["input_ids"]
            assert served["token_type_ids"] == expected["token_type_ids"]
        pair = post(server.url + "/encode", {"texts": ["你好"], "text_pairs": ["world"]})
        assert pair["input_ids"] == local(["你好"], ["world"])["input_ids"]


# -- memory ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_counting_memory_is_bounded_by_spilling_and_the_counts_stay_exact(tmp_path):
    """300k distinct pre-tokens in one unit. With 4 MiB of counting memory the process spills sorted runs: its
    peak RSS (VmHWM) stays within the bound (an idle counting process + the budget + the merge buffers), while
    holding them all goes well past it; the counts are byte-identical."""
    import random

    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(10)) for _ in range(300_000)]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "words.txt").write_text("\n".join(" ".join(words[i : i + 50]) for i in range(0, len(words), 50)))
    (corpus / "tiny.txt").write_text("hello world\n")
    runs = {}
    for name, memory, source in (
        ("idle", "2G", "tiny.txt"),
        ("held", "2G", "words.txt"),
        ("spilled", "4M", "words.txt"),
    ):
        out = tmp_path / name
        done = cli(
            str(corpus / source),
            "--out",
            str(out),
            "--model",
            "bpe",
            "--vocab-size",
            "100",
            "--phase",
            "count",
            "--processes",
            "1",
            "--unit-bytes",
            "64M",
            "--count-memory",
            memory,
            "--progress",
            "none",
        )
        assert done.returncode == 0, done.stderr
        [record] = [json.loads(p.read_text())["stats"] for p in counts_of(out).rglob("*.done")]
        runs[name] = (record, next(counts_of(out).rglob("*.counts")).read_bytes())
    idle, held, spilled = (runs[name][0] for name in ("idle", "held", "spilled"))
    assert held["spills"] == 0 and spilled["spills"] >= 10
    assert runs["spilled"][1] == runs["held"][1] and spilled["distinct"] == held["distinct"] == len(set(words))
    bound = idle["peak_rss_bytes"] + 4 * 2**20 + MERGE_BUFFERS
    assert spilled["peak_rss_bytes"] < bound < held["peak_rss_bytes"], (idle, spilled, held)


def test_the_train_command_is_listed_and_refuses_bad_records_naming_the_line(tmp_path):
    listing = subprocess.run([sys.executable, "-m", "service", "--help"], cwd=REPO, capture_output=True, text=True)
    assert "train" in listing.stdout
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text('{"text": "fine"}\n{"text": 3}\n{"text": "also fine"}\n')
    refused = cli(str(corpus), "--out", str(tmp_path / "a"), "--model", "bpe", "--vocab-size", "100")
    assert refused.returncode == 1 and "a.jsonl:2: field 'text' is a number, not a string" in refused.stderr
    assert "rerun with --on-bad-record skip" in refused.stderr  # the flag, as pretokenize names it (issue 42)
    skipped = cli(
        str(corpus),
        "--out",
        str(tmp_path / "b"),
        "--model",
        "byte-level-bpe",
        "--vocab-size",
        "300",
        "--on-bad-record",
        "skip",
        "--progress",
        "none",
    )
    assert skipped.returncode == 0, skipped.stderr
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["counts"]["skipped"] == 1 and manifest["counts"]["documents"] == 2
    named = [line for line in skipped.stderr.splitlines() if "1 record skipped" in line]  # in the summary
    assert "count: 1 unit counted" in skipped.stderr  # plurals (issue 42): "1 units counted" before
    assert named == [f"  skipped: 1 record skipped: {corpus / 'a.jsonl'}:2: field 'text' is a number, not a string"]


def test_a_bad_record_keeps_the_counted_units_and_the_skipping_rerun_counts_only_the_rest(tmp_path):
    """Defect (issue 42): a rerun with --on-bad-record skip after a run stopped at a bad record refused the units
    already counted ("made with other settings (on_bad_record: 'error' then, 'skip' now)"): the policy was part of
    the counts' settings, though a unit counted without a bad record is the same unit under either policy."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text('{"text": "fine"}\n{"text": "also fine"}\n')
    (corpus / "b.jsonl").write_text('{"text": "fine too"}\n{"text": "broken\n{"text": "the last"}\n')
    args = [str(corpus), "--out", str(tmp_path / "out"), "--model", "byte-level-bpe", "--vocab-size", "300"]
    args += ["--processes", "1", "--progress", "none"]
    refused = cli(*args)
    assert refused.returncode == 1 and f"{corpus / 'b.jsonl'}:2: malformed JSON" in refused.stderr, refused.stderr
    assert "rerun with --on-bad-record skip" in refused.stderr
    rerun = cli(*args, "--on-bad-record", "skip")
    assert rerun.returncode == 0, rerun.stderr
    assert "count: 1 unit counted, 1 done already" in rerun.stderr, rerun.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["skipped"] == 1 and manifest["counts"]["documents"] == 4


@pytest.mark.slow  # three fresh interpreters
def test_a_like_source_that_cannot_be_loaded_is_answered_in_trains_words(tmp_path):
    """Defect: `train --like` offline advised "serve a local copy with --model DIR", and a --like path that
    is not there said "--model takes a tokenizer.json file...": serve's words in a train command, whose
    --model is the family. The advice names the flag of the command that was run."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text('{"text": "fine"}\n')
    hub = {"HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HOME": str(tmp_path / "hf-home")}  # closed
    environment = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    for like, env, advice in [
        ("some-org/some-model", hub, "pass --like DIR, a local copy"),
        ("some-org/some-model", {**hub, "HF_HUB_OFFLINE": "1"}, "pass --like DIR, a local copy"),
        ("./no-such-dir", {}, "--like takes a tokenizer.json file, a tokenizer directory or a hub model id"),
    ]:
        arguments = [str(corpus), "--out", str(tmp_path / "o"), "--like", like, "--vocab-size", "300"]
        done = subprocess.run(
            [sys.executable, "-m", "service", "train", *arguments],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            env={**environment, **env},
        )
        line = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 1 and advice in line, line
        assert "--model" not in line and "serve" not in line, line
