"""The fingerprint covers everything any route's output depends on, and nothing about where the files came from.

Each input of :func:`~service.engine.loading.call_config` -- the list comes from the code -- is changed alone, in
the files a user would edit (or in the loaded object where no file sets it), and must change the fingerprint and
some output transformers itself gives (the routes' oracle); the same files loaded twice -- from a directory, from
its tokenizer.json, from an object store -- give the same fingerprint. Then what is keyed on it, end to end, with a
served pair of tokenizers differing only in a chat template (the default one, then a named one): datasets' cache,
a pre-tokenize rerun, a pin; and records made before the fingerprint covered templates, refused saying why."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from service.client import FingerprintMismatch, TokenizerClient
from service.engine.loading import DEFAULT_TOKENIZER_DIR, call_config, fingerprint, load_tokenizer
from service.jobs import OutputConflict
from service.launch.command import _model_identity
from service.pretokenize import PretokenizeConfig, pretokenize
from service.wire import FINGERPRINT_SCHEME
from testkit.servers import ServerProcess, free_port


def template(opening: str) -> str:
    """A template with generation markers (the chat routes' masks need them), each turn opened as ``opening``."""
    turn = "{{ m.content }}{{ sep_token }}"
    return (
        "{% for m in messages %}" + opening + "{% if m.role == 'assistant' %}{% generation %}" + turn
        + "{% endgeneration %}{% else %}" + turn + "{% endif %}{% endfor %}"
    )  # fmt: skip


TEMPLATE_A = template("<{{ m.role }}>")
TEMPLATE_B = template("[{{ m.role }}] ")
#: Every special token the default tokenizer names, rendered: a change of any one changes the chat routes' text.
SPECIALS_TEMPLATE = (
    "{{ unk_token }}{{ sep_token }}{{ pad_token }}{{ cls_token }}{{ mask_token }}{{ messages[0].content }}"
)
CONVERSATION = [{"role": "user", "content": "今天天气很好"}, {"role": "assistant", "content": "是的 , hello !"}]
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}]


def leaves(config: dict[str, Any]) -> dict[str, Any]:
    """``call_config`` as its inputs: ``group.key`` for the keys of a group, the top-level key otherwise."""
    flat: dict[str, Any] = {}
    for name, value in config.items():
        if isinstance(value, dict) and name != "chat_templates":
            flat.update({f"{name}.{key}": inner for key, inner in value.items()})
        else:
            flat[name] = value
    return flat


def backend(tokenizer: Any) -> dict[str, Any]:
    """tokenizer.json as the fingerprint reads it: without the padding and truncation a call leaves set."""
    document: dict[str, Any] = json.loads(tokenizer.backend_tokenizer.to_str())
    document.pop("padding", None)
    document.pop("truncation", None)
    return document


def copy_of(source: Path, into: Path) -> Path:
    shutil.copytree(source, into)
    return into


