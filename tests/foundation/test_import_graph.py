"""No import cycles inside embedforge: a module never imports, at any depth, something that builds on it (the
embedder does not import export, persistence or quantize; paths does not import the model registry)."""

from __future__ import annotations

import ast
from pathlib import Path

PLATFORM = Path(__file__).resolve().parents[2] / "platform"


def import_graph() -> dict[str, set[str]]:
    """Module -> the embedforge modules it imports anywhere in its file (top level or inside functions)."""
    graph = {}
    for path in PLATFORM.rglob("*.py"):
        name = ".".join(path.relative_to(PLATFORM).with_suffix("").parts).removesuffix(".__init__")
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embedforge"):
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps |= {alias.name for alias in node.names if alias.name.startswith("embedforge")}
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for dep in graph[node]:
            if dep not in graph:
                continue
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_embedforge_has_no_import_cycles() -> None:
    graph = import_graph()
    assert "embedforge.model.embedder" in graph and "embedforge.paths" in graph
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
