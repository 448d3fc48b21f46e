"""The coverage checks on small pure-torch 'kernels' with known defects (fast; device = pc.device)."""

from __future__ import annotations

import itertools
import math
import warnings

import pytest

torch = pytest.importorskip("torch")

from _toy_gemm import SHAPE, _spec, good  # noqa: E402

from pytest_pipecheck.checks import correctness, coverage, determinism, failures, tile_probe  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402
from reference_kernels.mutants.triton import BASE_SOURCE  # noqa: E402


def test_correct_kernel_passes_all(pipecheck):
    results = correctness.check_all(pipecheck, _spec(good), SHAPE)
    assert [r.check for r in results] == ["coverage", "tile_probe", "determinism"]
    assert all(r.verdict is Verdict.PASS for r in results)
    assert results[0].summary.startswith("worst err 0.") and "of tol (rtol 2e-03, atol 2e-03)" in results[0].summary
    assert "3 of 3 K tiles each counted once, worst err 0." in results[1].summary


@pytest.mark.pipecheck(expect_failures=True)
def test_kernel_ignoring_strides_is_caught(pipecheck):
    def contiguous_writer(arrays, dims):
        c = arrays["c"]
        flat = torch.as_strided(c, (c.shape[0], c.shape[1]), (c.shape[1], 1))
        flat.copy_((arrays["a"].float() @ arrays["b"].float()).half())

    with pytest.raises(PipecheckFailure) as info:
        coverage.check_coverage(pipecheck, _spec(contiguous_writer, "stride_blind"), SHAPE)
    msg = str(info.value)
    assert "stride_blind at M9-K40-N7" in msg and "never written" in msg and "row padding" in msg


@pytest.mark.pipecheck(expect_failures=True)
def test_unwritten_last_row_named_by_tile(pipecheck):
    def skip_last_row(arrays, dims):
        arrays["c"][:-1].copy_((arrays["a"][:-1].float() @ arrays["b"].float()).half())

    with pytest.raises(PipecheckFailure, match=r"7 of 63 \(11.11%\) elements never written .* first at \[8, 0\] "
                                               r"\(M tile 1 of 2 \(last, partial 1/8\)"):
        coverage.check_coverage(pipecheck, _spec(skip_last_row, "lazy"), SHAPE)
    assert pipecheck.results[-1].verdict is Verdict.FAIL and pipecheck.results[-1].check == "coverage"


@pytest.mark.pipecheck(expect_failures=True)
def test_mismatch_reports_worst_and_tolerance(pipecheck):
    def off_by_one(arrays, dims):
        good(arrays, dims)
        arrays["c"][3, 5] += 1

    with pytest.raises(PipecheckFailure) as info:
        coverage.check_coverage(pipecheck, _spec(off_by_one), SHAPE)
    msg = str(info.value)
    assert "1 of 63 (1.59%) elements exceed the tolerance; worst at [3, 5]" in msg
    assert "float16 default" in msg and "reproduce: pytest" in msg


@pytest.mark.pipecheck(expect_failures=True)
def test_dropped_last_tile_named_by_probe(pipecheck):
    def drop_last(arrays, dims):
        k = (dims["K"] - 1) // 16 * 16
        arrays["c"].copy_((arrays["a"][:, :k].float() @ arrays["b"][:k].float()).half())

    with pytest.raises(PipecheckFailure, match=r"K tile 2 of 3, the last \(epilogue, partial 8/16\), never reached"):
        tile_probe.check_tile_probe(pipecheck, _spec(drop_last), SHAPE)


@pytest.mark.pipecheck(expect_failures=True)
def test_race_like_nondeterminism_is_reported_unless_declared(pipecheck):
    counter = itertools.count()

    def flaky(arrays, dims):
        good(arrays, dims)
        if next(counter) % 2:
            arrays["c"][2, 3] += 0.5

    with pytest.raises(PipecheckFailure, match=r"suspected race: run 2 differs from run 1 in 1 of 63 .* first at \[2, 3\]"):
        determinism.check_determinism(pipecheck, _spec(flaky), SHAPE)
    skipped = determinism.check_determinism(pipecheck, _spec(flaky, deterministic=False), SHAPE)
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


class CompilationError(Exception):
    """Stands in for triton.compiler.errors.CompilationError: what str() of one reads like."""


def _base_lines(first: str, stop: str) -> str:
    """The lines of the Triton mutants' base kernel (reference_kernels/mutants/triton/gemm_base.py) from the one
    that starts with ``first`` up to, not including, the one that starts with ``stop``."""
    source = BASE_SOURCE.read_text()
    start = source.index("\n" + first) + 1
    return source[start:source.index("\n" + stop, start) + 1]