def edit_config(directory: Path, **changes: Any) -> None:
    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def with_templates(directory: Path, templates: str | dict[str, str]) -> Path:
    """Saved as transformers saves them: ``chat_template.jinja``, named ones under ``additional_chat_templates/``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    tokenizer.chat_template = templates
    tokenizer.save_pretrained(str(directory))
    return directory


@dataclass(frozen=True)
class Change:
    """One input changed alone: ``make(directory)`` edits a copy of the base's files (or returns a loaded tokenizer
    changed in code), and ``output(tokenizer)`` is what transformers answers that the change alters."""

    leaf: str
    make: Callable[[Path], Any]
    output: Callable[[Any], Any]
    base: str = "default"  # which base tokenizer (below) it changes
    along: frozenset[str] = frozenset()  # the other inputs that necessarily change with it (a pad token's id)
    alone: bool = True  # False: the change also rewrites tokenizer.json (a class that rebuilds the backend)


def _in_code(change: Callable[[Any], None]) -> Callable[[Path], Any]:
    def make(directory: Path) -> Any:
        tokenizer = load_tokenizer(str(directory)).tokenizer
        change(tokenizer)
        return tokenizer

    return make


def _encode(**options: Any) -> Callable[[Any], Any]:
    return lambda tokenizer: dict(tokenizer(["今天天气很好 , hello world", "短"], **options))


def _decode(tokenizer: Any) -> Any:
    return tokenizer.batch_decode(tokenizer(["今天 , hello world ! it 's"])["input_ids"])


def _render(**options: Any) -> Callable[[Any], Any]:
    return lambda tokenizer: tokenizer.apply_chat_template(CONVERSATION, tokenize=False, **options)


CHANGES = [
    Change("encode.model_max_length", lambda d: edit_config(d, model_max_length=6), _encode(truncation=True)),
    Change(
        "encode.pad_token",
        lambda d: edit_config(d, pad_token="[UNK]"),
        _encode(padding=True),
        along=frozenset({"encode.pad_token_id", "special_tokens.pad_token"}),
    ),
    Change(
        "encode.pad_token_id",
        lambda d: edit_config(d, pad_token="[MASK]"),
        _encode(padding=True),
        along=frozenset({"encode.pad_token", "special_tokens.pad_token"}),
    ),
    Change(
        "encode.pad_token_type_id",
        _in_code(lambda t: setattr(t, "_pad_token_type_id", 1)),  # no file sets it; a tokenizer class may
        _encode(padding=True),
    ),
    Change("encode.padding_side", lambda d: edit_config(d, padding_side="left"), _encode(padding=True)),
    Change(
        "encode.truncation_side",
        lambda d: edit_config(d, truncation_side="left"),
        _encode(truncation=True, max_length=5),
    ),
    Change(
        "encode.model_input_names",
        lambda d: edit_config(d, model_input_names=["input_ids", "attention_mask"]),
        _encode(),
    ),
    Change(
        "encode.split_special_tokens",
        lambda d: edit_config(d, split_special_tokens=True),
        lambda t: t(["[CLS] [MASK] 好"])["input_ids"],
    ),
    Change(
        "decode.clean_up_tokenization_spaces", lambda d: edit_config(d, clean_up_tokenization_spaces=False), _decode
    ),
    Change(
        "decode.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
        lambda d: edit_config(d, clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=True),
        lambda t: t.batch_decode(t(["Hello , world ! It 's"])["input_ids"]),
        base="bpe_cleaning_up",
    ),
    Change(
        "decode.tokenizer_class",
        lambda d: edit_config(d, tokenizer_class="WhisperTokenizer"),  # its own decode (timestamps, spaces)
        _decode,
        alone=False,
    ),
    Change("chat_templates", lambda d: with_templates(d, TEMPLATE_B), _render(), base="templated"),
    Change(
        "chat_templates",
        lambda d: with_templates(d, {"default": TEMPLATE_A, "tool_use": "{{ tools[0].function.name }}" + TEMPLATE_B}),
        _render(tools=TOOLS),  # only the named template changed: transformers picks it for a call with tools
        base="named",
    ),
    # each special token named as another one the vocabulary has (a new one would be added to tokenizer.json)
    *(
        Change(
            f"special_tokens.{name}",
            lambda d, name=name, token=token: edit_config(d, **{name: token}),
            _render(),
            base="specials",
            along=frozenset({"encode.pad_token", "encode.pad_token_id"} if name == "pad_token" else ()),
        )
        for name, token in (
            ("unk_token", "[MASK]"),
            ("sep_token", "[CLS]"),
            ("pad_token", "[UNK]"),
            ("cls_token", "[SEP]"),
            ("mask_token", "[PAD]"),
        )
    ),
]


@pytest.fixture(scope="module")
def bases(tmp_path_factory, tokenizer_dirs) -> dict[str, Path]:
    """The tokenizers the changes start from: the embedded default, with templates, a BPE cleaning up spaces."""
    root = tmp_path_factory.mktemp("bases")
    made = {"default": copy_of(DEFAULT_TOKENIZER_DIR, root / "default")}
    made["templated"] = with_templates(copy_of(DEFAULT_TOKENIZER_DIR, root / "templated"), TEMPLATE_A)
    named = {"default": TEMPLATE_A, "tool_use": "{{ tools[0].function.name }}" + TEMPLATE_A}
    made["named"] = with_templates(copy_of(DEFAULT_TOKENIZER_DIR, root / "named"), named)
    made["specials"] = with_templates(copy_of(DEFAULT_TOKENIZER_DIR, root / "specials"), SPECIALS_TEMPLATE)
    made["bpe_cleaning_up"] = copy_of(tokenizer_dirs["bytelevel_bpe"], root / "bpe")
    edit_config(made["bpe_cleaning_up"], clean_up_tokenization_spaces=True)
    return made


def test_every_input_of_call_config_has_a_change_below():
    """The inputs come from the code: a new one in call_config fails here until a change of it is tested."""
    base = leaves(call_config(load_tokenizer(str(DEFAULT_TOKENIZER_DIR)).tokenizer))
    assert set(base) == {change.leaf for change in CHANGES}


@pytest.mark.parametrize("change", CHANGES, ids=[f"{c.leaf}@{c.base}" for c in CHANGES])
def test_each_input_changed_alone_changes_the_fingerprint_and_an_output(change, bases, tmp_path):
    from transformers import AutoTokenizer

    base = load_tokenizer(str(bases[change.base])).tokenizer
    made = change.make(copy_of(bases[change.base], tmp_path / "changed"))
    changed = made if made is not None and not isinstance(made, Path) else None
    if changed is None:
        changed = load_tokenizer(str(tmp_path / "changed")).tokenizer
        user_view = AutoTokenizer.from_pretrained(str(tmp_path / "changed"))  # what the user's code loads
        assert change.output(user_view) == change.output(changed)
    assert change.output(changed) != change.output(base), "the change alters no output: it is not an input"
    before, after = leaves(call_config(base)), leaves(call_config(changed))
    assert before[change.leaf] != after[change.leaf]
    if change.alone:
        assert {k for k in before if before[k] != after[k]} == {change.leaf, *change.along}
        assert backend(base) == backend(changed)
    assert fingerprint(changed) != fingerprint(base)


def test_tokenizer_json_changes_the_fingerprint_and_its_padding_state_does_not(tmp_path):
    base = load_tokenizer(None)
    document = json.loads((DEFAULT_TOKENIZER_DIR / "tokenizer.json").read_text())
    document["normalizer"]["lowercase"] = not document["normalizer"]["lowercase"]
    (copy_of(DEFAULT_TOKENIZER_DIR, tmp_path / "lower") / "tokenizer.json").write_text(json.dumps(document))
    assert load_tokenizer(str(tmp_path / "lower")).fingerprint != base.fingerprint
    document = json.loads((DEFAULT_TOKENIZER_DIR / "tokenizer.json").read_text())
    document["padding"] = {"strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": None,
                           "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}  # fmt: skip
    (copy_of(DEFAULT_TOKENIZER_DIR, tmp_path / "padded") / "tokenizer.json").write_text(json.dumps(document))
    assert load_tokenizer(str(tmp_path / "padded")).fingerprint == base.fingerprint  # the service sets it per call


def test_the_same_files_give_the_same_fingerprint_from_wherever_they_are_loaded(bases, tmp_path):
    """Loaded twice each: a directory (and a copy elsewhere), its tokenizer.json, an object store (named templates
    in additional_chat_templates/ included); the fingerprint names the files' content, never their place."""
    from testkit.objectstore import LoopbackS3

    named = bases["named"]
    assert (named / "additional_chat_templates" / "tool_use.jinja").is_file()
    directory = load_tokenizer(str(named)).fingerprint
    assert load_tokenizer(str(named)).fingerprint == directory
    assert load_tokenizer(str(copy_of(named, tmp_path / "elsewhere"))).fingerprint == directory
    alone = load_tokenizer(str(named / "tokenizer.json")).fingerprint
    assert load_tokenizer(str(named / "tokenizer.json")).fingerprint == alone
    assert alone != directory  # a bare tokenizer.json has no config: no templates, no special tokens
    with LoopbackS3() as store:
        store.make_buckets("models")
        fs = store.filesystem()
        for path in sorted(named.rglob("*")):
            if path.is_file():
                fs.put_file(str(path), f"models/named/{path.relative_to(named).as_posix()}")
        url = store.url("models/named/")
        previous = os.environ.get("TOKENIZER_SERVICE_STORAGE_OPTIONS")
        os.environ["TOKENIZER_SERVICE_STORAGE_OPTIONS"] = store.options_json
        try:
            assert load_tokenizer(url).fingerprint == directory
            assert load_tokenizer(url).fingerprint == directory
        finally:
            if previous is None:
                del os.environ["TOKENIZER_SERVICE_STORAGE_OPTIONS"]
            else:
                os.environ["TOKENIZER_SERVICE_STORAGE_OPTIONS"] = previous


