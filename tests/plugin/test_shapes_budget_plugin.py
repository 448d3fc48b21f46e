"""docs/verdicts.md item 24 through pytest: a parametrized shape over the memory budget is a skip naming why."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

KERNELS = '''
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor


def noop(arrays, dims):
    return None


def spec(name, tile_mn, tile_k):
    return KernelSpec(name, noop, noop,
                      [Tensor("a", ("M", "K")), Tensor("b", ("K", "N")), Tensor("c", ("M", "N"), role="output")],
                      {"M": tile_mn, "N": tile_mn, "K": tile_k}, "K", stages=3)


HUGE = spec("huge", 65536, 65536)
MIXED = spec("mixed", 1024, 32)
'''


def test_shapes_over_budget_become_skips_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_budget='''
import pytest
from kernels import HUGE, MIXED

@pytest.mark.pipecheck(spec=HUGE)
def test_huge(shape):
    raise AssertionError("a shape over the budget must not run")

@pytest.mark.pipecheck(spec=MIXED, shape_level="medium", shape_budget_mib=12)
def test_mixed(shape):
    from pytest_pipecheck.model import shapes
    assert shapes.shape_bytes(MIXED, shape) <= 12 << 20
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0
    assert outcomes["passed"] > 0 and outcomes["skipped"] > outcomes["passed"]
    result.stdout.fnmatch_lines([
        "SKIPPED*pipecheck: shape M32769-K32769-N32769 of spec 'huge' dropped: its inputs and outputs need * GiB "
        "(guarded allocations of one launch), over the shape memory budget of 1.0 GiB*",
        "SKIPPED*pipecheck: shape * of spec 'mixed' dropped: * over the shape memory budget of 12.0 MiB*",
    ])


def test_budget_option_is_validated_naming_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--pipecheck-shape-budget-mib=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*`--pipecheck-shape-budget-mib=0` from the command line must be >= 1*"])


def test_budget_from_the_ini_file_applies(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(kernels=KERNELS)
    pytester.makeini("[pytest]\npipecheck_shape_budget_mib = 12\n")
    pytester.makepyfile(test_ini='''
import pytest
from kernels import MIXED

@pytest.mark.pipecheck(spec=MIXED, shape_level="medium")
def test_mixed(shape):
    pass
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] > 0 and outcomes["skipped"] > 0
    result.stdout.fnmatch_lines(["SKIPPED*over the shape memory budget of 12.0 MiB*"])
