"""Correctness checks: inputs and failure modes that must not read as a pass.

Each test here holds a way to get a false pass (or a misplaced blame); the section headers name its
item in docs/verdicts.md. Checks run on pure-torch
"kernels" on the CPU. Tests that provoke an ERROR verdict use a standalone ``Pipecheck`` (``pc``)
whose results stay local, so the plugin does not fail the test for the error it set out to cause.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from _toy_gemm import SHAPE, _spec, good  # noqa: E402

from pytest_pipecheck.checks import arrays as _arr  # noqa: E402
from pytest_pipecheck.checks import correctness, coverage, determinism, tile_probe  # noqa: E402
from pytest_pipecheck.config import ConfigError, PipecheckConfig, apply_marker  # noqa: E402
from pytest_pipecheck.device import TierInfo  # noqa: E402
from pytest_pipecheck.fixture import Pipecheck  # noqa: E402
from pytest_pipecheck.model.shape import Shape  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402

#: the checks the tests below are parametrized with, by name
CHECKS = {"check_coverage": coverage.check_coverage, "check_tile_probe": tile_probe.check_tile_probe}


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
        CHECKS[check](pc, _spec(kernel), SHAPE, **kw)
    assert f"spec 'toy': {check}(" in str(info.value) and fragment in str(info.value)
    assert not launched


def test_check_all_forwards_the_tolerance_validation(pc):
    with pytest.raises(PipecheckError, match=r"check_coverage\(atol=nan\)"):
        correctness.check_all(pc, _spec(good), SHAPE, atol=math.nan)


@pytest.mark.parametrize("key, value, fragment", [
    ("rtol", math.nan, "must be a finite number"),
    ("atol", -1.0, "must be >= 0"),
    ("rtol", "abc", "must be a number"),
])
def test_marker_tolerance_is_rejected_naming_the_marker(key, value, fragment):
    with pytest.raises(ConfigError) as info:
        apply_marker(PipecheckConfig(), {key: value}, "tests/test_k.py::test_gemm")
    assert f"from the pipecheck marker on tests/test_k.py::test_gemm {fragment}" in str(info.value)


# ----------------------------------------------------------------------------- item 4: calibrated tolerance


def _lowp_with(value):
    def lowp(arrays, dims):
        c = (arrays["a"].float() @ arrays["b"].float()).half()
        if value == "all":
            c.fill_(math.nan)
        else:
            c[1, 2] = value
        return {"c": c}

    return lowp


@pytest.mark.parametrize("lowp, kind", [(_lowp_with(math.inf), "inf"), (_lowp_with("all"), "NaN"),
                                        (_lowp_with(math.nan), "NaN")])
def test_calibrated_tolerance_from_a_non_finite_same_precision_run_is_an_error(pc, lowp, kind):
    # before: one inf made atol inf (or all NaN made it NaN) and a kernel writing zeros passed
    with pytest.raises(PipecheckError) as info:
        coverage.check_coverage(pc, _spec(writes_zeros, same_precision=lowp), SHAPE, tolerance="calibrated")
    msg = str(info.value)
    assert msg.startswith("spec 'toy': the same_precision implementation's 'c' is " + kind)
    assert "calibrated tolerance would be" in msg and "accept any output" in msg
    assert [(r.check, r.verdict) for r in pc.results] == [("coverage", Verdict.ERROR)]
    assert "inconclusive" in pc.results[0].summary


def test_calibrated_tolerance_still_catches_zeros_with_a_finite_same_precision_run(pc):
    with pytest.raises(PipecheckFailure, match="exceed the tolerance"):
        coverage.check_coverage(pc, _spec(writes_zeros, same_precision=_lowp_with(0.0)), SHAPE)
    assert pc.results[-1].verdict is Verdict.FAIL


# ----------------------------------------------------------------------------- item 5: NaN reference


def _nan_ref(arrays, dims):
    return {"c": torch.full((dims["M"], dims["N"]), math.nan, dtype=torch.float64)}


def _inf_ref(arrays, dims):
    out = arrays["a"].double() @ arrays["b"].double()
    out[4, 4] = math.inf
    return {"c": out}


@pytest.mark.parametrize("kernel", [writes_nothing, writes_zeros, good])
@pytest.mark.parametrize("check", ["check_coverage", "check_tile_probe"])
def test_all_nan_reference_is_an_error_naming_spec_and_output(pc, kernel, check):
    with pytest.raises(PipecheckError) as info:
        CHECKS[check](pc, _spec(kernel, reference=_nan_ref), SHAPE)
    msg = str(info.value)
    assert msg.startswith("spec 'toy': the reference's 'c' is NaN at 63 of 63 (100.00%) elements at M9-K40-N7")
    assert "a reference must be finite wherever the output is compared" in msg
    assert pc.results[-1].verdict is Verdict.ERROR
    assert pc.results[-1].check == check.removeprefix("check_")


def test_one_inf_in_the_reference_is_an_error_not_agreement(pc):
    # |0 - inf| <= atol + rtol * inf holds: unchecked, the element agrees with whatever the kernel wrote
    with pytest.raises(PipecheckError, match=r"'c' is inf at 1 of 63 .* first at \[4, 4\]"):
        coverage.check_coverage(pc, _spec(good, reference=_inf_ref), SHAPE)


def test_kernel_writing_nothing_fails_determinism(pc):
    # no reference is involved: with one poison, two runs of untouched poison would be "bitwise equal"
    with pytest.raises(PipecheckFailure) as info:
        determinism.check_determinism(pc, _spec(writes_nothing), SHAPE)
    assert "output 'c': 63 of 63 (100.00%) elements never written (still poison in runs 1 and 2)" in str(info.value)
    assert "suspected race" not in str(info.value)
    assert pc.results[-1].verdict is Verdict.FAIL


def test_kernel_skipping_one_element_fails_determinism_naming_it(pc):
    def skip_one(arrays, dims):
        c = arrays["c"]
        keep = c[2, 3].clone()
        good(arrays, dims)
        c[2, 3] = keep

    with pytest.raises(PipecheckFailure, match=r"1 of 63 \(1.59%\) elements never written .* first at \[2, 3\]"):
        determinism.check_determinism(pc, _spec(skip_one), SHAPE)


def test_correct_kernel_still_deterministic(pc):
    assert determinism.check_determinism(pc, _spec(good), SHAPE, runs=3).verdict is Verdict.PASS


# ----------------------------------------------------------------------------- item 8: integer poison


def _int_spec(launch, dtype="uint8", name="bytes"):
    def ref(arrays, dims):
        return {"y": arrays["x"].to(torch.int64)}

    def poison_valued(shape, gen):
        # every value but one is the dtype's first poison (7 for uint8), so a hole hides behind equal values
        out = torch.full(shape, _arr.poison_value(dtype), dtype=torch.int64)
        out[0, 0] = 1
        return out

    return KernelSpec(name, launch, ref, [Tensor("x", ("M", "N"), dtype=dtype, init=poison_valued),
                                          Tensor("y", ("M", "N"), dtype=dtype, role="output")],
                      {"M": 4, "N": 8}, "N")


def copy_all(arrays, dims):
    arrays["y"].copy_(arrays["x"])


def copy_but_last_row(arrays, dims):
    arrays["y"][:-1].copy_(arrays["x"][:-1])


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32"])
def test_unwritten_integer_elements_equal_to_the_poison_are_found(pc, dtype):
    shape = Shape(M=5, N=9)
    with pytest.raises(PipecheckFailure) as info:
        coverage.check_coverage(pc, _int_spec(copy_but_last_row, dtype), shape)
    assert "output 'y': 9 of 45 (20.00%) elements never written (still poison); first at [4, 0]" in str(info.value)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_integer_kernel_writing_poison_valued_results_passes(pc, dtype):
    r = coverage.check_coverage(pc, _int_spec(copy_all, dtype), Shape(M=5, N=9))
    assert r.verdict is Verdict.PASS


def test_integer_kernel_writing_nothing_fails_determinism(pc):
    with pytest.raises(PipecheckFailure, match=r"45 of 45 .* never written"):
        determinism.check_determinism(pc, _int_spec(lambda arrays, dims: None), Shape(M=5, N=9))


# ----------------------------------------------------------------------------- item 10: reference writes inputs


def _ref_scaling_a(arrays, dims):
    arrays["a"].mul_(2)  # in place: the kernel must not be blamed for this
    return {"c": arrays["a"].double() @ arrays["b"].double() / 2}


@pytest.mark.parametrize("check", ["check_coverage", "check_tile_probe"])
def test_reference_that_writes_its_inputs_is_blamed_not_the_kernel(pc, check):
    with pytest.raises(PipecheckError) as info:
        CHECKS[check](pc, _spec(good, reference=_ref_scaling_a), SHAPE)
    msg = str(info.value)
    assert msg.startswith("spec 'toy': the reference wrote its input 'a' at M9-K40-N7")
    assert "a kernel must not write" not in msg and "the kernel's inputs were not touched" in msg
    assert pc.results[-1].verdict is Verdict.ERROR and pc.results[-1].details["culprit"] == "reference"


def test_same_precision_that_writes_its_inputs_is_blamed(pc):
    def lowp(arrays, dims):
        arrays["b"].zero_()
        return {"c": torch.zeros(dims["M"], dims["N"], dtype=torch.float16)}

    with pytest.raises(PipecheckError, match="the same_precision implementation wrote its input 'b'"):
        coverage.check_coverage(pc, _spec(good, same_precision=lowp), SHAPE)


@pytest.mark.pipecheck(expect_failures=True)
def test_kernel_that_writes_its_inputs_is_still_blamed(pipecheck):
    def clobber(arrays, dims):
        good(arrays, dims)
        arrays["b"][0, 0] = 5

    with pytest.raises(PipecheckFailure, match=r"input 'b': 1 element.* a kernel must not write its inputs"):
        coverage.check_coverage(pipecheck, _spec(clobber), SHAPE)


# ----------------------------------------------------------------------------- the comparison itself


def test_compare_never_counts_a_non_finite_reference_or_tolerance_as_agreement():
    import numpy as np

    from pytest_pipecheck.model import tolerance as tol

    ref = np.array([1.0, math.nan, math.inf, -math.inf])
    out = np.array([1.0, math.nan, 0.0, -math.inf])
    c = tol.compare(out, ref, tol.Tolerance(1e-3, 1e-3, "test"))
    assert c.bad == 3  # only the finite, equal element agrees
    for bad_tol in (tol.Tolerance(math.nan, 0.0, "t"), tol.Tolerance(0.0, math.inf, "t"), tol.Tolerance(-1.0, 0.0, "t")):
        assert tol.compare(np.zeros(3), np.ones(3) * 5, bad_tol).bad == 3
