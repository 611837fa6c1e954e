"""What a real server writes to stderr: one format for every line (uvicorn's and transformers' included), counts in
words, and, for a byte-level BPE tokenizer whose config asks for a clean-up transformers skips, one line of ours
saying what that means for /decode instead of transformers' bare warning."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from service.client import TokenizerClient
from testkit.servers import ServerProcess

#: The service's format (service/http/cli.py): time, level, logger, message.
LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: \S.*")


def test_every_line_shares_one_format_and_the_bpe_clean_up_is_said_in_it(tokenizer_dirs, tmp_path):
    """Issue 42: uvicorn's `INFO:     Started server process` lines had no time; a byte-level BPE tokenizer printed
    transformers' bare `[transformers] Ignoring clean_up_tokenization_spaces=True for BPE tokenizer ...`; the
    server said `1 Rust threads`."""
    from transformers import AutoTokenizer

    model = tmp_path / "bpe"
    shutil.copytree(tokenizer_dirs["bytelevel_bpe"], model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}))
    reference = AutoTokenizer.from_pretrained(str(model))
    ids = reference("Hello , world ! It 's here .")["input_ids"]
    log = tmp_path / "server.log"
    with ServerProcess("--model", str(model), "--threads", "1", "--access-log", log_path=log) as server:
        client = TokenizerClient(server.url)
        for clean_up in (None, True, False):  # the config's value, then each a request may send
            expected = reference.decode(ids, clean_up_tokenization_spaces=clean_up)
            assert client.decode(ids, clean_up_tokenization_spaces=clean_up) == expected  # as transformers
        assert reference.decode(ids, clean_up_tokenization_spaces=True) == reference.decode(ids)  # "changes nothing"
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    assert any(" uvicorn." in line for line in lines), lines  # uvicorn's own lines are there, in our format
    assert any('"POST /decode HTTP/1.1" 200' in line for line in lines), lines  # its access log too
    odd = [line for line in lines if not LINE.fullmatch(line)]
    assert not odd, f"lines not in the service's format: {odd}"
    assert not any("Ignoring clean_up_tokenization_spaces" in line for line in lines)
    said = [line for line in lines if "clean_up_tokenization_spaces=True changes nothing" in line]
    assert len(said) == 1 and "answers the decoder's text as is" in said[0], said
    assert any(line.endswith("with 1 Rust thread") for line in lines), lines


def test_a_tokenizer_whose_clean_up_applies_says_nothing_of_it(tmp_path):
    """The embedded default (WordPiece) cleans up as its config says: nothing to explain."""
    log = tmp_path / "server.log"
    with ServerProcess(log_path=log) as server:
        TokenizerClient(server.url).decode([101, 102])
    assert "clean_up_tokenization_spaces" not in Path(log).read_text()
