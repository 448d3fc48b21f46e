"""The coverage checks on small pure-torch 'kernels' with known defects (fast; device = pc.device)."""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.checks import coverage  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402
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


def test_correct_kernel_passes_all(pipecheck):
    results = coverage.check_all(pipecheck, _spec(good), SHAPE)
    assert [r.check for r in results] == ["coverage", "tile_probe", "determinism"]
    assert all(r.verdict is Verdict.PASS for r in results)
    assert "max rel err" in results[0].summary and "3 of 3 K tiles" in results[1].summary


def test_kernel_ignoring_strides_is_caught(pipecheck):
    def contiguous_writer(arrays, dims):
        c = arrays["c"]
        flat = torch.as_strided(c, (c.shape[0], c.shape[1]), (c.shape[1], 1))
        flat.copy_((arrays["a"].float() @ arrays["b"].float()).half())

    with pytest.raises(PipecheckFailure) as info:
        coverage.check_coverage(pipecheck, _spec(contiguous_writer, "stride_blind"), SHAPE)
    msg = str(info.value)
    assert "stride_blind at M9-K40-N7" in msg and "never written" in msg and "row padding" in msg


def test_unwritten_last_row_named_by_tile(pipecheck):
    def skip_last_row(arrays, dims):
        arrays["c"][:-1].copy_((arrays["a"][:-1].float() @ arrays["b"].float()).half())

    with pytest.raises(PipecheckFailure, match=r"7 of 63 \(11.11%\) elements never written .* first at \[8, 0\] "
                                               r"\(M tile 1 of 2 \(last, partial 1/8\)"):
        coverage.check_coverage(pipecheck, _spec(skip_last_row, "lazy"), SHAPE)
    assert pipecheck.results[-1].verdict is Verdict.FAIL and pipecheck.results[-1].check == "coverage"


def test_mismatch_reports_worst_and_tolerance(pipecheck):
    def off_by_one(arrays, dims):
        good(arrays, dims)
        arrays["c"][3, 5] += 1

    with pytest.raises(PipecheckFailure) as info:
        coverage.check_coverage(pipecheck, _spec(off_by_one), SHAPE)
    msg = str(info.value)
    assert "1 of 63 (1.59%) elements exceed the tolerance; worst at [3, 5]" in msg
    assert "float16 default" in msg and "reproduce: pytest" in msg


def test_dropped_last_tile_named_by_probe(pipecheck):
    def drop_last(arrays, dims):
        k = (dims["K"] - 1) // 16 * 16
        arrays["c"].copy_((arrays["a"][:, :k].float() @ arrays["b"][:k].float()).half())

    with pytest.raises(PipecheckFailure, match=r"K tile 2 of 3, the last \(epilogue, partial 8/16\), never reached"):
        coverage.check_tile_probe(pipecheck, _spec(drop_last), SHAPE)


def test_race_like_nondeterminism_is_reported_unless_declared(pipecheck):
    counter = itertools.count()

    def flaky(arrays, dims):
        good(arrays, dims)
        if next(counter) % 2:
            arrays["c"][2, 3] += 0.5

    with pytest.raises(PipecheckFailure, match=r"suspected race: run 2 differs from run 1 in 1 of 63 .* first at \[2, 3\]"):
        coverage.check_determinism(pipecheck, _spec(flaky), SHAPE)
    skipped = coverage.check_determinism(pipecheck, _spec(flaky, deterministic=False), SHAPE)
    assert skipped.verdict is Verdict.SKIP and "non-deterministic" in skipped.summary


@pytest.mark.parametrize("reference, fragment", [
    (lambda a, d: {"c": (a["a"].double() @ a["b"].double())[:-1]}, "has shape (8, 7), expected (9, 7)"),
    (lambda a, d: {"c": (a["a"].float() @ a["b"].float()).half()}, "must be computed in higher precision"),
    (lambda a, d: {"x": 1}, "returned no 'c'"),
])
def test_bad_reference_is_an_error_naming_the_spec(pipecheck, reference, fragment):
    with pytest.raises(PipecheckError, match="spec 'toy'") as info:
        coverage.check_coverage(pipecheck, _spec(good, reference=reference), SHAPE)
    assert fragment in str(info.value)


def test_calibrated_mode_uses_same_precision_error(pipecheck):
    def lowp(arrays, dims):
        return {"c": (arrays["a"].float() @ arrays["b"].float()).half()}

    r = coverage.check_coverage(pipecheck, _spec(good, same_precision=lowp), SHAPE)
    assert "calibrated" in r.details["outputs"]["c"]["tolerance"]
