"""Run state lives in pytest_pipecheck.state: no module of the package imports the entry module back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_pipecheck
from pytest_pipecheck import plugin, state

PACKAGE = Path(pytest_pipecheck.__file__).resolve().parent


def _imports_plugin(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = {a.name for a in node.names}
            if (node.module or "").endswith("plugin") or "plugin" in names:
                return True
        elif isinstance(node, ast.Import) and any(a.name.endswith(".plugin") for a in node.names):
            return True
    return False


def test_no_module_imports_the_entry_module() -> None:
    offenders = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                 if p.name != "plugin.py" and _imports_plugin(p)]
    assert offenders == []


def test_the_entry_module_uses_the_same_keys() -> None:
    assert plugin.RUN_CONFIG is state.RUN_CONFIG and plugin.item_config is state.item_config
