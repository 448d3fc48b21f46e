"""The pipecheck description of the Hopper TMA + WGMMA GEMM (and of its mutants).

``spec()`` returns a :class:`~pytest_pipecheck.model.spec.KernelSpec` for ``c = a @ b.T`` with a (M, K) and
b (N, K) in bf16 (or fp16), c (M, N) fp32, tiles BM x BN x 64, loop dimension K, and the variant's
stage count. ``launch`` accepts a ``stages`` keyword, so a ``stages=`` override reaches the kernel
(it recompiles with that PIPECHECK_STAGES).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_pipecheck.model.preconditions import Divisible
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor

from .launch import BK, Variant, gemm

__all__ = ["spec"]

# fp32 output of exact bf16 products summed in fp32 (on the tensor cores, in their own order): the
# fp32 default (rtol 1e-4, atol 1e-5) is tighter than the summation-order difference on elements that
# cancel to near zero at K ~ 1000, so a looser but still bug-revealing tolerance is declared (a
# dropped or doubled 64-wide K tile moves an element by O(8) for unit-normal inputs).
RTOL = 2e-3
ATOL = 2e-3


def spec(variant: Variant | None = None, *, mutant: str | None = None) -> KernelSpec:
    """The KernelSpec of the Hopper GEMM built as ``variant`` (default: 4 stages, 2 consumers, BN 128)."""
    v = variant or Variant()
    dtype = "float16" if v.fp16 else "bfloat16"

    def launch(arrays: Mapping[str, Any], dims: Mapping[str, int], stages: int | None = None) -> None:
        gemm(arrays["a"], arrays["b"], arrays["c"], variant=v, stages=stages, mutant=mutant)

    def reference(arrays: Mapping[str, Any], dims: Mapping[str, int]) -> dict[str, Any]:
        a, b = arrays["a"], arrays["b"]
        return {"c": a.double() @ b.double().t()}

    return KernelSpec(
        name=mutant or f"hopper_tma_wgmma_{'fp16' if v.fp16 else 'bf16'}_s{v.stages}_c{v.consumers}_n{v.bn}",
        launch=launch,
        reference=reference,
        tensors=(
            Tensor("a", ("M", "K"), dtype),
            Tensor("b", ("N", "K"), dtype),
            Tensor("c", ("M", "N"), "float32", role="output"),
        ),
        tiles={"M": v.bm, "N": v.bn, "K": BK},
        loop_dim="K",
        stages=v.stages,
        backend="torch",
        # TMA global strides are multiples of 16 bytes: a contiguous (., K) 16-bit input needs K % 8 == 0
        preconditions=(Divisible("K", 8),),
        deterministic=True,
        flops=lambda d: 2.0 * d["M"] * d["N"] * d["K"],
        bytes_moved=lambda d: 2.0 * (d["M"] * d["K"] + d["N"] * d["K"]) + 4.0 * d["M"] * d["N"],
        description=f"Hopper TMA producer + WGMMA consumers, mbarrier ring ({v})",
        rtol=RTOL,
        atol=ATOL,
    )
