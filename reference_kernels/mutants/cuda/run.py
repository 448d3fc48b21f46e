"""Child-process driver: run one CUDA ladder kernel or mutant once, so a sanitizer or a watchdog can
watch it from outside. Never import this in a test process that must survive a hang.

    python -m reference_kernels.mutants.cuda.run <kernel-or-mutant> [M N K]

Exit 0 when the launch completed and the result matches the float64 reference, 3 on a mismatch.
CuPy's memory pool is disabled so memcheck sees every out-of-bounds access of an exact allocation.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    import cupy

    from reference_kernels.cuda.launch import KERNELS, gemm
    from reference_kernels.mutants.cuda import MUTANTS

    cupy.cuda.set_allocator(None)
    name = argv[0]
    M, N, K = (int(x) for x in argv[1:4]) if len(argv) >= 4 else (129, 129, 100)
    rng = cupy.random.default_rng(0)
    a = rng.integers(-3, 4, size=(M, K)).astype(cupy.float16)
    b = rng.integers(-3, 4, size=(K, N)).astype(cupy.float16)
    c = cupy.full((M, N), cupy.nan, dtype=cupy.float32)
    print(f"pipecheck-run begin {name} M={M} N={N} K={K}", flush=True)
    if name in MUTANTS:
        MUTANTS[name].launch(a, b, c)
    elif name in KERNELS:
        gemm(name, a, b, c)
    else:
        print(f"unknown kernel or mutant {name!r}", file=sys.stderr)
        return 2
    cupy.cuda.Device().synchronize()
    want = a.astype(cupy.float64) @ b.astype(cupy.float64)
    bad = int(cupy.count_nonzero(~(c == want)))
    print(f"pipecheck-run end {name} mismatches={bad}", flush=True)
    return 0 if bad == 0 else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
