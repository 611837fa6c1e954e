"""Every import in ``service/`` counted, and the circles they make: ``python -m scripts.import_cycles``.

import-linter reads the import statements a module runs when it is imported. This check counts every way one
module can load another: imports at the top, inside functions (a door that closes a circle when it is called),
under ``TYPE_CHECKING`` (they type what the module hands out), and module names written as strings (what
``importlib.import_module`` loads, e.g. a package's lazy exports). A package's ``__init__`` counts as the package:
importing ``service.client.x`` runs ``service/client/__init__.py`` first, so an edge into ``x`` is an edge into the
package too. It prints each circle (the modules and, for each step, the line that makes it) and exits 1 when there
is one; ``make lint`` runs it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: str  # the source's file, relative to the checkout
    line: int
    how: str  # "import", "in a function", "TYPE_CHECKING", "string"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _inside(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """How an import is reached: at import time, in a function body, or under ``if TYPE_CHECKING``."""
    how = "import"
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return "TYPE_CHECKING"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            how = "in a function"
    return how


def edges_of(path: Path, root: Path, modules: set[str]) -> Iterator[Edge]:
    module = module_name(path, root)
    where = path.relative_to(root).as_posix()
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
            yield Edge(module, node.value, where, node.lineno, "string")
            continue
        for target in targets:
            if target in modules and target != module:
                yield Edge(module, target, where, node.lineno, _inside(node, parents))


def graph(root: Path) -> dict[str, list[Edge]]:
    """module -> its edges, every module of the ``service`` package under ``root``; an edge into a module of a
    package is also an edge into each package above it (their ``__init__`` runs first)."""
    paths = sorted((root / "service").rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    out: dict[str, list[Edge]] = {module: [] for module in modules}
    for path in paths:
        for edge in edges_of(path, root, modules):
            out[edge.source].append(edge)
            parts = edge.target.split(".")
            for i in range(2, len(parts)):  # service.client.x -> service.client (service itself: no code)
                package = ".".join(parts[:i])
                if package != edge.source and not edge.source.startswith(package + "."):
                    out[edge.source].append(
                        Edge(edge.source, package, edge.path, edge.line, edge.how + ", its package")
                    )
    return out


def circles(edges: dict[str, list[Edge]]) -> list[tuple[set[str], list[Edge]]]:
    """Each strongly connected group of modules (Tarjan), with the edges of a shortest cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for edge in edges[node]:
            if edge.target not in index:
                visit(edge.target)
                low[node] = min(low[node], low[edge.target])
            elif edge.target in on_stack:
                low[node] = min(low[node], index[edge.target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [(group, _shortest_cycle(group, edges)) for group in groups]


def _shortest_cycle(group: set[str], edges: dict[str, list[Edge]]) -> list[Edge]:
    start = min(group)
    paths: dict[str, list[Edge]] = {start: []}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in edges[node]:
                if edge.target == start:
                    return [*paths[node], edge]
                if edge.target in group and edge.target not in paths:
                    paths[edge.target] = [*paths[node], edge]
                    following.append(edge.target)
        frontier = following
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.import_cycles", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    found = circles(graph(args.root))
    for number, (group, circle) in enumerate(found, 1):
        print(f"circle {number}, through {len(group)} modules ({', '.join(sorted(group))}); the shortest:")
        for edge in circle:
            print(f"  {edge.source} -> {edge.target}  ({edge.path} line {edge.line}: {edge.how})")
    if found:
        print(f"{len(found)} import circle(s) in service/: make the dependencies point one way")
        return 1
    print("no import circle in service/ (every import counted: in functions, under TYPE_CHECKING, as strings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