# str() of the CompilationError that Triton 3.9 raises (compiling for sm_90) on a mutant that uses a
# loop's block values after the loop (the base's K loop, then the bug); Triton 3.6 raises the same "at 29:17:"
_TRITON_ERROR = ("at 29:17:\n" + _base_lines("    acc = tl.zeros(", "    c = acc.to(")
                 + """    acc = tl.dot(a, b, acc)  # BUG: the drained last stage is consumed a second time
                 ^
NameError('a is not defined')""")


@pytest.mark.pipecheck(expect_failures=True)
@pytest.mark.parametrize("check", [coverage.check_coverage, tile_probe.check_tile_probe, determinism.check_determinism])
def test_multi_line_kernel_error_keeps_the_compiler_message(pipecheck, check):
    def does_not_compile(arrays, dims):
        raise CompilationError(_TRITON_ERROR)

    with pytest.raises(PipecheckFailure) as info:
        check(pipecheck, _spec(does_not_compile, "broken"), SHAPE)
    msg = str(info.value)
    first = msg.splitlines()[0]
    assert first.startswith("broken at M9-K40-N7: the kernel raised during ") and "CompilationError: at 29:17:" in first
    # the caret line and the underlying error survive, in the failure and in the recorded details
    error = info.value.result.details["error"]
    for text in (msg, error):
        assert "    acc = tl.dot(a, b, acc)  # BUG" in text and "NameError('a is not defined')" in text
        assert "                 ^" in text
    assert msg.startswith(error) and msg.rstrip().splitlines()[-1].startswith("  reproduce: pytest")
    assert info.value.result.summary == "kernel raised CompilationError at M9-K40-N7"


@pytest.mark.pipecheck(expect_failures=True)
def test_long_kernel_error_is_bounded_keeping_head_and_tail(pipecheck):
    def verbose(arrays, dims):
        try:
            raise ValueError("the underlying reason")
        except ValueError as exc:
            raise RuntimeError("\n".join([f"line {i}" for i in range(200)] + ["x" * 5000])) from exc

    with pytest.raises(PipecheckFailure) as info:
        coverage.check_coverage(pipecheck, _spec(verbose, "chatty"), SHAPE)
    error = info.value.result.details["error"]
    lines = error.splitlines()
    assert len(lines) == failures.MAX_ERROR_LINES
    assert "RuntimeError: line 0" in lines[0] and lines[1].strip() == "line 1"
    assert any("lines left out" in ln for ln in lines)
    assert lines[-2].strip().startswith("xxx") and lines[-2].endswith("...")
    assert lines[-1].strip() == "caused by ValueError: the underlying reason"
    assert max(len(ln) for ln in lines[1:]) <= failures.MAX_ERROR_LINE_CHARS + 4
    assert len(str(info.value)) < 5000


@pytest.mark.pipecheck(expect_failures=True)
def test_one_line_kernel_error_unchanged(pipecheck):
    def boom(arrays, dims):
        raise RuntimeError("boom")

    with pytest.raises(PipecheckFailure) as info:
        coverage.check_coverage(pipecheck, _spec(boom), SHAPE)
    assert len(info.value.result.details["error"].splitlines()) == 1
    assert "the kernel raised during the coverage run: RuntimeError: boom (at " in str(info.value)


@pytest.mark.pipecheck(expect_failures=True)
def test_a_tile_that_writes_inf_says_so_without_numpy_warnings(pipecheck):
    def inf_in_c(arrays, dims):
        good(arrays, dims)
        arrays["c"][0, 0] = math.inf
        arrays["c"][0, 1] = -math.inf

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(PipecheckFailure) as info:
            tile_probe.check_tile_probe(pipecheck, _spec(inf_in_c), SHAPE)
    msg = str(info.value)
    # was "contributes nanx what it should" (and numpy's "invalid value encountered" on the way)
    assert "x what it should" not in msg, msg
    assert "K tile 0 of 3, the first (prologue), wrote 2 infinite value(s) into 'c', worst at [0, " in msg, msg


def test_comparisons_of_inf_nan_and_huge_errors_raise_no_numpy_warnings():
    import numpy as np

    from pytest_pipecheck.model import tolerance as tol

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        cmp = tol.compare(np.array([1e308, -1e308, math.inf, math.nan, 1.0]), np.array([-1e308, 1e308, 1.0, 1.0, 1.0]),
                          tol.Tolerance(0.0, 1e-300, "test"))
    assert cmp.bad == 4 and cmp.nan == 1 and cmp.of_tol == math.inf
