"""One program's extent, measured: a kernel whose program covers several tiles and drops its last chunk is
caught by the simplest test, which the declared tiles alone never reach. On the CPU tier (Triton's
interpreter)."""

from __future__ import annotations

import pytest
from plugin._simplest_tests import run_simplest_tests

pytest.importorskip("torch")
triton = pytest.importorskip("triton")

KERNELS = '''
import torch
import triton
import triton.language as tl
from pytest_pipecheck import KernelSpec, Tensor

BLOCK = 16
CHUNKS = 8


@triton.jit
def scale_chunks(x_ptr, y_ptr, N, BLOCK: tl.constexpr, CHUNKS: tl.constexpr, SKIP_LAST: tl.constexpr):
    start = tl.program_id(0) * BLOCK * CHUNKS
    for c in tl.range(0, CHUNKS - SKIP_LAST, num_stages=2):
        offs = start + c * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


def _launcher(skip_last):
    def launch(arrays, dims):
        x, y = arrays["x"], arrays["y"]
        grid = (triton.cdiv(dims["N"], BLOCK * CHUNKS),)
        scale_chunks[grid](x, y, dims["N"], BLOCK=BLOCK, CHUNKS=CHUNKS, SKIP_LAST=skip_last)
    return launch


def _spec(name, skip_last, **extra):
    return KernelSpec(name, _launcher(skip_last), lambda a, d: {"y": a["x"].double() * 2},
                      [Tensor("x", ("N",), "float32", layout="contiguous"),
                       Tensor("y", ("N",), "float32", role="output", layout="contiguous")],
                      tiles={"N": BLOCK}, loop_dim="N", stages=2, **extra)


GOOD = _spec("chunks", 0)
DROPS_LAST = _spec("chunks_drop_last", 1)
DECLARED = _spec("chunks_declared", 0, blocks_per_program={"N": CHUNKS})
'''

#: the simplest test of each spec of KERNELS (tests/plugin/_simplest_tests.py): {test name: spec name}
SUITE = {
    "test_good": "GOOD",
    "test_drops_last": "DROPS_LAST",
    "test_declared": "DECLARED",
}


def test_a_program_that_drops_its_last_chunk_fails_only_in_the_extent_case(pytester: pytest.Pytester,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    result = run_simplest_tests(pytester, monkeypatch, KERNELS, SUITE, seed=5)
    out = result.stdout.str()
    failed = sorted(line.split(" ")[1] for line in out.splitlines() if line.startswith("FAILED "))
    # every generated shape passes for the kernel that drops its last chunk: only the extent case reaches it
    assert failed == ["test_suite.py::test_drops_last[extent]"], out
    assert "one program reaches 112 of N" in out and "coverage failed" in out, out
    assert "blocks_per_program={'N': 7}" not in out, "a program that drops a chunk is not told to declare it"
    # the correct kernel passes, and the measured extent names what to declare
    assert "one program covers 128 of N (8 tiles of 16): declare blocks_per_program={'N': 8}" in out, out
    assert "PASSED test_suite.py::test_declared[extent]" in out, out


@pytest.mark.cpu_only  # a CPU-tier context built by hand (the interpreter): tests/conftest.py leaves it to the CPU job
def test_a_kernel_whose_program_walks_the_whole_loop_is_as_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled staged kernel's program walks all of N: nothing to add, no note."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # whatever an earlier test left: a hand-built CPU-tier context
    from pytest_pipecheck.checks.extent import check_extent
    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import TierInfo
    from pytest_pipecheck.fixture import Pipecheck
    from pytest_pipecheck.results import Verdict
    from reference_kernels.triton.staged_elementwise import staged_elementwise_spec

    if not isinstance(staged_elementwise_spec().launch, object):  # pragma: no cover
        pytest.skip("no launcher")
    pc = Pipecheck("t.py::t", PipecheckConfig(), TierInfo("cpu", None, "unit test"), 1)
    r = check_extent(pc, staged_elementwise_spec("cpu", "float32"))
    assert r.verdict is Verdict.PASS, r
    assert r.details["extent"]["M"] == 8 and not r.details["notes"], r.details


@pytest.mark.cpu_only  # a CPU-tier context built by hand (the interpreter): tests/conftest.py leaves it to the CPU job
def test_a_persistent_program_is_not_told_to_declare_blocks_per_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program that strides over the tiles with a fixed program count (a persistent kernel) writes blocks
    with gaps between them: its reach is reported as that, and no declaration is suggested."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # before triton.jit below reads it, whatever an earlier test left
    import triton.language as tl

    from pytest_pipecheck import KernelSpec, Tensor
    from pytest_pipecheck.checks.extent import check_extent
    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import TierInfo
    from pytest_pipecheck.fixture import Pipecheck
    from pytest_pipecheck.model.preconditions import Range
    from pytest_pipecheck.results import Verdict

    @triton.jit
    def persistent_scale(x_ptr, y_ptr, N, BLOCK: tl.constexpr, PROGRAMS: tl.constexpr):
        for t in range(tl.program_id(0), tl.cdiv(N, BLOCK), PROGRAMS):
            offs = t * BLOCK + tl.arange(0, BLOCK)
            m = offs < N
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)

    def launch(arrays, dims):  # type: ignore[no-untyped-def]
        persistent_scale[(4,)](arrays["x"], arrays["y"], dims["N"], BLOCK=16, PROGRAMS=4)

    spec = KernelSpec("persistent", launch, lambda a, d: {"y": a["x"].double() * 2},
                      [Tensor("x", ("N",), "float32", layout="contiguous"),
                       Tensor("y", ("N",), "float32", role="output", layout="contiguous")],
                      tiles={"N": 16}, loop_dim="N", preconditions=[Range("N", 1, 200)])
    pc = Pipecheck("t.py::t", PipecheckConfig(), TierInfo("cpu", None, "unit test"), 1)
    r = check_extent(pc, spec)
    assert r.verdict is Verdict.PASS, r
    # the probe respects the declared range (16 tiles of 16 would be 256 > 200)
    assert r.details["probe"] == "N200", r.details
    assert r.details["strided"] == ["N"] and "blocks_per_program" not in r.summary, r.summary
    assert "gaps between them" in r.summary, r.summary
