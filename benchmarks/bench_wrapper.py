"""Benchmark: the wrapper form (call=) against the spec form (launch=) on the same kernel (goal: <= 1.2x).

Both run every correctness check (coverage, tile probe, determinism) at the same shape on the same
Triton kernel; the wrapper form adds the dispatch mode that intercepts the wrapper's allocations.
A pure-torch kernel (no interpreter) shows the overhead where the kernel itself costs little.

Measured on the CPU tier (torch 2.13, triton 3.9, the interpreter), medians: Triton kernel at
M33-N200 1.00x (about 1.9 s each: the interpreter dominates); pure-torch kernel 1.46x (4.4 ms against
6.5 ms: the dispatch mode costs about 25 us per op the wrapper dispatches, about 0.2 ms per call here).

Run: python -m pytest benchmarks/bench_wrapper.py -p no:cacheprovider --benchmark-only
  or python benchmarks/bench_wrapper.py  (prints the median time of each form and their ratio)
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

SHAPE = "M33-N200"


def _specs(kind: str) -> tuple[Any, Any]:
    from pytest_pipecheck.spec import KernelSpec, Tensor

    if kind == "triton":
        import triton
        from test_wrapper import BLOCK_M, BLOCK_N, reference, scale, scale_kernel

        def launch(arrays: Any, dims: Any) -> None:
            x, w, y = arrays["x"], arrays["w"], arrays["y"]
            M, N = x.shape
            scale_kernel[(triton.cdiv(M, BLOCK_M),)](x, w, y, M, N, x.stride(0), x.stride(1), y.stride(0),
                                                     y.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                                     SKIP_LAST=False, UNMASKED=False)

        call = scale
    else:
        import torch

        BLOCK_M, BLOCK_N = 8, 16

        def reference(arrays: Any, dims: Any) -> dict[str, Any]:
            return {"y": arrays["x"].double() * arrays["w"].double()[None, :]}

        def launch(arrays: Any, dims: Any) -> None:
            torch.mul(arrays["x"], arrays["w"][None, :], out=arrays["y"])

        def call(x: Any, w: Any) -> Any:
            y = torch.empty_like(x)
            torch.mul(x, w[None, :], out=y)
            return y

    tensors = [Tensor("x", ("M", "N")), Tensor("w", ("N",)), Tensor("y", ("M", "N"), role="output")]
    common = dict(reference=reference, tiles={"M": BLOCK_M, "N": BLOCK_N}, loop_dim="N")
    # the same layout for both forms (contiguous inputs), so only the launch path differs
    spec_form = KernelSpec(f"{kind}_spec", launch=launch, tensors=[
        Tensor(t.name, t.dims, role=t.role, layout="contiguous") for t in tensors], **common)  # type: ignore[arg-type]
    wrapper_form = KernelSpec(f"{kind}_wrapper", call=call, tensors=tensors, **common)  # type: ignore[arg-type]
    return spec_form, wrapper_form


@pytest.mark.parametrize("kind", ["triton", "torch"])
@pytest.mark.parametrize("form", ["spec", "wrapper"])
def test_bench_check_kernel(benchmark, pipecheck, kind, form) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    if kind == "triton":
        pytest.importorskip("triton")
    spec_form, wrapper_form = _specs(kind)
    spec = spec_form if form == "spec" else wrapper_form
    results = benchmark(lambda: pipecheck.check_kernel(spec, SHAPE))
    assert all(r.verdict.value == "pass" for r in results)


def main() -> int:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import TierInfo
    from pytest_pipecheck.fixture import Pipecheck

    tier = TierInfo("cpu", None, "benchmark on the CPU tier")
    for kind in ("triton", "torch"):
        spec_form, wrapper_form = _specs(kind)
        times: dict[str, list[float]] = {"spec": [], "wrapper": []}
        rounds = 7 if kind == "triton" else 30
        for _ in range(rounds):
            for form, spec in (("spec", spec_form), ("wrapper", wrapper_form)):
                pc = Pipecheck(f"bench::{kind}", PipecheckConfig(), tier, 1)
                start = time.perf_counter()
                pc.check_kernel(spec, SHAPE)
                times[form].append(time.perf_counter() - start)
        s, w = statistics.median(times["spec"]), statistics.median(times["wrapper"])
        sys.stdout.write(f"{kind:7s} at {SHAPE}: spec form {s * 1e3:8.2f} ms, wrapper form {w * 1e3:8.2f} ms, "
                         f"ratio {w / s:.3f} (median of {rounds})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
