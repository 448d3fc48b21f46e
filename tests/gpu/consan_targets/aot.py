"""Compile :mod:`kernels` ahead of time in a fresh process, with or without ConSan, for tests without a
GPU: returns the cache files Triton would load each compiled kernel from (its ``metadata_group``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

KERNELS = Path(__file__).resolve().parent / "kernels.py"
KNOB_ENV = "TRITON_INSTRUMENTATION_MODE"

_COMPILE = textwrap.dedent("""
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("consan_kernels", sys.argv[1])
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    out = {}
    for arch in (90, 100):
        k = mod.compile_aot(race=True, arch=arch, mode=sys.argv[2])
        out[str(arch)] = {"name": k.name, "group": dict(k.metadata_group)}
    print("GROUPS " + json.dumps(out))
""")


def aot_groups(cache_dir: Path, mode: str) -> dict[str, Any]:
    """``{"90": {"name", "group"}, "100": ...}`` for the racy kernel compiled with
    ``instrumentation_mode=mode`` (the knob set in the environment too, as Triton 3.6 needs) or without
    (``mode=""``), in ``cache_dir``. The process starts without the knob or TRITON_INTERPRET inherited."""
    env = {k: v for k, v in os.environ.items() if k not in (KNOB_ENV, "TRITON_INTERPRET")}
    env["TRITON_CACHE_DIR"] = str(cache_dir)
    if mode:
        env[KNOB_ENV] = mode
    proc = subprocess.run([sys.executable, "-c", _COMPILE, str(KERNELS), mode], capture_output=True, text=True,
                          env=env, timeout=600)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("GROUPS ")), None)
    if line is None:
        raise RuntimeError(f"AOT compile failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(line[len("GROUPS "):])
    return result
