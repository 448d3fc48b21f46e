"""GPU tier for the CUDA ladder: each reference kernel passes pipecheck's correctness checks
(poisoned guarded outputs, reference comparison, tile probe, determinism) at every generated shape.
Without a CUDA GPU each test is skipped with the reason."""

from __future__ import annotations

import pytest

from pytest_pipecheck.shapes import generate
from reference_kernels.cuda.launch import KERNELS
from reference_kernels.cuda.specs import SPECS

CASES = [(name, shape) for name in KERNELS for shape in generate(SPECS[name], level="small")]


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "shape"), CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_reference_kernel_passes_every_check(pipecheck, name, shape) -> None:
    pipecheck.require_gpu("CUDA ladder kernel", kernel=name)
    pytest.importorskip("cupy")
    results = pipecheck.check_kernel(SPECS[name], shape)
    assert results, "check_kernel ran no check"


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(KERNELS))
def test_reference_kernel_at_a_large_ragged_shape(pipecheck, name) -> None:
    pipecheck.require_gpu("CUDA ladder kernel", kernel=name)
    pytest.importorskip("cupy")
    from pytest_pipecheck.spec import Shape

    pipecheck.check_coverage(SPECS[name], Shape(M=1000, N=777, K=32 * 9 + 5))
