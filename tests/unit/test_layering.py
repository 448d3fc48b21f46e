"""The package's structure holds: no import circle inside it (module level, function level and
TYPE_CHECKING imports all count), none hidden behind a module-level holder another module fills, the
kernel model's spec above its floor, the entry module stays wiring, no module over 800 lines, and no file
of the repository points at a document outside it."""

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


#: what a spec's own validation needs: below the spec, importing no other module of the kernel model
MODEL_FLOOR = {"dimexpr", "tolerance", "autotune", "names"}
#: what a spec is made of, in modules of their own beside model/spec.py: its tensors, its shape and its
#: preconditions; they import no module of the model but the floor's
SPEC_PARTS = {"tensor", "shape", "preconditions"}


def test_the_spec_imports_only_the_models_floor_and_the_floor_none_of_the_model() -> None:
    graph = _graph()
    model = {m for m in graph if m.startswith("pytest_pipecheck.model.")}
    floor = {f"pytest_pipecheck.model.{name}" for name in MODEL_FLOOR}
    parts = {f"pytest_pipecheck.model.{name}" for name in SPEC_PARTS}
    assert graph["pytest_pipecheck.model.spec"] & model == floor | parts
    for module in parts:
        assert graph[module] & model <= floor, module
    for module in floor:
        assert not graph[module] & model, module


# --------------------------------------------------------------------------- injected globals
# An import can be hidden instead of removed: a module keeps a holder at module level, another module fills
# it with its functions (at import time, or through a setter), and the first calls them through the holder.
# The graph above then has no edge, and no circle, where the code has both.

def _package_names(tree: ast.Module, modules: set[str], package: str) -> set[str]:
    """The names a module binds to the package's modules or to what it imports from them."""
    bound = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("pytest_pipecheck")):
            bound |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("pytest_pipecheck")}
    return bound


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """The statements that run at import time (into if/try blocks, not into functions or classes)."""
    out: list[ast.stmt] = []
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        out.append(node)
        for block in ("body", "orelse", "finalbody", "handlers"):
            todo += [n for n in getattr(node, block, []) if isinstance(n, ast.stmt)]
    return out


def _wired_at_import(source: str) -> list[str]:
    """Import-time statements that hand the package's functions or modules to another module's function, or
    set an attribute of another module: the wiring of an injected global."""
    tree = ast.parse(source)
    bound = _package_names(tree, set(), "")
    found = []
    for stmt in _top_level(tree):
        for node in ast.walk(stmt):
            if (isinstance(node, ast.Call) and isinstance(r := _root(node.func), ast.Name) and r.id in bound
                    and not any(f"line {node.lineno}:" in w for w in found)):  # the outermost call of a line
                handed = [a for a in ast.walk(ast.Module(body=[ast.Expr(x) for x in (*node.args, *[k.value for k in
                                                                                          node.keywords])],
                                                         type_ignores=[]))
                          if isinstance(a, ast.Attribute) and isinstance(_root(a), ast.Name) and _root(a).id in bound]
                if handed:
                    found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(_root(t), ast.Name) and _root(t).id in bound:
                        found.append(f"line {node.lineno}: sets {ast.unparse(t)}")
    return found


_FILLS = {"append", "extend", "insert", "update", "setdefault", "add"}


