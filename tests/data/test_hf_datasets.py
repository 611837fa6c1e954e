"""The client as the function of ``datasets.Dataset.map(batched=True, num_proc=2)``.

In a fresh interpreter with ``TOKENIZERS_PARALLELISM=true`` whose parent process has used an in-process
fast tokenizer (its Rust pool is up) before ``map`` forks its workers: the client's columns must equal the
in-process map's, column for column, whether the client is wrapped in a function or passed itself.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from testkit.scripts import run_json_script

pytestmark = pytest.mark.slow  # datasets.map's worker processes in a fresh interpreter

SCRIPT = textwrap.dedent("""
    import json, os, sys

    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    from datasets import Dataset, disable_caching
    from transformers import AutoTokenizer

    from service.client import TokenizerClient

    url, tokenizer_dir, texts_path = sys.argv[1:4]
    disable_caching()
    texts = json.load(open(texts_path, encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer(texts[:64])  # the parent uses the tokenizer: Rust's thread pool is running before any fork
    dataset = Dataset.from_dict({"text": texts, "label": [i % 3 for i in range(len(texts))]})
    options = {"truncation": True, "max_length": 48}

    in_process = dataset.map(lambda batch: tokenizer(batch["text"], **options), batched=True)
    client = TokenizerClient(url)
    wrapped = dataset.map(lambda batch: client(batch["text"], **options), batched=True, num_proc=2)
    itself = dataset.map(client, batched=True, num_proc=2, input_columns="text", fn_kwargs=options)
    print(json.dumps({
        "columns": [in_process.column_names, wrapped.column_names, itself.column_names],
        "wrapped_equal": wrapped.to_dict() == in_process.to_dict(),
        "itself_equal": itself.to_dict() == in_process.to_dict(),
        "rows": len(in_process),
    }))
""")


@pytest.mark.timeout(240)
def test_client_in_datasets_map_with_two_processes_equals_in_process(servers, tokenizer_dirs, corpus, tmp_path):
    family = "wordpiece_default"  # its token_type_ids column too
    texts = corpus["zh"][:300] + corpus["en"][:300]
    texts_path = tmp_path / "texts.json"
    texts_path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    script = tmp_path / "map.py"
    script.write_text(SCRIPT)
    report = run_json_script(
        script,
        servers[family].url,
        str(tokenizer_dirs[family]),
        str(texts_path),
        cwd=tmp_path,
        timeout=200,
        TOKENIZERS_PARALLELISM="true",
    )
    in_process, wrapped, itself = report["columns"]
    assert wrapped == itself == in_process and {"input_ids", "attention_mask"} <= set(in_process)
    assert report["wrapped_equal"] and report["itself_equal"] and report["rows"] == len(texts)
