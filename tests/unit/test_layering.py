"""The package's structure holds: no import circle inside it (module level, function level and
TYPE_CHECKING imports all count), the kernel model's floor imports none of its siblings, the entry
module stays wiring, and no file of the repository points at a document outside it."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest_pipecheck

PACKAGE = Path(pytest_pipecheck.__file__).resolve().parent
ROOT = PACKAGE.parent


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports, anywhere in it."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != me:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    paths = list(PACKAGE.rglob("*.py"))
    modules = {_module(p) for p in paths}
    return {_module(p): _imports(p, modules) for p in paths}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_inside_the_package() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_kernel_models_floor_imports_none_of_its_siblings() -> None:
    graph = _graph()
    siblings = {m for m in graph if m.startswith("pytest_pipecheck.model.")}
    assert not graph["pytest_pipecheck.model.spec"] & siblings


def test_the_entry_module_is_wiring() -> None:
    assert len((PACKAGE / "plugin.py").read_text().splitlines()) <= 250


def test_no_file_points_at_a_document_outside_the_repository() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    if not files:  # an installed copy, not a checkout
        return
    outside = ("FACTS" + ".md", "STYLE" + ".md", "DESIGN" + ".md", "../" + "shared")
    offenders = [f for f in files if not f.startswith(".ci/") and (ROOT / f).is_file()
                 and any(word in (ROOT / f).read_text(errors="replace") for word in outside)]
    assert offenders == []