def _holders_called_through(source: str) -> list[str]:
    """Module-level holders a function fills from its parameter and the module then calls through (directly,
    ``_HOLDER[0](...)``, or through a function that returns the holder's content)."""
    tree = ast.parse(source)
    top = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
           for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    filled: set[str] = set()
    rebound: set[str] = set()  # filled by ``global NAME; NAME = ...``: the holder is the value itself
    for f in functions:
        params = {a.arg for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)} - {"self", "cls"}
        declared = {n for g in ast.walk(f) if isinstance(g, ast.Global) for n in g.names}
        for node in ast.walk(f):
            stored: list[tuple[str, ast.AST]] = []
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id in declared:
                        stored.append((t.id, node.value))
                        rebound.add(t.id)
                    elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in top:
                        stored.append((t.value.id, node.value))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _FILLS
                  and isinstance(node.func.value, ast.Name) and node.func.value.id in top):
                stored += [(node.func.value.id, a) for a in node.args]
            for holder, value in stored:
                if {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & params:
                    filled.add(holder)
    readers = {f.name for f in functions for r in ast.walk(f) if isinstance(r, ast.Return) and r.value is not None
               and isinstance(_root(r.value), ast.Name) and _root(r.value).id in filled}
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or isinstance(node.func, ast.Name):
            continue
        root = _root(node.func)
        if not isinstance(root, ast.Name):
            continue
        through = [n for n in ast.walk(node.func) if isinstance(n, (ast.Subscript, ast.Call))]
        # a container's own methods (append, pop) are not a call through it: its content must be reached
        if root.id in readers or (root.id in filled and (through or root.id in rebound)):
            found.add(root.id)
    return sorted(found)


#: holders allowed, each with why it is no hidden import: a process-wide mode that a plugin turns on
OBSERVERS = {
    ("pytest_pipecheck.checks.arrays", "_EXACT"): "the memcheck child's report of each allocation, at the time "
                                                  "it is made (the child's plugin turns the mode on)",
}


def test_no_module_is_wired_at_import_time() -> None:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if wired := _wired_at_import(path.read_text()):
            found[_module(path)] = wired
    assert found == {}


def test_no_module_calls_through_a_holder_another_module_fills() -> None:
    found = {(_module(p), h) for p in PACKAGE.rglob("*.py") for h in _holders_called_through(p.read_text())}
    assert found - set(OBSERVERS) == set()
    assert set(OBSERVERS) <= found, "an observer listed here is gone: take it off the list"


def test_the_injection_finders_find_the_spec_wire_this_package_had() -> None:
    package_init = (
        "from . import autotune, spec, values\n"
        "spec.wire(spec._Model(value_names=values.validate_names, autotune_configs=autotune.configs))\n")
    assert [w[:40] for w in _wired_at_import(package_init)] == ["line 2: spec.wire(spec._Model(value_name"]
    assert _wired_at_import("from . import spec, values\nspec.VALUES = values.validate_names\n") == [
        "line 2: sets spec.VALUES"]
    floor = ("_WIRED = []\n"
             "def wire(model):\n    _WIRED[:] = [model]\n"
             "def _model():\n    return _WIRED[0]\n"
             "def check(name):\n    return _model().value_names(name)\n")
    assert _holders_called_through(floor) == ["_model"]
    setter = "_HOOK = None\ndef set_hook(f):\n    global _HOOK\n    _HOOK = f\ndef run():\n    _HOOK.fire()\n"
    assert _holders_called_through(setter) == ["_HOOK"]
    # a cache filled from what a function computed, or a stack of data, is no injection
    cache = "_CACHE = {}\ndef get(key):\n    _CACHE[key] = len(key)\n    return _CACHE[key]\n"
    assert _holders_called_through(cache) == []


def test_the_entry_module_is_wiring() -> None:
    assert len((PACKAGE / "plugin.py").read_text().splitlines()) <= 250


#: a module that grows past this does more than one job: cut it along its seams
MODULE_LINES = 800


def test_no_module_of_the_package_is_over_its_length() -> None:
    lengths = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {name: n for name, n in lengths.items() if n > MODULE_LINES} == {}


def test_no_file_points_at_a_document_outside_the_repository() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    if not files:  # an installed copy, not a checkout
        return
    outside = ("FACTS" + ".md", "STYLE" + ".md", "DESIGN" + ".md", "../" + "shared")
    offenders = [f for f in files if not f.startswith(".ci/") and (ROOT / f).is_file()
                 and any(word in (ROOT / f).read_text(errors="replace") for word in outside)]
    assert offenders == []
