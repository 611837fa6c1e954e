"""Every ``train`` option changes the result as documented, for each model family it applies to: each test
compares a run with the option against the same run without it (so an option that is ignored fails it),
and against what the option promises, read from the trained files with transformers or tokenizers."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from service.jobs import find_inputs, plan_units
from service.training import TrainConfig, train
from testkit import assets
from testkit.servers import REPO

FAMILIES = ("bpe", "byte-level-bpe", "wordpiece", "unigram")
VOCAB = 700
MIN_FREQUENCY = 40


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    (root / "docs.txt").write_text("\n".join(assets.english_paragraphs()[:250]) + "\n", encoding="utf-8")
    return root


def trained(corpus: Path, out: Path, **options: Any) -> dict[str, Any]:
    config = TrainConfig(inputs=(str(corpus),), out=out, **{"processes": 1, "progress": "none", **options})
    train(config, log=lambda message: None)
    return {
        name: json.loads((out / f"{name}.json").read_text("utf-8"))
        for name in ("tokenizer", "tokenizer_config", "manifest")
    }


@pytest.fixture(scope="module")
def baseline(corpus, tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Each family's preset with no option: what every option must change."""
    root = tmp_path_factory.mktemp("baseline")
    return {family: trained(corpus, root / family, model=family, vocab_size=VOCAB) for family in FAMILIES}


def vocab(result: dict[str, Any]) -> dict[str, Any]:
    model = result["tokenizer"]["model"]["vocab"]
    return dict(model) if isinstance(model, dict) else {piece: i for i, (piece, _) in enumerate(model)}


def test_counts_go_where_told_one_file_per_unit_of_unit_bytes(corpus, tmp_path, baseline):
    """``counts_dir`` puts the count files there (not beside the tokenizer) and the merge reads them from there;
    ``unit_bytes`` cuts the corpus into the units ``plan_units`` makes of it, each counted apart. Counts are
    exact however they are cut, so the BPE tokenizer is the baseline's."""
    unit_bytes = 16 * 1024
    counts, out = tmp_path / "elsewhere", tmp_path / "out"
    result = trained(corpus, out, model="bpe", vocab_size=VOCAB, counts_dir=counts, unit_bytes=unit_bytes)
    units = plan_units(find_inputs([str(corpus)]), unit_bytes=unit_bytes)
    assert len(plan_units(find_inputs([str(corpus)]))) == 1 < len(units)
    assert len(list(counts.rglob("*.done"))) == len(units) == len(list(counts.rglob("*.counts")))
    assert not Path(f"{out.resolve()}.counts").exists()
    assert result["tokenizer"]["model"] == baseline["bpe"]["tokenizer"]["model"]


def test_text_field_names_the_field_the_text_is_read_from(corpus, tmp_path, baseline):
    """The same documents under ``body``, beside a ``text`` that is not them: read from ``body``, the BPE
    tokenizer is the baseline's."""
    records = tmp_path / "records"
    records.mkdir()
    lines = (corpus / "docs.txt").read_text("utf-8").splitlines()
    with open(records / "docs.jsonl", "w", encoding="utf-8") as out:
        out.writelines(json.dumps({"text": "not this", "body": line}) + "\n" for line in lines)
    result = trained(records, tmp_path / "out", model="bpe", vocab_size=VOCAB, text_field="body")
    assert result["tokenizer"]["model"] == baseline["bpe"]["tokenizer"]["model"]


@pytest.mark.parametrize("family", FAMILIES)
def test_model_max_length_lands_in_the_tokenizer_config(corpus, tmp_path, baseline, family):
    from transformers import AutoTokenizer

    result = trained(corpus, tmp_path / "out", model=family, vocab_size=VOCAB, model_max_length=77)
    assert baseline[family]["tokenizer_config"]["model_max_length"] != 77
    assert AutoTokenizer.from_pretrained(str(tmp_path / "out")).model_max_length == 77
    assert set(vocab(result)) == set(vocab(baseline[family]))  # the vocabulary is untouched (Unigram: scores float)


@pytest.mark.parametrize("family", FAMILIES)
def test_special_tokens_are_the_whole_list_in_id_order(corpus, tmp_path, baseline, family):
    from transformers import AutoTokenizer

    preset = [token["content"] for token in baseline[family]["tokenizer"]["added_tokens"]]
    wanted = [*preset, "<extra_a>", "<extra_b>"]
    trained(corpus, tmp_path / "out", model=family, vocab_size=VOCAB, special_tokens=tuple(wanted))
    loaded = AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    assert loaded.convert_tokens_to_ids(wanted) == list(range(len(wanted)))
    assert "<extra_a>" not in vocab(baseline[family])
    assert loaded("x <extra_b> y")["input_ids"].count(len(wanted) - 1) == 1  # one token, never split


