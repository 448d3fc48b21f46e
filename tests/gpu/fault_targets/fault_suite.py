"""Target suite for tests/gpu/test_containment_gpu.py: one kernel faults mid-run, the others do not.

Copied into a pytester directory as ``test_fault_suite.py`` and run with ``pytest --pipecheck``. The
faulting kernel's store forgets its mask and lands far outside any allocation: an illegal address,
a sticky error that kills the CUDA context of the process it runs in. Without containment every
test after it fails at its first CUDA call; with it, each gets its own verdict. The faulting line
carries ``# FAULT`` so the wrapper can check that the triage names it.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402

BLOCK = 128


@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


@triton.jit
def scale_stray(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs + (1 << 42), x * 2.0)  # FAULT: unmasked, and 16 TiB past the output


@triton.jit
def scale_drops_tail(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < (n // BLOCK) * BLOCK  # the ragged last block is never written
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def _spec(kernel, name: str) -> KernelSpec:
    def launch(arrays, dims):
        n = dims["N"]
        kernel[(triton.cdiv(n, BLOCK),)](arrays["x"], arrays["y"], n, BLOCK=BLOCK)

    return KernelSpec(name=name, launch=launch,
                      reference=lambda arrays, dims: {"y": arrays["x"].double() * 2.0},
                      tensors=[Tensor("x", ("N",), dtype="float32"), Tensor("y", ("N",), dtype="float32",
                                                                                 role="output")],
                      tiles={"N": BLOCK}, loop_dim="N")


SCALE = _spec(scale, "scale")


@pytest.mark.pipecheck(sanitizer="racecheck")
@pytest.mark.parametrize("n", [1, 129, 4096])
def test_before(pipecheck, n):
    pipecheck.check_coverage(SCALE, {"N": n})


@pytest.mark.pipecheck(sanitizer="racecheck")
def test_faults(pipecheck):
    pipecheck.check_coverage(_spec(scale_stray, "scale_stray"), {"N": 1000})


@pytest.mark.pipecheck(sanitizer="racecheck")
@pytest.mark.parametrize("n", [1, 129, 4096])
def test_after(pipecheck, n):
    pipecheck.check_kernel(SCALE, {"N": n})


@pytest.mark.pipecheck(sanitizer="racecheck", expect_failures="coverage")
def test_after_a_real_bug_is_still_caught(pipecheck):
    from pytest_pipecheck import PipecheckFailure

    with pytest.raises(PipecheckFailure, match="never written"):
        pipecheck.check_coverage(_spec(scale_drops_tail, "scale_drops_tail"), {"N": 1000})


@pytest.mark.pipecheck(sanitizer="racecheck")
def test_after_cupy(pipecheck):
    cp = pytest.importorskip("cupy")
    x = cp.arange(1000, dtype=cp.float32)
    assert float((x * 2).sum()) == 999000.0
