"""The memcheck child's exact allocations end to end, through a real pytest run and the fake compute-sanitizer.

In a memcheck child each array of the coverage run is its own allocation of exactly its view's extent (no
guard band, which the tool would take for valid memory), and the child prints where each one lies; the
fake tool (tests/data/sanitizer/fake_compute_sanitizer.py, plan ``past``) answers with an invalid read 32
bytes past the end of 'a', as memcheck words it, and the verdict names 'a', where it ends and the element.
The kernel is a pure-torch stand-in that checks its own allocations: exact in the memcheck child, guarded
in the racecheck child and in the normal run. On a real GPU the same path is evidence only when run there
(tests/gpu/, docs/howto-sanitizer-ci.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ._sanitizer_fake import GPU_CONFTEST, _fake, _results

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

pytest.importorskip("torch")

HOST_TENSORS = '''
import pytest_pipecheck.checks.launch as _launch

# the fake GPU has no memory: the coverage run's tensors live on the host
_launch._device = lambda ctx, spec: "cpu"
'''

TESTS = '''
import os

from pytest_pipecheck.model.shape import Shape
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor


def _launch(arrays, dims):
    a = arrays["a"]
    allocated = a.untyped_storage().nbytes()
    exact = ((a.shape[0] - 1) * a.stride(0) + a.shape[1]) * a.element_size()
    if os.environ.get("PIPECHECK_CHILD") == "memcheck":
        assert (allocated, a.storage_offset()) == (exact, 0), "not an exact allocation under memcheck"
    else:
        assert allocated > exact and a.storage_offset() > 0, "no guard bands outside memcheck"
    arrays["c"].copy_((arrays["a"].float() @ arrays["b"].float()).half())


SPEC = KernelSpec("toy_gemm", _launch, lambda arrays, dims: {"c": arrays["a"].double() @ arrays["b"].double()},
                  [Tensor("a", ("M", "K")), Tensor("b", ("K", "N")), Tensor("c", ("M", "N"), role="output")],
                  {"M": 8, "N": 8, "K": 16}, "K", stages=2)


def test_overread(pipecheck):
    pipecheck.check_coverage(SPEC, Shape(M=9, K=40, N=7))


def test_clean(pipecheck):
    pipecheck.check_coverage(SPEC, Shape(M=9, K=40, N=7))
'''


def test_memcheck_child_allocates_exactly_and_names_the_tensor(pytester: pytest.Pytester, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, {"memcheck": {"past": {"test_overread": ["a", 32, "read"]}}})
    pytester.makeconftest(GPU_CONFTEST.format(fake_gpu=True) + HOST_TENSORS)
    pytester.makepyfile(test_k=TESTS)
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=memcheck,racecheck",
                                           "-p", "no:cacheprovider")
    text = result.stdout.str()
    res = _results(text)
    verdict, summary = res[("test_overread", "sanitizer:memcheck")]
    assert verdict == "fail" and summary == "1 invalid __global__ read in gemm_kernel (gemm.py:42) past 'a'", summary
    # a (9, 40) float16 with rows 64 apart, allocated exactly: (8 x 64 + 40) x 2 = 1104 bytes; 32 bytes past
    # its end is element 8 x 64 + 56 by its strides
    m = re.search(r"reads past 'a' \(ends at (0x[0-9a-f]+), read at (0x[0-9a-f]+)\+32: a\[8, 56\] by its strides\)",
                  text)
    assert m is not None and m.group(1) == m.group(2), text
    assert res[("test_clean", "sanitizer:memcheck")] == ("pass", "0 hazards")
    # the racecheck child and the normal run keep the guard bands (the launch asserts each)
    assert res[("test_overread", "sanitizer:racecheck")] == ("pass", "0 hazards")
    assert res[("test_clean", "sanitizer:racecheck")] == ("pass", "0 hazards")
    assert res[("test_clean", "coverage")][0] == "pass" and res[("test_overread", "coverage")][0] == "pass"
    result.assert_outcomes(passed=1, failed=1)
