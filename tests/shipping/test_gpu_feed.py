"""benchmarks.gpu_feed: its model is transformers' BertForMaskedLM, its smoke run measures every feeding mode on the
same batches with the SDK mode's training process free of the tokenizer stack, its command line refuses what it
cannot run, and its prepared device-machine run fits that machine's tool. No timing asserts."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch
import transformers

from benchmarks import gpu_feed
from benchmarks.masked_lm import IGNORED_LABEL, MaskedLM, mask_tokens
from testkit import assets
from testkit.servers import REPO


def bert_state_for_ours(theirs, layers: int) -> dict:
    """transformers' BertForMaskedLM parameters under our module's names (query, key and value as one)."""
    state = theirs.state_dict()
    ours = {
        "words.weight": state["bert.embeddings.word_embeddings.weight"],
        "positions.weight": state["bert.embeddings.position_embeddings.weight"],
        "token_types.weight": state["bert.embeddings.token_type_embeddings.weight"],
        "embedding_norm.weight": state["bert.embeddings.LayerNorm.weight"],
        "embedding_norm.bias": state["bert.embeddings.LayerNorm.bias"],
        "head.weight": state["cls.predictions.transform.dense.weight"],
        "head.bias": state["cls.predictions.transform.dense.bias"],
        "head_norm.weight": state["cls.predictions.transform.LayerNorm.weight"],
        "head_norm.bias": state["cls.predictions.transform.LayerNorm.bias"],
        "decoder_bias": state["cls.predictions.bias"],
    }
    for i in range(layers):
        theirs_layer, our_layer = f"bert.encoder.layer.{i}.", f"layers.{i}."
        for kind in ("weight", "bias"):
            ours[f"{our_layer}qkv.{kind}"] = torch.cat(
                [state[f"{theirs_layer}attention.self.{name}.{kind}"] for name in ("query", "key", "value")]
            )
            for our_name, their_name in (
                ("attention_out", "attention.output.dense"),
                ("attention_norm", "attention.output.LayerNorm"),
                ("up", "intermediate.dense"),
                ("down", "output.dense"),
                ("output_norm", "output.LayerNorm"),
            ):
                ours[f"{our_layer}{our_name}.{kind}"] = state[f"{theirs_layer}{their_name}.{kind}"]
    return ours


def test_the_model_is_bert_for_masked_lm():
    """transformers' own module is the oracle: its weights in ours (every one of ours, strictly) give its logits,
    with padding, token types and the tied decoder; the parameter counts are equal."""
    config = transformers.BertConfig(vocab_size=300, **gpu_feed.MODEL_SIZES["tiny"])
    torch.manual_seed(0)
    theirs = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():  # nothing left at its initial zeros or ones, so a slip shows in the logits
        for parameter in theirs.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    ours = MaskedLM(config.to_dict()).eval()
    ours.load_state_dict(bert_state_for_ours(theirs, config.num_hidden_layers), strict=True)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())

    ids = torch.randint(5, 300, (3, 17))
    attention = torch.ones_like(ids)
    attention[1, 9:] = 0
    attention[2, 4:] = 0
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    with torch.no_grad():
        expected = theirs(input_ids=ids, attention_mask=attention, token_type_ids=types).logits
        got = ours(ids, attention, types)
    real = attention.bool()
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-4)


def test_masking_chooses_real_tokens_only_and_keeps_their_ids_as_labels():
    ids = torch.randint(5, 300, (64, 128))
    attention = torch.ones_like(ids)
    attention[:, 100:] = 0
    inputs, labels = mask_tokens(ids, attention, 4, torch.Generator().manual_seed(0))
    chosen = labels != IGNORED_LABEL
    assert not chosen[:, 100:].any() and (inputs[:, 100:] == ids[:, 100:]).all()
    assert (inputs[chosen] == 4).all() and (labels[chosen] == ids[chosen]).all()
    assert (inputs[~chosen] == ids[~chosen]).all()
    assert 0.13 < chosen[:, :100].float().mean().item() < 0.17


@pytest.mark.parametrize(
    ("asked", "smoke", "passed"),
    [(None, False, "auto"), (None, True, 2), ("none", False, None), ("auto", True, "auto"), (4, False, 4)],
)
def test_replicas_passed_to_launch(asked, smoke, passed):
    assert gpu_feed.replicas_to_pass(asked, smoke) == passed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0"], "at least 1 worker"),
        (["--workers", "2,x"], "worker counts separated by commas"),
        (["--replicas", "0"], "auto, none, or a count of at least 1"),
        (["--replicas", "many"], "auto, none, or a count of at least 1"),
        (["--modes", "sdk,gpu"], "gpu: the modes are pretokenized, in-worker, sdk"),
        (["--steps", "0"], "at least 1"),
        (["--max-length", "1000"], "at most 512, the model's positions"),
        (["--batch-size", "64", "--distinct-texts", "32"], "at least one batch"),
    ],
)
def test_the_command_line_refuses_what_it_cannot_run(argv, message, capsys, tmp_path):
    bounded = ["--out", str(tmp_path), "--budget-seconds", "1"]  # were it accepted: no mode would run
    with pytest.raises(SystemExit) as stopped:
        gpu_feed.main([*argv, *bounded] if "--modes" in argv else [*argv, *bounded, "--modes", "pretokenized"])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_cuda_asked_for_without_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        gpu_feed.main(["--device", "cuda"])
    assert "sees no CUDA device here (--device cpu runs on the CPU)" in capsys.readouterr().err


def test_the_prepared_device_run_fits_the_device_tool():
    """The run tool takes a command of at most 2,000 characters and 8 carried paths, and stops a command at its
    timeout_s (at most 600 s): the run's own budget ends well inside it, within the 8 minutes it is sized for."""
    printed = gpu_feed.device_commands()
    command = re.search(r"^command: (.*)$", printed, re.M)[1]
    carry = json.loads(re.search(r"^carry: (.*)$", printed, re.M)[1])
    timeout = int(re.search(r"^timeout_s: (\d+)$", printed, re.M)[1])
    assert len(command) <= 2000 and len(carry) <= 8
    assert command.endswith("python3 -m benchmarks.gpu_feed --out $OUT")  # the defaults: the GPU run
    _, defaults = gpu_feed.parse_args([])
    assert defaults.budget_seconds + 60 <= timeout <= 8 * 60
    assets.chinese_reviews()  # the texts the run carries, fetched here as any test run fetches them
    assert (REPO / carry[1]).is_dir() and (REPO / carry[1] / "neg.txt").is_file()
    assert carry[0] == ".whl" and "-d .whl " in printed


