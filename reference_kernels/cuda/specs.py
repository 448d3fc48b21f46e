"""pipecheck specs for the CUDA ladder kernels and their mutants.

Inputs are small integers ("randint", in [-3, 3]) so every fp32 sum is exact: any difference from
the float64 reference is a bug, never rounding, and a dropped or doubled K tile is unmistakable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor

from .launch import KERNELS, CudaKernel, gemm, source_stages

__all__ = ["SPECS", "mutant_spec", "reference", "spec"]

_TENSORS = (
    Tensor("A", ("M", "K"), "float16", "input", init="randint"),
    Tensor("B", ("K", "N"), "float16", "input", init="randint"),
    Tensor("C", ("M", "N"), "float32", "output"),
)


def reference(arrays: Mapping[str, Any], dims: Mapping[str, int]) -> dict[str, Any]:
    """C = A @ B in float64 (CuPy)."""
    import cupy

    a = cupy.asarray(arrays["A"]).astype(cupy.float64)
    b = cupy.asarray(arrays["B"]).astype(cupy.float64)
    return {"C": a @ b}


def _flops(dims: Mapping[str, int]) -> float:
    return 2.0 * dims["M"] * dims["N"] * dims["K"]


def _bytes(dims: Mapping[str, int]) -> float:
    return 2.0 * (dims["M"] * dims["K"] + dims["K"] * dims["N"]) + 4.0 * dims["M"] * dims["N"]


def _make(k: CudaKernel, name: str, source: str | None, entry: str | None, stages: int,
          description: str) -> KernelSpec:
    fixed_stages = k.stage_bytes == 0

    def launch(arrays: Mapping[str, Any], dims: Mapping[str, int], stages: int | None = None) -> None:
        gemm(k, arrays["A"], arrays["B"], arrays["C"], stages=None if fixed_stages else stages,
             source=source, entry=entry, label=name)

    return KernelSpec(
        name=name, launch=launch, reference=reference, tensors=_TENSORS,
        tiles={"M": k.bm, "N": k.bn, "K": 32}, loop_dim="K", stages=stages, backend="cupy",
        flops=_flops, bytes_moved=_bytes, description=description,
    )


def spec(kernel: str | CudaKernel) -> KernelSpec:
    """The spec of one ladder kernel at its default stage count."""
    k = kernel if isinstance(kernel, CudaKernel) else KERNELS[kernel]
    from .launch import kernel_source

    return _make(k, k.name, None, None, source_stages(kernel_source(k), k), k.description)


def mutant_spec(name: str) -> KernelSpec:
    """The spec of a mutant (same tensors and tiles as its base kernel, the mutated source)."""
    from reference_kernels.mutants.cuda import mutant

    m = mutant(name)
    src = m.source()
    stages = m.stages if m.stages is not None else source_stages(src, m.kernel)
    return _make(m.kernel, f"{m.base}__{m.name}", src, m.entry, stages, m.bug)


SPECS: dict[str, KernelSpec] = {name: spec(name) for name in KERNELS}
