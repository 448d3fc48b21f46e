"""Loads tests/data/sass/artifacts.py once per session (the compiled test kernels, cached)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_DATA = Path(__file__).resolve().parents[1] / "data" / "sass"
_spec = importlib.util.spec_from_file_location("_pipecheck_sass_artifacts", _DATA / "artifacts.py")
assert _spec and _spec.loader
art = sys.modules.get(_spec.name) or importlib.util.module_from_spec(_spec)
if _spec.name not in sys.modules:
    sys.modules[_spec.name] = art
    _spec.loader.exec_module(art)
