"""The shape of the code: no import cycle among the modules of ``harness`` and ``attentions`` (a function-level import
counts too, so none can hide one), modules of a readable size, and every public harness module documented.

Imports are read from the source with ``ast`` (nothing is executed), resolved to modules of the two packages; an
import of a package counts as an import of its ``__init__``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGES = ("harness", "attentions")
MAX_MODULE_LINES = 450  # the bound: a module a reader can hold in mind


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO_ROOT / pkg).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports anywhere in its body (functions included)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import mod` imports the submodule pkg.mod when there is one, else a name of pkg
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a name: the deepest module it names
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_import_reader_sees_imports_inside_functions(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("def f():\n    from .other import thing\n    import harness.kinds\n")
    assert _imports("harness.mod", source, {"harness.mod", "harness.other", "harness.kinds"}) == {
        "harness.other", "harness.kinds"}


def test_no_import_cycles() -> None:
    graph = _graph()
    assert {"harness.kinds", "harness.run.runner", "harness.kinds.speed.cells", "attentions.registry"} <= set(graph)
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


@pytest.mark.parametrize("name", sorted(_modules()))
def test_modules_are_of_a_readable_size(name: str) -> None:
    lines = len(_modules()[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{name} has {lines} lines; split it by concern"


@pytest.mark.parametrize("name", sorted(_modules()))
def test_every_module_says_what_it_is_for(name: str) -> None:
    tree = ast.parse(_modules()[name].read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{name} has no docstring"


MAX_FUNCTION_LINES = 60  # body lines, docstring excluded


def _long_functions(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0]
            has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            start = (node.body[1] if has_doc and len(node.body) > 1 else first).lineno
            if node.end_lineno - start + 1 > MAX_FUNCTION_LINES:
                out.append(f"{node.name} ({node.end_lineno - start + 1} lines)")
    return out


@pytest.mark.parametrize("name", sorted(_modules()))
def test_functions_are_short(name: str) -> None:
    assert not _long_functions(_modules()[name]), f"{name}: split {', '.join(_long_functions(_modules()[name]))}"


def test_nothing_outside_the_kinds_branches_on_the_suite_kind() -> None:
    """Each kind is declared once (harness.kinds): code that compares a kind to a name is a second declaration."""
    pattern = re.compile(r"""(?<![.\w])kind(\.name)?\s*[!=]=|(suite|cell)\.kind(\.name)?\s*[!=]="""
                         r"""|[!=]=\s*["'](speed|accuracy)["']""")
    offenders = [f"{name}:{i}" for name, path in _modules().items() if name.startswith("harness")
                 for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not offenders, f"branches on the suite kind at {', '.join(offenders)}"


# ---------------------------------------------------------------------------------------------------------------------
# The house: a kind-free core, kind-free report primitives and measuring library, kinds that import no other kind.

#: Layers that must not import a suite kind (nor the orchestration above them): what every kind builds on.
KIND_FREE = ("harness.core", "harness.report", "harness.measure", "harness.models")


def _kind(module: str) -> str | None:
    """The suite kind a module belongs to (``harness.kinds.<kind>...``), or None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["harness", "kinds"] else None


def _layer_violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            if module.startswith(KIND_FREE) and target.startswith(("harness.kinds", "harness.run")):
                out.append(f"{module} imports {target}: {module.split('.')[1]}/ is kind-free")
            if module.startswith("harness.core") and target.startswith(("harness.report", "harness.measure",
                                                                        "harness.models")):
                out.append(f"{module} imports {target}: the core imports nothing above it")
            if _kind(module) and _kind(target) and _kind(module) != _kind(target):
                out.append(f"{module} imports {target}: a kind imports no other kind")
    return out


def test_each_layer_imports_only_what_is_below_it() -> None:
    assert not _layer_violations(_graph())


def test_the_layer_check_sees_a_violation() -> None:
    planted = {"harness.report.compositional": {"harness.kinds.accuracy.summary"},
               "harness.kinds.forecasting.kind": {"harness.kinds.accuracy.cells"},
               "harness.core.store": {"harness.report.format"}, "harness.kinds.speed.cells": {"harness.measure.group"}}
    assert len(_layer_violations(planted)) == 3


def test_a_kind_is_one_package_plus_one_entry() -> None:
    """Every kind of the table is a package of harness.kinds whose ``kind`` module builds it, and every such package
    is in the table: adding a kind is one package and one entry."""
    from harness.kinds import KINDS

    packages = {p.name for p in (REPO_ROOT / "harness" / "kinds").iterdir() if (p / "kind.py").is_file()}
    assert packages == set(KINDS)
    for name, kind in KINDS.items():
        assert kind.run.__module__.startswith(f"harness.kinds.{name}."), name
