"""Issue 17, correctness checks: inputs and failure modes that used to read as a pass.

Each test here was a false pass (or a misplaced blame) before its fix. Checks run on pure-torch
"kernels" on the CPU. Tests that provoke an ERROR verdict use a standalone ``Pipecheck`` (``pc``)
whose results stay local, so the plugin does not fail the test for the error it set out to cause.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.checks import coverage  # noqa: E402
from pytest_pipecheck.config import ConfigError, PipecheckConfig, apply_marker  # noqa: E402
from pytest_pipecheck.device import TierInfo  # noqa: E402
from pytest_pipecheck.fixture import Pipecheck  # noqa: E402
from pytest_pipecheck.results import PipecheckError  # noqa: E402
from pytest_pipecheck.spec import KernelSpec, Shape, Tensor  # noqa: E402

SHAPE = Shape(M=9, K=40, N=7)  # K: 3 tiles of 16, the last partial


def _ref(arrays, dims):
    return {"c": arrays["a"].double() @ arrays["b"].double()}


def _spec(launch, name="toy", reference=_ref, **kw):
    return KernelSpec(name, launch, reference,
                      [Tensor("a", ("M", "K")), Tensor("b", ("K", "N")), Tensor("c", ("M", "N"), role="output")],
                      {"M": 8, "N": 8, "K": 16}, "K", stages=2, **kw)


def good(arrays, dims):
    arrays["c"].copy_((arrays["a"].float() @ arrays["b"].float()).half())


def writes_zeros(arrays, dims):
    arrays["c"].zero_()


def writes_nothing(arrays, dims):
    pass


@pytest.fixture
def pc() -> Pipecheck:
    """A pipecheck handle outside the plugin's bookkeeping: results it records stay in ``pc.results``."""
    return Pipecheck("tests/unit/test_false_pass_checks.py::t", PipecheckConfig(),
                     TierInfo("cpu", None, "unit test"), 1234)


# ----------------------------------------------------------------------------- item 6: tolerances


@pytest.mark.parametrize("kw, fragment", [
    ({"rtol": math.nan}, "rtol=nan must be a number, not NaN"),
    ({"atol": math.inf}, "atol=inf must be finite"),
    ({"rtol": -1e-3}, "rtol=-0.001 must be >= 0"),
    ({"rtol": "abc"}, "rtol='abc' must be a number, got str"),
    ({"atol": True}, "atol=True must be a number, got bool"),
    ({"atol": {"c": math.nan}}, "atol['c']=nan must be a number, not NaN"),
    ({"rtol": {"c": -1.0}}, "rtol['c']=-1.0 must be >= 0"),
    ({"calibration_k": math.inf}, "calibration_k=inf must be finite"),
    ({"calibration_k": "2"}, "calibration_k='2' must be a number"),
    ({"calibration_k": math.nan}, "calibration_k=nan must be a number, not NaN"),
])
def test_bad_spec_tolerance_is_rejected_at_construction_naming_the_spec(kw, fragment):
    with pytest.raises(PipecheckError) as info:
        _spec(good, name="gemm_tol", **kw)
    assert str(info.value).startswith("spec 'gemm_tol': ")
    assert fragment in str(info.value)


def test_valid_spec_tolerances_still_accepted():
    spec = _spec(good, rtol=0, atol={"c": 1e-3}, calibration_k=3)
    assert spec.rtol == 0 and spec.atol == {"c": 1e-3}


@pytest.mark.parametrize("check", ["check_coverage", "check_tile_probe"])
@pytest.mark.parametrize("kw, fragment", [
    ({"atol": math.nan}, "atol=nan) must be a number, not NaN"),
    ({"rtol": -0.5}, "rtol=-0.5) must be >= 0"),
    ({"rtol": "abc"}, "rtol='abc') must be a number, got str"),
])
def test_bad_check_tolerance_is_an_error_before_any_launch(pc, check, kw, fragment):
    launched = []

    def kernel(arrays, dims):
        launched.append(1)
        good(arrays, dims)

    with pytest.raises(PipecheckError) as info:
        getattr(coverage, check)(pc, _spec(kernel), SHAPE, **kw)
    assert f"spec 'toy': {check}(" in str(info.value) and fragment in str(info.value)
    assert not launched


def test_check_all_forwards_the_tolerance_validation(pc):
    with pytest.raises(PipecheckError, match=r"check_coverage\(atol=nan\)"):
        coverage.check_all(pc, _spec(good), SHAPE, atol=math.nan)


@pytest.mark.parametrize("key, value, fragment", [
    ("rtol", math.nan, "must be a finite number"),
    ("atol", -1.0, "must be >= 0"),
    ("rtol", "abc", "must be a number"),
])
def test_marker_tolerance_is_rejected_naming_the_marker(key, value, fragment):
    with pytest.raises(ConfigError) as info:
        apply_marker(PipecheckConfig(), {key: value}, "tests/test_k.py::test_gemm")
    assert f"from the pipecheck marker on tests/test_k.py::test_gemm {fragment}" in str(info.value)