@pytest.mark.parametrize("family", FAMILIES)
def test_min_frequency_applies_to_the_counts_of_the_whole_corpus(corpus, tmp_path, baseline, family):
    """BPE and WordPiece: no pair counted fewer times is merged, so fewer merges happen (here the vocabulary
    stops short, and says so); Unigram: pre-tokens counted fewer times are left out of training."""
    result = trained(corpus, tmp_path / "out", model=family, vocab_size=VOCAB, min_frequency=40)
    assert vocab(result) != vocab(baseline[family])
    if family == "unigram":
        assert result["manifest"]["counts"]["left_out_under_min_frequency"] > 0
        assert baseline[family]["manifest"]["counts"]["left_out_under_min_frequency"] == 0
    else:
        assert len(vocab(result)) < len(vocab(baseline[family])) == VOCAB
        assert "--min-frequency 40" in result["manifest"]["vocabulary"]["shortfall"]


def test_unigram_learns_only_from_pre_tokens_counted_min_frequency_times(corpus, tmp_path, baseline):
    """Unigram's pieces are substrings of the pre-tokens it is fed: with ``min_frequency`` every piece (beyond
    single characters and the special tokens) is found in a pre-token the corpus counts at least that often,
    where the run without it learns pieces found only in rarer ones. The counts are the run's own count files."""
    from service.training.countfiles import merge_files

    out = tmp_path / "out"
    result = trained(corpus, out, model="unigram", vocab_size=VOCAB, min_frequency=MIN_FREQUENCY)
    counted = list(merge_files(sorted(Path(f"{out.resolve()}.counts").rglob("*.counts")), tmp_path / "scratch"))
    frequent = "\n".join(word for word, count in counted if count >= MIN_FREQUENCY)
    assert 0 < len(frequent.split("\n")) < len(counted)

    def from_rare_pre_tokens(run: dict[str, Any]) -> set[str]:
        specials = {token["content"] for token in run["tokenizer"]["added_tokens"]}
        return {p for p in vocab(run) if len(p) > 1 and p not in specials and p not in frequent}

    assert from_rare_pre_tokens(result) == set()
    assert len(from_rare_pre_tokens(baseline["unigram"])) > 50


@pytest.mark.parametrize("family", ["bpe", "wordpiece"])
def test_limit_alphabet_keeps_only_the_most_frequent_characters(corpus, tmp_path, baseline, family):
    def characters(result: dict[str, Any]) -> set[str]:
        specials = {token["content"] for token in result["tokenizer"]["added_tokens"]}
        return {token for token in vocab(result) if len(token) == 1 and token not in specials}

    result = trained(corpus, tmp_path / "out", model=family, vocab_size=VOCAB, limit_alphabet=30)
    assert len(characters(result)) == 30 < len(characters(baseline[family]))


@pytest.mark.parametrize("source", ["wordpiece_default", "bytelevel_bpe", "sentencepiece", "unigram"])
def test_like_keeps_the_pipeline_and_specials_of_its_source(corpus, tmp_path, tokenizer_dirs, source):
    """The source's normalizer, pre-tokenizer, post-processor and decoder, its special tokens with their ids,
    and its model options, whatever the family's preset holds (a Unigram source is trained here with its own
    special tokens, since no Unigram tokenizer ships in the test assets)."""
    if source == "unigram":
        source_dir = tmp_path / "unigram-source"
        trained(corpus, source_dir, model="unigram", vocab_size=VOCAB, special_tokens=("<pad>", "</s>", "<unk>", "<x>"))
    else:
        source_dir = tokenizer_dirs[source]
    theirs = json.loads((Path(source_dir) / "tokenizer.json").read_text("utf-8")) if source != "sentencepiece" else None
    vocab_size = 4000 if source == "sentencepiece" else 900 if source == "bytelevel_bpe" else VOCAB
    if source == "wordpiece_default":
        vocab_size = 3000
    result = trained(corpus, tmp_path / "out", like=str(source_dir), vocab_size=vocab_size, unit_bytes=1 << 20)
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(source_dir))
    theirs = json.loads(reference.backend_tokenizer.to_str())
    ours = result["tokenizer"]
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        assert ours[part] == theirs[part], part
    assert [t["content"] for t in ours["added_tokens"] if t["special"]] == [
        t["content"] for t in theirs["added_tokens"] if t["special"]
    ]
    assert result["manifest"]["recipe"]["origin"]["like"] == str(source_dir)


