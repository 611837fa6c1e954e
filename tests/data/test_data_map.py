"""``service.data``'s map functions in ``datasets.Dataset.map`` against datasets' own in-process map: the same columns,
values and Arrow features, forked (``num_proc=4``, in a parent whose tokenizer ran with ``TOKENIZERS_PARALLELISM=true``)
and spawned; datasets' cache keyed on the served tokenizer and the options, never on the URL; a user's own function
calling the client never answered from a stale cache; bad input refused by column and row."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from service.client import TokenizerClient
from service.data import ChatTokenizeFunction, MapInputError, TokenizeFunction
from testkit.scripts import run_json_script
from testkit.servers import ServerProcess, free_port

OPTIONS = {"truncation": True, "max_length": 48}

# One run of a training script: the parent uses an in-process tokenizer (Rust's pool is up) before datasets forks,
# then maps a dataset on disk (so datasets caches) through the service; prints what the test compares.
SCRIPT = textwrap.dedent("""
    import json, logging, os, sys

    def main():
        assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
        import datasets, multiprocess
        from transformers import AutoTokenizer
        from service.client import TokenizerClient

        datasets.disable_progress_bars()
        warnings = []
        class Collect(logging.Handler):
            def emit(self, record):
                warnings.append(record.getMessage())
        datasets.utils.logging.get_logger("datasets").addHandler(Collect(logging.WARNING))

        dataset = datasets.load_from_disk(sys.argv[1])
        in_memory = datasets.Dataset.from_dict(dataset.to_dict())  # no cache files: the reference is never cached
        reports = []
        for run in json.loads(sys.argv[2]):
            multiprocess.set_start_method(run["start_method"], force=True)
            tokenizer = AutoTokenizer.from_pretrained(run["tokenizer"])
            tokenizer(dataset["text"][:64])  # the parent uses the tokenizer before any fork
            client = TokenizerClient.launch() if run["url"] == "launch" else TokenizerClient(run["url"])
            maps = []
            for options, num_proc in run["maps"]:
                reference = in_memory.map(lambda batch: tokenizer(batch["text"], **options), batched=True)
                before = set(os.listdir(sys.argv[1]))
                mapped = dataset.map(client.tokenize_function("text", **options), batched=True, num_proc=num_proc)
                maps.append({
                    "fingerprint": mapped._fingerprint,
                    "computed": len(set(os.listdir(sys.argv[1])) - before),
                    "columns_equal": mapped.column_names == reference.column_names,
                    "features_equal": mapped.features == reference.features,
                    "values_equal": mapped.to_dict() == reference.to_dict(),
                })
            reports.append(maps)
        print(json.dumps({"warnings": warnings, "runs": reports}))

    if __name__ == "__main__":  # spawned map workers import this file
        main()
