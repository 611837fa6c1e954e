"""Where a curated mutation applies: one node inside a named function, found with ``ast`` whatever the layout.

A mutation names its place as ``"service.engine.encoding:plan_encode"`` (the module, then the qualified name of the
function or class, the module alone for its top level) and the node by its source, as ``ast.unparse`` reads it, so
line breaks, quotes, comments, line numbers and the function's place in its module do not matter. A compound
statement (``if``, ``while``, ``for``, ``with``) is named by its header (``"if pad_left:"``, ``elif`` as ``if``), a
keyword argument as ``"name=value"``, a dict entry as ``"key: value"``; where the node's source is not unique in its
function, ``within`` names an enclosing node that makes it so. The mutation replaces that node's source span in the
file (for a compound statement, the header's expressions), nothing else: as mutmut and cosmic-ray do, by node, not by
line, but for a curated list of one-off bugs rather than a catalogue of operators.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
HEADERS = {ast.If: "if", ast.While: "while", ast.For: "for", ast.AsyncFor: "async for"}
HEADERS |= {ast.With: "with", ast.AsyncWith: "async with"}
# named by their parts (a header, a handler's body) rather than whole
NOT_SITES: tuple[type[ast.AST], ...] = (ast.Try, ast.ExceptHandler, ast.Match, ast.match_case, *SCOPES)
if hasattr(ast, "TryStar"):  # Python 3.11
    NOT_SITES += (ast.TryStar,)


class AnchorError(ValueError):
    """A mutation no longer finds its function, or finds its node other than exactly once."""


@dataclass(frozen=True)
class Site:
    """A node of a function as a mutation names it: its normalised source and the span of the file it replaces."""

    text: str
    start: tuple[int, int]  # (line from 1, UTF-8 byte column), as ast gives them: what the mutation replaces
    end: tuple[int, int]
    first: tuple[int, int]  # the whole node's span, for a compound statement its body too: what ``within`` holds
    last: tuple[int, int]
    header: str = ""  # a compound statement's keyword (``if``, ``async for``...); its span is the header's part


def module_path(module: str) -> str:
    """``service.engine.encoding`` -> ``service/engine/encoding.py`` (relative to the repository root)."""
    return module.replace(".", "/") + ".py"


def find_scope(tree: ast.Module, qualname: str) -> ast.AST | None:
    """The function or class ``qualname`` names (``Outer.method``, ``outer.<locals>.inner``); the module for ``""``."""
    scope: ast.AST = tree
    for part in qualname.split(".") if qualname else ():
        if part == "<locals>":
            continue
        found = [n for n in _children(scope) if isinstance(n, SCOPES) and n.name == part]
        if len(found) != 1:
            return None
        scope = found[0]
    return scope


def _children(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope``'s body, not entering nested functions and classes (they are scopes of their own)."""
    stack = list(reversed(getattr(scope, "body", [])))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, SCOPES):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


Span = tuple[tuple[int, int], tuple[int, int]]  # ((line from 1, UTF-8 byte column), (end line, end column))


def _span(first: ast.AST, last: ast.AST) -> Span:
    return (first.lineno, first.col_offset), (last.end_lineno or 0, last.end_col_offset or 0)  # type: ignore[attr-defined]


def sites(scope: ast.AST) -> Iterator[Site]:
    """Every node of ``scope`` a mutation can name."""
    for node in _children(scope):
        if not hasattr(node, "end_col_offset"):
            continue  # (arguments, comprehension, withitem: named by their parts)
        whole = _span(node, node)
        keyword = HEADERS.get(type(node), "")
        if isinstance(node, (ast.If, ast.While)):
            yield Site(f"{keyword} {ast.unparse(node.test)}:", *_span(node.test, node.test), *whole, keyword)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            text = f"{keyword} {ast.unparse(node.target)} in {ast.unparse(node.iter)}:"
            yield Site(text, *_span(node.target, node.iter), *whole, keyword)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            text = f"{keyword} {', '.join(ast.unparse(item) for item in node.items)}:"
            last = node.items[-1].optional_vars or node.items[-1].context_expr
            yield Site(text, *_span(node.items[0].context_expr, last), *whole, keyword)
        elif not isinstance(node, (*NOT_SITES, ast.Expr)):  # (an Expr statement is named by its value)
            yield Site(ast.unparse(node), *whole, *whole)
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is not None:
                    entry = _span(key, value)
                    yield Site(f"{ast.unparse(key)}: {ast.unparse(value)}", *entry, *entry)


