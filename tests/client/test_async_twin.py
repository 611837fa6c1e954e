"""The async client runs the sync client's method bodies (``_twin`` in service/client/async_client.py) and awaits what
they return, so each reused body must build its call(s) and end in ``return self._send(...)`` (or ``_send_all``),
whose twins are coroutines: a body that returns early, keeps a ``_send`` result, or calls another twinned method
would hand the async client an unawaited coroutine. The rule is checked here, on the code, for every reused body."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from service.client import AsyncTokenizerClient

SENDS = {"_send", "_send_all"}


def reused_bodies() -> dict[str, Callable[..., Any]]:
    """Each async method that runs a sync body (``functools.wraps`` leaves it as ``__wrapped__``): name -> body."""
    return {
        name: value.__wrapped__
        for name, value in vars(AsyncTokenizerClient).items()
        if inspect.iscoroutinefunction(value) and hasattr(value, "__wrapped__")
    }


def _own_nodes(function: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, not those of functions nested in it."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _self_call(node: ast.AST | None, names: set[str]) -> bool:
    """``node`` is ``self.<one of names>(...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        and node.func.attr in names
    )


def twin_rule_broken(source: str, twinned: set[str], first_line: int = 1) -> list[str]:
    """How the method in ``source`` (from line ``first_line`` of its file) breaks the rule, nothing when it keeps it;
    ``twinned``: the names of the methods the async client reuses, which a body must not call through ``self`` (in
    the twin they are coroutines)."""
    tree = ast.increment_lineno(ast.parse(textwrap.dedent(source)), first_line - 1)
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    broken = []
    if not (isinstance(function.body[-1], ast.Return) and _self_call(function.body[-1].value, SENDS)):
        broken.append("its last statement is not `return self._send(...)` (or `_send_all`)")
    returns = [n for n in _own_nodes(function) if isinstance(n, ast.Return)]
    broken += [f"line {r.lineno} returns something else than a send" for r in returns if not _self_call(r.value, SENDS)]
    returned = {id(r.value.func) for r in returns if isinstance(r.value, ast.Call)}
    for node in ast.walk(function):  # nested functions too: a send there is never awaited
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            if node.attr in SENDS and id(node) not in returned:
                broken.append(f"line {node.lineno} uses self.{node.attr} other than as what it returns")
            elif node.attr in twinned:
                broken.append(f"line {node.lineno} calls self.{node.attr}, a coroutine in the twin")
    return broken


def test_the_async_client_reuses_the_sync_bodies_it_lists():
    bodies = reused_bodies()
    assert {"encode", "__call__", "lengths", "decode", "apply_chat_template", "info"} <= set(bodies)
    assert all(body.__qualname__.startswith("TokenizerClient.") for body in bodies.values())


@pytest.mark.parametrize("name", sorted(reused_bodies()))
def test_each_reused_body_ends_in_its_send(name: str):
    lines, first_line = inspect.getsourcelines(reused_bodies()[name])
    assert twin_rule_broken("".join(lines), set(reused_bodies()), first_line) == []


GOOD = """
def lengths(self, text, batch_size=None):
    calls = lengths_calls(text, batch_size)

    def counts(answers):
        return [n for answer in answers for n in answer]

    return self._send_all(calls, counts)
"""


@pytest.mark.parametrize(
    ("source", "broken"),
    [
        (GOOD, []),
        (
            "def encode(self, text):\n    if not text:\n        return []\n    return self._send(encode_call(text))",
            ["line 3 returns something else than a send"],
        ),
        (
            "def info(self):\n    answer = self._send(info_call())\n    return dict(answer)",
            [
                "its last statement is not `return self._send(...)` (or `_send_all`)",
                "line 3 returns something else than a send",
                "line 2 uses self._send other than as what it returns",
            ],
        ),
        (
            "def decode(self, ids):\n    self._send(decode_call(ids))",
            [
                "its last statement is not `return self._send(...)` (or `_send_all`)",
                "line 2 uses self._send other than as what it returns",
            ],
        ),
        (
            "def batch_decode(self, rows):\n    first = self.decode(rows[0])\n"
            "    return self._send_all(calls(rows), list)",
            ["line 2 calls self.decode, a coroutine in the twin"],
        ),
        (
            "def lengths(self, texts):\n    def each(text):\n        return self._send(call(text))\n\n"
            "    return self._send_all([call(t) for t in texts], each)",
            ["line 3 uses self._send other than as what it returns"],
        ),
    ],
    ids=["kept", "returns early", "keeps the answer", "falls through", "calls a twinned method", "sends in a helper"],
)
def test_the_rule_catches_a_body_that_breaks_it(source: str, broken: list[str]):
    assert sorted(twin_rule_broken(source, {"decode", "encode"})) == sorted(broken)