""")


def run_script(tmp_path: Path, dataset: Path, *runs: dict[str, Any]) -> dict[str, Any]:
    """A fresh process doing ``runs`` in turn: each a ``url`` ("launch": ``TokenizerClient.launch()``), the in-process
    ``tokenizer`` to compare with, the datasets multiprocess ``start_method`` and its ``maps``: [options, num_proc]."""
    script = tmp_path / "map_script.py"
    script.write_text(SCRIPT)
    report: dict[str, Any] = run_json_script(
        script,
        str(dataset),
        json.dumps(runs),
        cwd=tmp_path,
        timeout=240,
        TOKENIZERS_PARALLELISM="true",
    )
    assert not [warning for warning in report["warnings"] if "hash" in warning], report["warnings"]
    for run in report["runs"]:
        for made in run:
            assert made["columns_equal"] and made["features_equal"] and made["values_equal"], made
    return report


@pytest.fixture(scope="module")
def texts(corpus: dict[str, list[str]]) -> list[str]:
    return corpus["zh"][:200] + corpus["en"][:200]


@pytest.fixture
def dataset_dir(tmp_path: Path, texts: list[str]) -> Path:
    import datasets

    path = tmp_path / "dataset"
    datasets.Dataset.from_dict({"text": texts, "label": [i % 3 for i in range(len(texts))]}).save_to_disk(str(path))
    return path


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_map_equals_in_process_and_the_cache_keys_on_the_served_tokenizer(
    servers, tokenizer_dirs, dataset_dir, tmp_path
):
    """A process on deployed URLs: every map equals datasets' in-process map (forked workers; another tokenizer with
    spawned ones) and computes, the fingerprint changing with the options and the tokenizer. A new process on a
    launched service (a Unix socket: another URL) serving the same tokenizer: every map loads from the cache."""
    maps = [[OPTIONS, 4], [{**OPTIONS, "max_length": 32}, 1]]
    default, other = str(tokenizer_dirs["wordpiece_default"]), str(tokenizer_dirs["bytelevel_bpe"])
    first = run_script(
        tmp_path,
        dataset_dir,
        {"url": servers["wordpiece_default"].url, "tokenizer": default, "start_method": "fork", "maps": maps},
        {"url": servers["bytelevel_bpe"].url, "tokenizer": other, "start_method": "spawn", "maps": [[OPTIONS, 2]]},
    )["runs"]
    again = run_script(
        tmp_path, dataset_dir, {"url": "launch", "tokenizer": default, "start_method": "fork", "maps": maps}
    )["runs"]
    fingerprints = [made["fingerprint"] for made in first[0]]
    assert fingerprints[0] != fingerprints[1] and all(made["computed"] for made in first[0])  # by the options
    assert first[1][0]["fingerprint"] not in fingerprints and first[1][0]["computed"]  # by the tokenizer
    assert [made["fingerprint"] for made in again[0]] == fingerprints  # another URL, the same tokenizer
    assert not any(made["computed"] for made in again[0]), again  # ... loaded from the cache, in a new process


@pytest.mark.slow
def test_a_users_own_function_is_not_answered_from_the_cache_after_the_tokenizer_changed(
    tokenizer_dirs, reference_tokenizers, dataset_dir, texts, tmp_path
):
    """``def tok(batch): return client(batch["text"])``: a service behind the same URL now serving another tokenizer
    makes datasets compute again (the client's pickle carries the served fingerprint)."""
    import datasets

    datasets.disable_progress_bars()
    port = free_port()
    client = TokenizerClient(f"http://127.0.0.1:{port}")

    def tok(batch: dict[str, list[Any]]) -> Any:
        return client(batch["text"], **OPTIONS)

    mapped = {}
    for family, args in (
        ("wordpiece_default", ()),
        ("bytelevel_bpe", ("--model", str(tokenizer_dirs["bytelevel_bpe"]))),
    ):
        server = ServerProcess(*args, port=port, log_path=tmp_path / f"{family}.log").start()
        try:
            dataset = datasets.load_from_disk(str(dataset_dir))
            assert datasets.fingerprint.Hasher.hash(tok) == datasets.fingerprint.Hasher.hash(tok)  # deterministic
            mapped[family] = dataset.map(tok, batched=True)["input_ids"]
        finally:
            server.stop()
            client.close()
    for family, ids in mapped.items():
        assert ids == reference_tokenizers[family](texts, **OPTIONS)["input_ids"], family


def test_streaming_map_equals_in_process_streaming(servers, reference_tokenizers, texts):
    import datasets

    tokenizer = reference_tokenizers["bytelevel_bpe"]  # its server is the other tests' too
    client = TokenizerClient(servers["bytelevel_bpe"].url)
    stream = datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset(num_shards=3)
    ours = list(stream.map(client.tokenize_function(**OPTIONS), batched=True, batch_size=64))
    theirs = list(stream.map(lambda batch: tokenizer(batch["text"], **OPTIONS), batched=True, batch_size=64))
    assert ours == theirs and len(ours) == len(texts)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ({"body": ["a", "b"]}, "column 'text' is not in the dataset; its columns are ['body']"),
        ({"text": ["a", None, "c"]}, "column 'text', row 1: NoneType None is not a string"),
        ({"text": [3, 7]}, "column 'text', row 0: int 3 is not a string"),
        ({"text": [["a"], ["b"]]}, "column 'text', row 0: list ['a'] is not a string"),
    ],
)
def test_bad_rows_are_refused_by_column_and_row(servers, column, message):
    import datasets

    function = TokenizeFunction(TokenizerClient(servers["wordpiece_default"].url), "text")
    with pytest.raises(MapInputError) as info:
        datasets.Dataset.from_dict(column).map(function, batched=True, with_indices=True)
    assert message in str(info.value)
    rows = {"text": ["a", "b", None]}
    with pytest.raises(MapInputError, match="row 2 of the batch"):  # without indices: the row of the batch
        function(rows)


def test_an_empty_dataset_is_refused(servers):
    import datasets

    function = TokenizeFunction(TokenizerClient(servers["wordpiece_default"].url), "text")
    empty = datasets.Dataset.from_dict({"text": []})
    assert "input_ids" not in empty.map(function, batched=True).column_names  # datasets never calls it: hence .map
    with pytest.raises(MapInputError, match="column 'text': the dataset is empty"):
        function.map(empty)
    with pytest.raises(MapInputError, match="column 'text' is not in the dataset; its columns are \\['body'\\]"):
        function.map(datasets.Dataset.from_dict({"body": ["a"]}))
    with pytest.raises(MapInputError, match="column 'text', row 2: NoneType"):
        function.map(datasets.Dataset.from_dict({"text": ["a", "b", None]}))
    with pytest.raises(MapInputError, match=r"column 'messages', row 1 of the batch.*not a conversation"):
        ChatTokenizeFunction(function.client)({"messages": [[{"role": "user", "content": "hi"}], "hello"]})


FRESH_TRAINING_SCRIPT = textwrap.dedent("""
    import json, sys
    import datasets
    from service.client import TokenizerClient
    from service.data import TokenizedStream

    client = TokenizerClient(sys.argv[1])
    function = client.tokenize_function(truncation=True, max_length=8)
    mapped = function.map(datasets.Dataset.from_dict({"text": ["hello world", "你好"]}))
    streamed = list(TokenizedStream(["hello world", "你好"], function))
    equal = mapped["input_ids"] == [example["input_ids"] for example in streamed]
    print(json.dumps({"modules": sorted(sys.modules), "equal": equal}))
""")


def test_a_training_script_never_loads_the_tokenizer_stack(servers, tmp_path):
    """datasets.map and the torch stream through the service: no tokenizer, transformers or server in the process."""
    from testkit.stack import FORBIDDEN

    script = tmp_path / "fresh.py"
    script.write_text(FRESH_TRAINING_SCRIPT)
    report = run_json_script(
        script,
        servers["wordpiece_default"].url,
        cwd=tmp_path,
        timeout=120,
    )
    assert report["equal"]
    assert not {name.split(".")[0] for name in report["modules"]} & set(FORBIDDEN)
