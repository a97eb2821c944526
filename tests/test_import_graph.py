"""The import graph of ``attn_envs``, ``attn_policies`` and ``zoo`` has no cycle.

Every ``import`` statement counts, wherever it sits: at module level, inside a function (an
import deferred to dodge a circle is still a circle) and under ``if TYPE_CHECKING:`` (a
type-only circle still ties the two modules together), and so does
``importlib.import_module("a.literal.name")``. A cycle fails the test with its path.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("attn_envs", "attn_policies", "zoo")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """``{dotted module name: file}`` for every module of the three packages."""
    found = {}
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            parts = list(file.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = file
    return found


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names one import statement brings in (modules or ``module.attribute``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: resolve against the importing module's package
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = package[: len(package) - (node.level - 1)]
        stem = ".".join([*base, node.module] if node.module else base)
    else:
        stem = node.module or ""
    return [stem] + [f"{stem}.{alias.name}" for alias in node.names]


def _literal_import_module(node: ast.AST) -> bool:
    """``import_module("name")`` or ``importlib.import_module("name")`` with a literal name."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    return (
        called == "import_module"
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
    )


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: modules of the three packages it imports}``.

    ``from package import name`` points at the submodule when ``name`` is one, else at the
    package; a module's own package ``__init__`` is not counted as an edge of its own.
    """
    files = module_files(root)
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, file in files.items():
        tree = ast.parse(file.read_text(), filename=str(file))
        for node in ast.walk(tree):
            if _literal_import_module(node):
                targets = [node.args[0].value]  # type: ignore[attr-defined]
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            else:
                targets = _imported(node, name, file.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):
                stem, names = targets[0], targets[1:]
                subs = [t for t in names if t in files]
                # `from pkg import submodule` imports the submodule; `from m import f` imports m
                targets = subs if len(subs) == len(names) else [stem, *subs]
            for target in targets:
                while target and target not in files:  # `import a.b.c` of an attribute path
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected component of more than one
    module, found with Tarjan's algorithm and a breadth-first walk back to the start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the number of modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for component in components:
        members, start = set(component), component[0]
        parent: dict[str, str] = {}
        frontier, seen = [start], {start}
        while frontier and start not in parent:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & members):
                    if w == start and start not in parent:
                        parent[start] = v
                    if w not in seen:
                        seen.add(w)
                        parent[w] = v
                        nxt.append(w)
            frontier = nxt
        path, v = [start], parent[start]
        while v != start:
            path.append(v)
            v = parent[v]
        found.append([start, *reversed(path[1:]), start])
    return found


def test_cycles_finds_a_function_level_and_a_type_only_circle(tmp_path: Path) -> None:
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "__init__.py").write_text("")
    (tmp_path / "zoo" / "a.py").write_text("def f():\n    from zoo.b import g\n")
    (tmp_path / "zoo" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n"
    )
    (tmp_path / "zoo" / "c.py").write_text("import zoo.a\n")
    (tmp_path / "zoo" / "d.py").write_text("import importlib\nimportlib.import_module('zoo.c')\n")
    graph = import_graph(tmp_path)
    assert graph["zoo.a"] == {"zoo.b"} and graph["zoo.b"] == {"zoo.a"}
    assert graph["zoo.c"] == {"zoo.a"} and graph["zoo.d"] == {"zoo.c"}
    assert cycles(graph) == [["zoo.a", "zoo.b", "zoo.a"]]


def test_the_packages_have_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


# The one module that gathers others on purpose: zoo.config is the documented import path of
# config_checks and config_merge (its docstring says so), not an old path kept alive.
FACADES = {"zoo.config"}


def reexports(root: Path = ROOT) -> list[str]:
    """Old-path shims: a module (not a package ``__init__``) whose ``__all__`` lists a name it
    imports from elsewhere, or that resolves names lazily with a module ``__getattr__``."""
    found = []
    for name, file in module_files(root).items():
        if file.name == "__init__.py" or name in FACADES:
            continue
        tree = ast.parse(file.read_text(), filename=str(file))
        imported, public = set(), []
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                found.append(f"{name}: module __getattr__")
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                public = [e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)]
        found += [f"{name}: re-exports {n}" for n in public if n in imported]
    return found


def test_no_module_re_exports_another_modules_names() -> None:
    found = reexports()
    assert not found, "\n".join(found)