#: Each option of ``train`` (a field of TrainConfig, JobConfig's included) -> the tests that show its effect,
#: as "test file::test name". An option added without one fails the test below.
EFFECT_TESTS = {
    "inputs": ["test_train.py::test_bpe_equals_train_from_iterator_on_the_raw_corpus_with_any_number_of_workers"],
    "out": ["test_train.py::test_a_trained_tokenizer_is_served_and_encodes_as_in_process"],
    "text_field": ["test_train_options.py::test_text_field_names_the_field_the_text_is_read_from"],
    "on_bad_record": [
        "test_train.py::test_the_train_command_is_listed_and_refuses_bad_records_naming_the_line",
        "test_train.py::test_a_bad_record_keeps_the_counted_units_and_the_skipping_rerun_counts_only_the_rest",
    ],
    "unit_bytes": ["test_train_options.py::test_counts_go_where_told_one_file_per_unit_of_unit_bytes"],
    "shard_index": ["test_train.py::test_bpe_equals_train_from_iterator_on_the_raw_corpus_with_any_number_of_workers"],
    "num_shards": ["test_train.py::test_bpe_equals_train_from_iterator_on_the_raw_corpus_with_any_number_of_workers"],
    "wait_seconds": ["test_train.py::test_merge_never_trains_on_part_of_the_counts_and_names_the_missing_units"],
    "retry_deadline": ["test_corpus.py::test_refusals_stop_at_once_and_failures_are_retried_until_the_deadline"],
    "storage_options": [
        "test_object_storage.py::test_train_store_to_store_three_sagemaker_instances_give_the_tokenizer_of_one_worker_on_local_files"
    ],
    "progress": ["test_train.py::test_a_trained_tokenizer_is_served_and_encodes_as_in_process"],
    "log_every": ["test_train.py::test_a_trained_tokenizer_is_served_and_encodes_as_in_process"],
    "environ": ["test_corpus.py::test_worker_index_resolution"],  # not a flag: where the worker index is read
    "model": [
        "test_train.py::test_bpe_equals_train_from_iterator_on_the_raw_corpus_with_any_number_of_workers",
        "test_train.py::test_unigram_has_the_token_set_and_scores_of_train_from_iterator_but_for_the_readded_characters",
    ],
    "vocab_size": [
        "test_train.py::test_bpe_equals_train_from_iterator_on_the_raw_corpus_with_any_number_of_workers",
        "test_train.py::test_a_vocabulary_smaller_than_alphabet_and_special_tokens_is_refused_naming_both",
    ],
    "min_frequency": [
        "test_train_options.py::test_min_frequency_applies_to_the_counts_of_the_whole_corpus",
        "test_train_options.py::test_unigram_learns_only_from_pre_tokens_counted_min_frequency_times",
    ],
    "special_tokens": ["test_train_options.py::test_special_tokens_are_the_whole_list_in_id_order"],
    "like": [
        "test_train_options.py::test_like_keeps_the_pipeline_and_specials_of_its_source",
        "test_train.py::test_like_keeps_the_recipe_and_config_of_an_existing_tokenizer",
    ],
    "revision": [],  # a hub revision of --like: the suite has no hub to take one from
    "limit_alphabet": [
        "test_train_options.py::test_limit_alphabet_keeps_only_the_most_frequent_characters",
        "test_train.py::test_limit_alphabet_keeps_the_most_frequent_characters_ties_broken_by_code_point",
    ],
    "model_max_length": ["test_train_options.py::test_model_max_length_lands_in_the_tokenizer_config"],
    "phase": ["test_train.py::test_merge_never_trains_on_part_of_the_counts_and_names_the_missing_units"],
    "counts_dir": ["test_train_options.py::test_counts_go_where_told_one_file_per_unit_of_unit_bytes"],
    "processes": ["test_train.py::test_sigterm_stops_the_counting_processes_and_leaves_no_temporary_file"],
    "count_memory": ["test_train.py::test_counting_memory_is_bounded_by_spilling_and_the_counts_stay_exact"],
}


def test_every_train_option_has_a_test_of_its_effect():
    """The options come from the code (TrainConfig's fields); each names tests that exist."""
    assert sorted(EFFECT_TESTS) == sorted(f.name for f in dataclasses.fields(TrainConfig))
    for option, tests in EFFECT_TESTS.items():
        assert tests or option == "revision", f"{option}: no test shows its effect"
        for test in tests:
            file, name = test.split("::")
            (path,) = (REPO / "tests").rglob(file)  # the test modules' folders mirror the code
            assert f"def {name}(" in path.read_text("utf-8"), (option, test)