def _header(text: str) -> str:
    """``text`` with ``elif`` read as ``if``, where it is a compound statement's header."""
    return text[2:] if text.startswith("elif ") else text


def normal_forms(text: str) -> set[str]:
    """How :func:`sites` would write ``text``, for each kind of node it parses as alone."""
    text = text.strip()
    forms = {text}
    for read in (_as_expression, _as_statement, _as_header, _as_argument, _as_dict_entry):
        try:
            forms.add(read(text))
        except (SyntaxError, ValueError):
            pass
    return forms


def _as_expression(text: str) -> str:
    return ast.unparse(ast.parse(text, mode="eval").body)


def _as_statement(text: str) -> str:
    return ast.unparse(_single(ast.parse(text).body))


def _as_header(text: str) -> str:
    found = [s for s in sites(ast.parse(_header(text) + "\n    pass")) if s.header]
    return _single(found).text


def _as_argument(text: str) -> str:
    call = ast.parse(f"_({text.rstrip(',')})", mode="eval").body
    if not isinstance(call, ast.Call):
        raise ValueError("not an argument")
    return ast.unparse(_single([*call.args, *call.keywords]))


def _as_dict_entry(text: str) -> str:
    found = ast.parse("{" + text.rstrip(",") + "}", mode="eval").body
    if not (isinstance(found, ast.Dict) and len(found.keys) == 1 and found.keys[0] is not None):
        raise ValueError("not one dict entry")
    return f"{ast.unparse(found.keys[0])}: {ast.unparse(found.values[0])}"


def _single(nodes: list[T]) -> T:
    if len(nodes) != 1:
        raise ValueError("not one node")
    return nodes[0]


def locate(source: str, at: str, node: str, within: str = "", *, search: Path | None = None) -> Site:
    """The one site of ``source`` (the module ``at`` names) that reads as ``node``, inside the one that reads as
    ``within`` if given; :class:`AnchorError` otherwise, saying where the function went if ``search`` (a folder of
    modules) holds it elsewhere."""
    module, _, qualname = at.partition(":")
    scope = find_scope(ast.parse(source), qualname)
    if scope is None:
        elsewhere = [m for m in _modules_with(qualname, search) if m != module] if search and qualname else []
        hint = f"; {qualname} is in {', '.join(elsewhere)} now: point the mutation there" if elsewhere else ""
        raise AnchorError(f"{module} has no {qualname or 'top level'}: the mutation lost its anchor{hint}")
    every = list(sites(scope))
    inside = every
    if within:
        wanted = normal_forms(within)
        outer = [s for s in every if s.text in wanted]
        if len(outer) != 1:
            raise AnchorError(f"{len(outer)} nodes of {at} read {within!r} (within), not one")
        inside = [s for s in every if outer[0].first <= s.start and s.end <= outer[0].last]
    wanted = normal_forms(node)
    hits = [s for s in inside if s.text in wanted]
    if len(hits) != 1:
        closest = difflib.get_close_matches(node, [s.text for s in inside], n=1, cutoff=0.6)
        hint = f" (closest: {closest[0]!r})" if closest and not hits else ""
        raise AnchorError(
            f"{len(hits)} nodes of {at}{' within ' + repr(within) if within else ''} read {node!r}, not one{hint}"
        )
    return hits[0]


def _modules_with(qualname: str, folder: Path) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        if find_scope(tree, qualname) is not None:
            found.append(".".join(path.relative_to(folder.parent).with_suffix("").parts))
    return found


def replacement(site: Site, mutated: str) -> str:
    """What replaces ``site``'s span: ``mutated`` itself, or for a header the part between keyword and colon."""
    mutated = mutated.strip()
    if not site.header:
        return mutated
    head = _header(mutated)
    if not (head.startswith(site.header + " ") and head.endswith(":")):
        raise AnchorError(f"{mutated!r} does not replace the header {site.text!r}: write it as {site.header} ...:")
    return head[len(site.header) + 1 : -1].strip()


def splice(source: str, site: Site, text: str) -> str:
    """``source`` with ``site``'s span replaced by ``text``: the rest of the file byte for byte as it was."""
    data = source.encode()
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    begin = starts[site.start[0] - 1] + site.start[1]
    end = starts[site.end[0] - 1] + site.end[1]
    return (data[:begin] + text.encode() + data[end:]).decode()
