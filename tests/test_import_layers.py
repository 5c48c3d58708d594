"""The project's own modules import one another without a cycle.

The import graph is read from the source with `ast` (nothing is imported): every
`import` and `from ... import` in a module, at module level or inside a function,
is an edge to the first-party module it names. `from package import name` is an
edge to `package.name` where that is a module, else to the package itself
(its `__init__.py`); a relative import is resolved against the importing
module's package. Third-party and standard-library imports are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = (
    "exporter",
    "serving",
    "preprocessing",
    "tritonserver_setup",
    "model_catalog",
    "service",
    "tools",
    "benchmarks",
)


def _module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every first-party module (a package by its `__init__.py`)."""
    files: dict[str, Path] = {}
    for top in FIRST_PARTY:
        single = ROOT / f"{top}.py"
        if single.is_file():
            files[top] = single
            continue
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The first-party modules that one import statement of `module` loads by name."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in known:  # `import a.b.c` of a package a.b with no module c
                name = name.rpartition(".")[0]
            if name:
                yield name
        return
    if node.level:
        package = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    if base not in known:
        return
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        yield submodule if submodule in known else base


def import_graph() -> dict[str, set[str]]:
    """Module -> the first-party modules it imports (module level and inside functions alike)."""
    files = _module_files()
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(_imported(node, module, is_package, known))
        edges.discard(module)  # a package naming itself (`from exporter import export_model` in exporter/__init__.py)
        graph[module] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import one another in a circle: each strongly connected component of more than one (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return components


def _cycle_through(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest import path from the component's first module back to itself, for the failure message."""
    members = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module] & members):
                if target == start:
                    return paths[module] + [start]
                if target not in paths:
                    paths[target] = paths[module] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def _describe(components: list[list[str]], graph: dict[str, set[str]]) -> str:
    """One line per cycle: an import path around it, then every module caught in it."""
    return "\n".join(
        f"{' -> '.join(_cycle_through(component, graph))} (in the cycle: {', '.join(component)})"
        for component in components
    )


def test_the_graph_sees_the_exporter_layers() -> None:
    """The graph resolves packages, `from package import module` and function-level imports."""
    graph = import_graph()
    assert {"exporter.exportable", "exporter.nemo"} <= graph["exporter.architectures"]
    assert "exporter.nemo.archive" in graph["exporter.nemo.esm"]
    assert "exporter.pipeline" in graph["exporter"]  # `from exporter import pipeline` inside `__getattr__`


def test_finds_a_cycle() -> None:
    graph = {"a": {"b", "c"}, "b": {"a"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert _describe(import_cycles(graph), graph) == "a -> b -> a (in the cycle: a, b, c)"
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_first_party_modules() -> None:
    graph = import_graph()
    cycles = import_cycles(graph)
    assert not cycles, f"import cycles:\n{_describe(cycles, graph)}"
