"""The curated mutation list (scripts/mutations.py) stays in step with the code: each mutation still finds its one
node in its function, and the mutated module still compiles; a mutation follows its function through a reformat
and a move (scripts/anchors.py). Running the mutants themselves is `make mutants`."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from scripts.anchors import AnchorError, find_scope, locate, module_path
from scripts.mutations import MUTATIONS, Mutation
from testkit.servers import REPO


def test_the_list_is_curated_and_covers_the_parity_table():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names)) >= 12
    assert sum(m.parity for m in MUTATIONS) == 10  # the parity table of issue 14, row for row
    assert all(m.caught_by and all((REPO / f).is_file() for f in m.caught_by) for m in MUTATIONS)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_finds_exactly_one_node_and_compiles(mutation: Mutation):
    source = (REPO / mutation.path).read_text()
    mutated = mutation.apply(source)  # AnchorError unless its function holds the node exactly once
    assert mutated != source
    compile(mutated, mutation.path, "exec")


def _moved_and_relaid(source: str, qualname: str) -> str:
    """``source`` with the function ``qualname`` moved to the end of its class or module, every line laid out again
    (``ast.unparse``: other line breaks, quotes and parentheses, no comments)."""
    tree = ast.parse(source)
    parent = find_scope(tree, qualname.rpartition(".")[0]) if qualname else None
    function = find_scope(tree, qualname) if qualname else None
    body = getattr(parent, "body", [])
    if function in body and isinstance(parent, (ast.Module, ast.ClassDef)):
        body.remove(function)
        body.append(function)
    return ast.unparse(tree)


class _Flattened(ast.NodeTransformer):
    """``a and (b and c)`` as ``a and b and c``: the same evaluation. (A replacement holding ``and`` spliced where
    the layout parenthesised the node nests where the file's own layout flattened.)"""

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.BoolOp:
        self.generic_visit(node)
        flat = [v.values if isinstance(v, ast.BoolOp) and type(v.op) is type(node.op) else [v] for v in node.values]
        node.values = [value for values in flat for value in values]
        return node


def _meaning(source: str) -> str:
    return ast.dump(_Flattened().visit(ast.parse(source)))


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_follows_its_function_moved_and_reformatted(mutation: Mutation):
    source = (REPO / mutation.path).read_text()
    qualname = mutation.at.partition(":")[2]
    moved = _moved_and_relaid(source, qualname)
    node = (mutation.at, mutation.node, mutation.within)
    assert locate(moved, *node).start[0] != locate(source, *node).start[0]  # on another line now
    expected = _moved_and_relaid(mutation.apply(source), qualname)  # the same bug, in the moved function
    assert _meaning(mutation.apply(moved)) == _meaning(expected) != _meaning(moved)


BEFORE = """\
def pad(rows, side):
    if side == "left":  # the one a mutation flips
        return [0] + rows
    return rows + [0]


def first(rows):
    return rows[0]
"""

# pad reformatted by hand (other quotes, line breaks, comments) and moved below another function
AFTER = """\
def first(rows):
    return rows[0]


def pad(rows, side):
    # left or right
    if (
        side
        == 'left'
    ):
        return [0] + rows
    return rows + [0]
"""


def test_a_reformatted_and_moved_function_keeps_its_mutation():
    flip = Mutation("pad on the wrong side", "demo:pad", 'if side == "left":', "if side != 'left':", ("-",))
    assert flip.apply(BEFORE) == BEFORE.replace('side == "left"', "side != 'left'")
    # only the node's span changes: the layout around it is the file's own
    assert flip.apply(AFTER) == AFTER.replace("side\n        == 'left'", "side != 'left'")


def test_a_function_moved_to_another_module_says_where_it_went(tmp_path: Path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "b.py").write_text(AFTER)
    flip = Mutation("pad on the wrong side", "pkg.a:pad", 'if side == "left":', "if False:", ("-",))
    assert module_path("pkg.a") == "pkg/a.py"
    with pytest.raises(AnchorError, match=r"^pad on the wrong side: pkg\.a has no pad: .*pad is in pkg\.b now"):
        flip.apply("", search=tmp_path / "pkg")


@pytest.mark.parametrize(
    ("node", "mutated", "within", "expected"),
    [
        ("n=len(rows)", "n=0", "", '    out = f(rows, n=0, fill={"pad": 0})'),  # a keyword argument
        ('"pad": 0', '"pad": 1', "", '    out = f(rows, n=len(rows), fill={"pad": 1})'),  # a dict entry
        ("elif rows:", "elif not rows:", "", "    elif not rows:"),  # elif reads as if
        ("for row in rows:", "for row in rows[1:]:", "", "        for row in rows[1:]:"),
        ("return out", "return None", "if not out:", "        return None"),  # one of two, by what holds it
    ],
)
def test_a_node_is_named_by_its_source(node: str, mutated: str, within: str, expected: str):
    source = textwrap.dedent("""\
        def shape(rows):
            out = f(rows, n=len(rows), fill={"pad": 0})
            if not out:
                return out
            elif rows:
                for row in rows:
                    out.append(row)
            return out
        """)
    result = Mutation("demo", "demo:shape", node, mutated, ("-",), within=within).apply(source)
    assert expected in result.splitlines()
    assert len(result.splitlines()) == len(source.splitlines())


@pytest.mark.parametrize(
    ("at", "node", "error"),
    [
        ("demo:shape", "return out", "2 nodes of demo:shape read 'return out', not one"),
        ("demo:shape", "return rows", "0 nodes of demo:shape read 'return rows', not one (closest: 'return out')"),
        ("demo:reshape", "return out", "demo has no reshape: the mutation lost its anchor"),
    ],
)
def test_a_node_found_other_than_once_is_refused_by_name(at: str, node: str, error: str):
    source = "def shape(rows):\n    if rows:\n        return out\n    return out\n"
    with pytest.raises(AnchorError) as refused:
        Mutation("demo", at, node, "pass", ("-",)).apply(source, search=None)
    assert str(refused.value) == f"demo: {error}"