def test_a_named_template_changed_in_place_is_another_launch(bases, tmp_path):
    """The launch key names every file of the folder, named templates included: a changed template is another
    service, never the running one."""
    directory = copy_of(bases["named"], tmp_path / "named")
    before = _model_identity(str(directory))
    (directory / "additional_chat_templates" / "tool_use.jinja").write_text(TEMPLATE_B + "  ")
    assert _model_identity(str(directory)) != before
    alone = _model_identity(str(directory / "tokenizer.json"))  # a file alone: itself
    assert [name for name, *_ in alone[0]["files"]] == ["tokenizer.json"]


# -- what is keyed on it, through served tokenizers -------------------------------------------------------
@pytest.fixture(scope="module")
def template_pairs(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Two pairs of tokenizers differing only in a chat template: the default one, and a named one."""
    root = tmp_path_factory.mktemp("pairs")
    pairs = {}
    for name, (first, second) in {
        "default": (TEMPLATE_A, TEMPLATE_B),
        "named": ({"default": TEMPLATE_A, "tool_use": TEMPLATE_A}, {"default": TEMPLATE_A, "tool_use": TEMPLATE_B}),
    }.items():
        pairs[name] = (
            with_templates(copy_of(DEFAULT_TOKENIZER_DIR, root / f"{name}-a"), first),
            with_templates(copy_of(DEFAULT_TOKENIZER_DIR, root / f"{name}-b"), second),
        )
    return pairs


def chat_ids(directory: Path, conversations: list[list[dict[str, Any]]], **options: Any) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    return [
        tokenizer.apply_chat_template(c, tokenize=True, return_dict=True, **options)["input_ids"] for c in conversations
    ]


@pytest.mark.slow
@pytest.mark.parametrize("pair", ["default", "named"])
def test_a_template_changed_behind_the_same_url_is_never_answered_from_datasets_cache(pair, template_pairs, tmp_path):
    """``client.chat_tokenize_function().map(ds)`` with A served, then B behind the same URL: B's ids, computed
    again (datasets' cache is keyed on the fingerprint); a pin made with A refuses B."""
    import datasets

    datasets.disable_progress_bars()
    conversations = [[{"role": "user", "content": f"第{i}个 question {i}"}, CONVERSATION[1]] for i in range(6)]
    options = {"tools": TOOLS} if pair == "named" else {}
    path = tmp_path / "conversations"
    datasets.Dataset.from_dict({"messages": conversations}).save_to_disk(str(path))
    port = free_port()
    seen = {}
    for side, directory in zip("ab", template_pairs[pair], strict=True):
        with ServerProcess("--model", str(directory), port=port, log_path=tmp_path / f"{side}.log"):
            client = TokenizerClient(f"http://127.0.0.1:{port}")
            seen[side] = client.info()["fingerprint"]
            function = client.chat_tokenize_function(**options)
            mapped = function.map(datasets.load_from_disk(str(path)))
            assert mapped["input_ids"] == chat_ids(directory, conversations, **options), side
            if side == "b":
                with pytest.raises(FingerprintMismatch, match="changed tokenizer"):
                    TokenizerClient(client.urls[0], expected_fingerprint=seen["a"]).encode(["a"])
            client.close()
    assert seen["a"] != seen["b"]


def pretokenize_config(url: str, inputs: Path, out: Path) -> PretokenizeConfig:
    return PretokenizeConfig(
        inputs=(str(inputs),), out=out, url=url, messages_field="messages", unit_bytes=4 * 1024, progress="none"
    )


@pytest.fixture(scope="module")
def conversations_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chats") / "chats.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(120):
            messages = [{"role": "user", "content": f"第{i}个问题 question {i} " * 3}, CONVERSATION[1]]
            f.write(json.dumps({"messages": messages}, ensure_ascii=False) + "\n")
    return path


@pytest.mark.slow
def test_a_pretokenize_rerun_with_another_template_is_refused_never_mixed(template_pairs, conversations_file, tmp_path):
    """A's shards, one unit's record removed, rerun against B (only the template differs): refused, naming the
    tokenizer, the first shard left as it was; a record of the earlier fingerprint scheme is refused saying why."""
    first, second = template_pairs["default"]
    out = tmp_path / "out"
    with ServerProcess("--model", str(first), log_path=tmp_path / "a.log") as served:
        summary = asyncio.run(pretokenize(pretokenize_config(served.url, conversations_file, out), log=lambda m: None))
    records = sorted(out.glob("*.done"))
    assert len(records) >= 2, summary
    kept = records[0].read_bytes()
    records[1].unlink()
    with ServerProcess("--model", str(second), log_path=tmp_path / "b.log") as served:
        with pytest.raises(OutputConflict, match=r"other settings.*tokenizer") as refused:
            asyncio.run(pretokenize(pretokenize_config(served.url, conversations_file, out), log=lambda m: None))
        assert TokenizerClient(served.url).info()["fingerprint"] in str(refused.value)
        assert records[0].read_bytes() == kept and not records[1].exists()
        # a record as an earlier release wrote it: no scheme, the fingerprint of the scheme before templates
        document = json.loads(kept)
        assert document["settings"].pop("fingerprint_scheme") == FINGERPRINT_SCHEME
        document["settings"]["tokenizer"] = "sha256:" + "ab" * 32
        records[0].write_text(json.dumps(document))
        with pytest.raises(OutputConflict, match=r"earlier tokenizer-service.*cannot be told") as refused:
            asyncio.run(pretokenize(pretokenize_config(served.url, conversations_file, out), log=lambda m: None))
        assert "covers chat templates" in str(refused.value) and "other settings" not in str(refused.value)


# -- pins ---------------------------------------------------------------------------------------------------------
def test_a_pin_takes_the_whole_fingerprint_or_the_prefix_serve_logs(servers):
    url = servers["wordpiece_default"].url
    whole = TokenizerClient(url).info()["fingerprint"]
    logged = whole[:19]  # what `serve` logs on its "loaded" line: sha256: and 12 hex digits
    assert TokenizerClient(url, expected_fingerprint=logged).encode(["好"])["input_ids"]
    assert TokenizerClient(url, expected_fingerprint=whole).encode(["好"])["input_ids"]
    other = logged[:-1] + ("0" if logged[-1] != "0" else "1")
    with pytest.raises(FingerprintMismatch, match="a prefix pins the fingerprints that begin with it"):
        TokenizerClient(url, expected_fingerprint=other).encode(["好"])
    for malformed in ("sha256:abc", whole[7:], "sha256:" + "G" * 12, whole + "0"):
        with pytest.raises(ValueError, match="expected_fingerprint"):
            TokenizerClient(url, expected_fingerprint=malformed)
