"""``pytest --pipecheck examples`` without the libraries installed: each example skips with its reason.

The example folders are named like the libraries (``examples/liger_kernel``, ``examples/fla``,
``examples/flag_gems``); under pytest's rootdir imports such a folder is a namespace package of that
name, so ``importorskip("liger_kernel")`` found the folder, passed, and the next import failed
collection with ModuleNotFoundError. So the examples ask for a module only the real package has.

The inner run cannot import the libraries even where they are installed (a finder passes over every
path entry that installs them, so the example folders still shadow their names as they would on a
machine without them), so the test means the same wherever it runs: otherwise, on a machine that has
them installed, the inner run would run every example on the GPU (300 s or more) and test nothing about
missing libraries. The examples with the libraries installed are the GPU check's ``examples`` part."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

ROOT = Path(__file__).resolve().parents[2]

# each example folder, the library hidden from it, and what its skip reason must say (the library's own
# missing dependency, einops or sqlalchemy, may be what it names first)
_EXAMPLES = {
    "liger_kernel": ("liger_kernel", re.compile(r"liger-kernel is not installed")),
    "fla": ("fla", re.compile(r"fla-core (is not installed|needs einops)")),
    # flag_gems queries the device when imported: without one, that is what its reason names
    "flag_gems": ("flag_gems", re.compile(r"flag-gems is not installed|flag_gems needs (sqlalchemy|a CUDA device)")),
}

# The inner run with the libraries uninstalled, as far as imports can tell: a path entry that holds one as
# an installed package or module is passed over for it, while namespace portions (the example folders of
# the same name, the cause of the old collection error) are still found as they would be.
_RUN_HIDDEN = """
import importlib.abc, importlib.machinery, os, sys
hidden = set(sys.argv[1].split(","))

def installs(entry, name):
    base = os.path.join(entry or ".", name)
    return os.path.isfile(os.path.join(base, "__init__.py")) or any(
        os.path.isfile(base + suffix) for suffix in importlib.machinery.all_suffixes())

class Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if path is not None or name not in hidden:
            return None  # a submodule is looked for in its parent, which this finder already placed
        spec = importlib.machinery.PathFinder.find_spec(name, [e for e in sys.path if not installs(e, name)])
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec

sys.meta_path.insert(0, Uninstalled())
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def test_examples_skip_with_their_reasons_where_the_libraries_are_missing() -> None:
    hidden = sorted(module for module, _ in _EXAMPLES.values())
    proc = subprocess.run([sys.executable, "-c", _RUN_HIDDEN, ",".join(hidden), "--pipecheck", "-p",
                           "no:cacheprovider", "-q", "-rs", *(f"examples/{d}" for d in _EXAMPLES)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    # a missing library is a skip with its reason, never a collection error
    # every module skips as it is imported, so nothing was checked: under --pipecheck that run fails with a
    # failure of its own that gives the skips' reasons (docs/verdicts.md), never with a collection error
    assert proc.returncode == 1 and "ModuleNotFoundError" not in out, out[-3000:]
    assert re.search(r"^FAILED pipecheck::nothing_checked - pipecheck: nothing was checked: .*3 skipped", out, re.M) \
        or "pipecheck: nothing was checked: 0 checks passed, 0 skipped; 0 tests passed, 3 skipped" in out, out[-3000:]
    skips = re.findall(r"^SKIPPED \[\d+\] examples/(\w+)/\S+?:\d+: (.*)$", out, re.M)
    for folder, (_, reason) in _EXAMPLES.items():
        mine = [why for where, why in skips if where == folder]
        assert mine and all(reason.search(why) for why in mine), (folder, skips, out[-3000:])
