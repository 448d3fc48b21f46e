"""Launch chosen builds of the CUDA ladder once each at 4096^3, for a profiler to look at.

    ncu --section SpeedOfLight --section WarpStateStats --csv --page details \
        python3 scripts/gpu/ladder_profile.py k3_cp_async:4 k3_cp_async_wide:4 k3_cp_async_wide:3:PIPECHECK_XTILE

Each argument is KERNEL[:STAGES[:MACRO[=VALUE][,MACRO...]]]. The script itself measures nothing:
every build is compiled and launched once, in order, so the profiler's report lists the launches in
the order of the arguments (each one's grid, block and shared memory distinguish them too).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def parse(arg: str) -> tuple[str, int | None, dict[str, object]]:
    name, _, rest = arg.partition(":")
    stages_text, _, macros = rest.partition(":")
    defines: dict[str, object] = {}
    for item in filter(None, macros.split(",")):
        key, _, value = item.partition("=")
        defines[key] = int(value) if value.lstrip("-").isdigit() else (value or 1)
    return name, int(stages_text) if stages_text else None, defines


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    import cupy

    from reference_kernels.cuda.launch import gemm

    n = 4096
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
    b = rng.standard_normal((n, n), dtype=cupy.float32).astype(cupy.float16)
    c = cupy.empty((n, n), dtype=cupy.float32)
    for arg in argv:
        name, stages, defines = parse(arg)
        gemm(name, a, b, c, stages=stages, defines=defines)
        cupy.cuda.Device().synchronize()
        print(f"launched {arg}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
