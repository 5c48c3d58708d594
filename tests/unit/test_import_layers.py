"""The project's own modules import one another only downwards, through the layers below, and never in a cycle.

The import graph is read from the source with `ast` (nothing is imported): every
`import` and `from ... import` in a module, at module level or inside a function,
is an edge to the first-party module it names. `from package import name` is an
edge to `package.name` where that is a module, else to the package itself
(its `__init__.py`); a relative import is resolved against the importing
module's package. Third-party and standard-library imports are left out.

The layers (LAYERS, bottom first) are docs/architecture.md's "Which package may import which": a module belongs to the
layer of its longest matching prefix and may import modules of its own layer or a lower one, except those a layer
stays apart from (serving never imports the exporter: the image has neither torch nor transformers). The engines and
the python backends import nothing of the project at all: they run in Triton's python-backend stub, where nothing of it
is installed but the `engines.py` the exporter copies beside each backend, which the backends import flat
(`from engines import ...`), an import the graph does not see as first-party. The step caches, numpy only, neither.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("bionemo_serving", "operations", "service", "build_bento", "locustfile", "benchmarks")


@dataclass(frozen=True)
class Layer:
    name: str
    prefixes: tuple[str, ...]
    """The modules it holds: these and the modules under them (`bionemo_serving.runtimes` holds its backends)."""
    apart_from: tuple[str, ...] = ()
    """Lower layers it may not import all the same."""


LAYERS = (
    Layer("ground", ("bionemo_serving.runtimes", "bionemo_serving.startup.readiness")),
    Layer("catalog", ("bionemo_serving.model_catalog",)),
    Layer("preprocessing", ("bionemo_serving.preprocessing",)),
    Layer("exporter", ("bionemo_serving.exporter",)),
    Layer("training", ("bionemo_serving.training",)),
    Layer("serving", ("bionemo_serving",), apart_from=("exporter", "training")),
    Layer("entry points", ("service", "build_bento", "locustfile", "operations", "benchmarks")),
)
"""Bottom first."""
SELF_CONTAINED = ("bionemo_serving.runtimes.engines", "bionemo_serving.runtimes.backends")
"""Modules that import no first-party module: the engines and the backends run in Triton's python-backend stub, where
nothing of the project is installed; """
FLAT_IMPORTS = {"bionemo_serving.runtimes.backends": {"engines"}}
"""What modules under a prefix may import flat, by file name: only the files the exporter copies beside them."""


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
        edges.discard(
            module
        )  # a package naming itself (`from bionemo_serving.exporter import export_model` in bionemo_serving/exporter/__init__.py)
        graph[module] = edges
    return graph


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(f"{prefix}.")


def layer_of(module: str, layers: tuple[Layer, ...] = LAYERS) -> int | None:
    """The index of the layer with the longest prefix that holds `module`; None where none does."""
    matches = [
        (len(prefix), index)
        for index, layer in enumerate(layers)
        for prefix in layer.prefixes
        if _within(module, prefix)
    ]
    return max(matches)[1] if matches else None


def layer_violations(
    graph: Mapping[str, set[str]], layers: tuple[Layer, ...] = LAYERS, self_contained: tuple[str, ...] = SELF_CONTAINED
) -> list[str]:
    """One line per import against the layers, `module (its layer) -> imported module (its layer): why`, and one per
    module on no layer."""
    lines = []
    for module in sorted(graph):
        own = layer_of(module, layers)
        if own is None:
            lines.append(f"{module}: on no layer")
            continue
        for target in sorted(graph[module]):
            theirs = layer_of(target, layers)
            if theirs is None:
                continue  # reported as a module of its own
            if any(_within(module, prefix) for prefix in self_contained):
                why = "imports nothing of the project (SELF_CONTAINED)"
            elif theirs > own:
                why = "a higher layer"
            elif layers[theirs].name in layers[own].apart_from:
                why = f"{layers[own].name} stays apart from {layers[theirs].name}"
            else:
                continue
            lines.append(f"{module} ({layers[own].name}) -> {target} ({layers[theirs].name}): {why}")
    return lines


def flat_imports(path: Path) -> set[str]:
    """The top-level names of `path`'s absolute imports (`from engines import x`: engines)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.partition(".")[0])
    return names


