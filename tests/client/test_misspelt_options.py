"""A misspelt keyword in Python names the option meant, as the HTTP API names a misspelt field: every public entry
point of both clients that takes keyword options (found by inspect, not listed here), the data tools their
conveniences make, and ``launch``'s settings. The error stays a TypeError, what Python raises for a bad keyword."""

from __future__ import annotations

import asyncio
import inspect
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service import wire
from service.client import AsyncTokenizerClient, TokenizerClient
from service.data.protocol import SFT_CHAT_OPTIONS
from service.launch.rendezvous import LAUNCH_DIR_ENV
from service.suggestions import UnknownOptionError
from testkit.launching import private_launch_directory

CLIENTS = [TokenizerClient, AsyncTokenizerClient]
KEYWORDS = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD)


def entry_points(client_class: type) -> list[str]:
    """The client's public methods that take keyword options (named, or ``**options``)."""
    names = []
    for name, member in inspect.getmembers(client_class):
        if name.startswith("_") or not callable(member):
            continue
        if any(p.kind in KEYWORDS for p in inspect.signature(member).parameters.values()):
            names.append(name)
    return names


def misspelt(name: str) -> str:
    """``name`` with two neighbouring letters swapped, as fingers do (``max_length`` -> ``max_lenght``)."""
    for i in range(len(name) - 2, 0, -1):
        if name[i] != name[i + 1] and "_" not in name[i : i + 2]:
            return name[:i] + name[i + 1] + name[i] + name[i + 2 :]
    raise AssertionError(f"no letters to swap in {name!r}")


def keyword_options(function: Any) -> list[str]:
    return [p.name for p in inspect.signature(function).parameters.values() if p.kind in KEYWORDS[:1]]


def options_of(client: Any, name: str) -> list[str]:
    """The options entry point ``name`` takes: its keyword parameters, or for one taking ``**options`` those of
    what it makes (a classmethod makes the client itself)."""
    method = getattr(client, name)
    parameters = inspect.signature(method).parameters.values()
    named = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters) or named:
        return named
    if isinstance(inspect.getattr_static(type(client), name), classmethod):
        return keyword_options(type(client))
    return keyword_options(type(method()))


def call(method: Any, **options: Any) -> Any:
    """``method`` with placeholders for its required arguments (the check comes first), awaited if a coroutine."""
    required = [
        p
        for p in inspect.signature(method).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]
    result = method(*[["a"]] * len(required), **options)
    if inspect.isawaitable(result):
        return asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


@pytest.fixture
def launch_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with private_launch_directory() as folder:
        monkeypatch.setenv(LAUNCH_DIR_ENV, str(folder))
        yield folder


def test_the_entry_points_are_found():
    """The enumeration finds what the issue names: encode, the collators, the tokenize functions,
    apply_chat_template, launch (a method renamed or added is found the same way)."""
    for client_class in CLIENTS:
        found = entry_points(client_class)
        assert len(found) >= 12, found
        assert "launch" in found and "apply_chat_template" in found and "collator" in found


@pytest.mark.parametrize("client_class", CLIENTS)
def test_every_entry_point_names_the_option_a_misspelt_keyword_meant(client_class, servers, launch_dir):
    client = client_class(servers["wordpiece_default"].url)
    for name in entry_points(client_class):
        options = options_of(client, name)
        meant = max(options, key=len)  # the longest: a swap in it is unmistakable, template variables included
        given = misspelt(meant)
        with pytest.raises(TypeError) as raised:
            call(getattr(client, name), **{given: True})
        error = raised.value
        assert isinstance(error, UnknownOptionError), f"{name}: {type(error).__name__}: {error}"
        assert (error.name, error.meant) == (given, meant), f"{name}: {error}"
        assert f"did you mean {meant!r}?" in str(error) and repr(given) in str(error), str(error)
    assert call(client.info)["fingerprint"]  # the client is a working one: only the misspellings were refused


def test_a_keyword_nothing_is_close_to_lists_the_options(servers):
    client = TokenizerClient(servers["wordpiece_default"].url)
    with pytest.raises(UnknownOptionError) as raised:
        client.decode([1], zzzz=1)
    assert raised.value.meant is None
    assert "the options are ids, skip_special_tokens, clean_up_tokenization_spaces" in str(raised.value)
    assert client.decode([101]) == client.decode([101], skip_special_tokens=False)


def test_a_template_variable_that_only_shares_a_word_with_an_option_is_not_refused(servers):
    """apply_chat_template's **kwargs are template variables: ``xml_tools`` (SmolLM3's) is not ``tools`` misspelt."""
    client = TokenizerClient(servers["wordpiece_default"].url)
    with pytest.raises(Exception) as raised:  # the embedded default has no chat template: the server says so
        client.apply_chat_template([{"role": "user", "content": "hi"}], xml_tools=[])
    assert not isinstance(raised.value, TypeError), raised.value
    assert "no chat template" in str(raised.value)


def test_the_error_survives_a_dataloader_worker():
    """A worker's error is re-raised in the training process from its message (and pickles whole)."""
    error = UnknownOptionError("X() got an unexpected keyword argument 'a'; did you mean 'b'?", "a", "b")
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), str(again), again.name, again.meant) == (UnknownOptionError, str(error), "a", "b")
    assert str(UnknownOptionError(str(error))) == str(error)


@pytest.mark.parametrize(
    ("maker", "option_set"),
    [
        ("collator", wire.ENCODE_OPTIONS),
        ("tokenize_function", wire.ENCODE_OPTIONS),
        ("chat_collator", SFT_CHAT_OPTIONS),
        ("chat_tokenize_function", SFT_CHAT_OPTIONS),
    ],
)
def test_the_data_tools_name_each_option_they_pass_on(servers, maker, option_set):
    """The options a data tool passes on to the client (``collator(paddding=True)`` in the issue), each misspelt."""
    make = getattr(TokenizerClient(servers["wordpiece_default"].url), maker)
    for meant in option_set:
        given = misspelt(meant)
        with pytest.raises(UnknownOptionError) as raised:
            make(**{given: True})
        assert raised.value.meant == meant, str(raised.value)
