"""The coverage checks through real pytest runs (pytester): verdicts, messages, summary, markers."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

KERNELS = '''
import pytest
from pytest_pipecheck.model import shapes
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor

def ref(arrays, dims):
    return {"c": arrays["a"].double() @ arrays["b"].double()}

def good(arrays, dims):
    arrays["c"].copy_((arrays["a"].float() @ arrays["b"].float()).half())

def drop_last_k(arrays, dims):
    k = (dims["K"] - 1) // 16 * 16
    arrays["c"].copy_((arrays["a"][:, :k].float() @ arrays["b"][:k].float()).half())

def spec(name, launch):
    return KernelSpec(name, launch, ref,
                      [Tensor("a", ("M", "K")), Tensor("b", ("K", "N")), Tensor("c", ("M", "N"), role="output")],
                      {"M": 8, "N": 8, "K": 16}, "K", stages=2)

GOOD = spec("toy_good", good)
BAD = spec("toy_drop_last", drop_last_k)
'''


def test_generated_shapes_pass_and_show_in_summary(pytester):
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_good='''
import pytest
from kernels import GOOD
from pytest_pipecheck.model import shapes

@pytest.mark.parametrize("shape", shapes.generate(GOOD, level="small"), ids=str)
def test_good(pipecheck, shape):
    pipecheck.check_kernel(GOOD, shape)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*test_good*M5-K9-N5*PASSED*", "*pipecheck checks: 21 pass, 0 fail*"])


def test_dropped_tile_fails_with_named_tile_and_reproduce_line(pytester):
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_bad='''
from kernels import BAD

def test_bad(pipecheck):
    pipecheck.check_kernel(BAD, "M9-K40-N7")
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--pipecheck-seed=7")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*K tile 2 of 3, the last (epilogue, partial 8/16), never reached the output*",
        "*pytest test_bad.py::test_bad --pipecheck --pipecheck-seed=7 -p no:cacheprovider",
    ])


def test_marker_tolerance_override_reaches_the_check(pytester):
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_tol='''
import pytest
from kernels import GOOD

@pytest.mark.pipecheck(rtol=0.5, atol=0.25, checks="coverage")
def test_loose(pipecheck):
    results = pipecheck.check_kernel(GOOD, "M9-K40-N7")
    assert [r.check for r in results] == ["coverage"]
    assert "rtol from config" in results[0].details["outputs"]["c"]["tolerance"]
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_bad_shape_is_a_clear_error(pytester):
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_err='''
from kernels import GOOD

def test_err(pipecheck):
    pipecheck.check_kernel(GOOD, {"M": 9, "K": 40})
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*spec 'toy_good': shape M9-K40 has no size for N*"])


def test_marker_spec_parametrizes_shape_at_the_configured_level(pytester):
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_marked='''
import pytest
from kernels import GOOD, BAD

@pytest.mark.pipecheck(spec=GOOD)
def test_good(pipecheck, shape):
    assert pipecheck.spec is GOOD
    pipecheck.check_kernel(pipecheck.spec, shape)

@pytest.mark.pipecheck(spec=BAD, expect_failures=True, shape_level="medium")
def test_mutant(pipecheck, shape):
    pipecheck.check_tile_probe(BAD, shape)  # caught: the failure ends the body and the test passes

@pytest.mark.pipecheck(spec="not a spec")
def test_wrong(pipecheck):
    pass
''')
    from pytest_pipecheck.model import shapes
    from pytest_pipecheck.model.spec import KernelSpec  # noqa: F401

    result = pytester.runpytest("-p", "no:cacheprovider", "-v", "--pipecheck", "--pipecheck-sanitizer=none")
    outcomes = result.parseoutcomes()
    good_ids = [line for line in result.stdout.lines if "test_good[" in line and "PASSED" in line]
    mutant_ids = [line for line in result.stdout.lines if "test_mutant[" in line and "PASSED" in line]
    assert len(good_ids) == outcomes["passed"] - len(mutant_ids) > 0
    assert len(mutant_ids) > len(good_ids)  # medium generates more shapes than small
    result.stdout.fnmatch_lines(["*`spec='not a spec'` from the pipecheck marker on test_marked.py::test_wrong must be a pytest_pipecheck.KernelSpec*"])
    assert outcomes["errors"] == 1
    result.stdout.fnmatch_lines(["*toy_drop_last*tile_probe*caught*"])
    assert shapes  # the generator the marker uses is the public one