def flat_import_violations(
    files: Mapping[str, Path],
    allowed: Mapping[str, set[str]] = FLAT_IMPORTS,
    self_contained: tuple[str, ...] = SELF_CONTAINED,
) -> list[str]:
    """One line per import, by its bare file name, of a runtimes module that is not copied beside the importer: the
    self-contained modules may import flat only what `allowed` names for them."""
    runtimes_files = {module.rpartition(".")[2] for module in files if module.startswith("bionemo_serving.runtimes.")}
    lines = []
    for module, path in sorted(files.items()):
        if any(_within(module, prefix) for prefix in self_contained):
            permitted = set().union(*(names for prefix, names in allowed.items() if _within(module, prefix)))
            for name in sorted(flat_imports(path) & runtimes_files - permitted):
                lines.append(f"{module} -> {name} (flat): only {sorted(permitted)} is copied beside it")
    return lines


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
    assert {"bionemo_serving.exporter.exportable", "bionemo_serving.exporter.nemo"} <= graph[
        "bionemo_serving.exporter.architectures"
    ]
    assert "bionemo_serving.exporter.nemo.archive" in graph["bionemo_serving.exporter.nemo.esm"]
    assert (
        "bionemo_serving.exporter.pipeline" in graph["bionemo_serving.exporter"]
    )  # `from bionemo_serving.exporter import pipeline` inside `__getattr__`


def test_finds_a_cycle() -> None:
    graph = {"a": {"b", "c"}, "b": {"a"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert _describe(import_cycles(graph), graph) == "a -> b -> a (in the cycle: a, b, c)"
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_first_party_modules() -> None:
    graph = import_graph()
    cycles = import_cycles(graph)
    assert not cycles, f"import cycles:\n{_describe(cycles, graph)}"


def test_finds_imports_against_the_layers() -> None:
    layers = (
        Layer("low", ("a", "b.low")),
        Layer("middle", ("b",)),
        Layer("high", ("c",), apart_from=("low",)),
    )
    graph = {
        "a": set(),
        "a.pure": {"a"},
        "b": {"a", "c"},
        "b.low.x": {"b"},
        "c": {"b", "a.pure"},
        "d": set(),
    }
    assert layer_of("b.low.x", layers) == 0 and layer_of("b.lower", layers) == 1
    assert layer_violations(graph, layers, self_contained=("a.pure",)) == [
        "a.pure (low) -> a (low): imports nothing of the project (SELF_CONTAINED)",
        "b (middle) -> c (high): a higher layer",
        "b.low.x (low) -> b (middle): a higher layer",
        "c (high) -> a.pure (low): high stays apart from low",
        "d: on no layer",
    ]
    assert layer_violations({"a": set(), "b": {"a"}, "c": {"b"}}, layers) == []


def test_finds_a_flat_import_of_a_file_not_copied_beside(tmp_path: Path) -> None:
    sources = {"bionemo_serving.runtimes.engines": "import numpy\n", "bionemo_serving.runtimes.choice": "import engines\n",
               "bionemo_serving.runtimes.backends.model": "import sys\nfrom engines import x\nfrom choice import y\n"}  # fmt: skip
    files = {}
    for module, source in sources.items():
        files[module] = tmp_path / f"{module}.py"
        files[module].write_text(source)
    assert flat_import_violations(
        files, self_contained=("bionemo_serving.runtimes.engines", "bionemo_serving.runtimes.backends")
    ) == [
        "bionemo_serving.runtimes.backends.model -> choice (flat): only ['engines'] is copied beside it",
    ]


def test_every_module_imports_only_its_layer_or_lower_ones() -> None:
    violations = layer_violations(import_graph())
    assert not violations, "imports against the layers (tests/unit/test_import_layers.py LAYERS):\n" + "\n".join(
        violations
    )


def test_the_python_backends_import_only_the_engines_copied_beside_them() -> None:
    files = _module_files()
    backends = [path for module, path in files.items() if _within(module, "bionemo_serving.runtimes.backends")]
    assert backends and all("engines" in flat_imports(path) for path in backends)
    violations = flat_import_violations(files)
    assert not violations, "flat imports of files not copied beside the importer:\n" + "\n".join(violations)