@pytest.mark.slow  # ~45 s on the 2 shared cores: three processes, each importing torch; one launches a service
@pytest.mark.timeout(300)
def test_smoke_run_measures_every_mode_on_the_same_batches(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_feed", "--smoke", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_feed.json").read_text())
    runs = {run["mode"]: run for run in result["runs"]}
    assert list(runs) == list(gpu_feed.MODES)
    for run in runs.values():
        assert run["steps"] == result["settings"]["steps"] and run["steps_per_s"] > 0, run
        assert 0 <= run["waiting_share"] <= 1 and run["wait_seconds"] <= run["seconds"]
        assert run["workers"] == (0 if run["mode"] == "pretokenized" else 2)
    assert runs["pretokenized"]["vs_pretokenized"] == 1.0
    assert result["checks"] == {"same_batches": True, "same_model": True, "sdk_process_without_tokenizers": True}
    assert len({run["batch_digest"] for run in runs.values()}) == 1
    # the modules each training process ended with: the check sees tokenizers where it is, and not in (c)'s
    assert runs["in-worker"]["loaded"] == {"tokenizers": True, "transformers": True}
    assert runs["sdk"]["loaded"] == {"tokenizers": False, "transformers": False}
    assert runs["sdk"]["service"].startswith("TokenizerClient(") and "launched" in runs["sdk"]["service"]
    table = (tmp_path / "gpu_feed.txt").read_text()
    assert table in done.stdout
    assert "measured on this machine" in table and result["machine"]["cpu_model"] in table
    assert all(run["label"] in table for run in runs.values())
    assert "==== (c)" in (tmp_path / "gpu_feed.log").read_text()
