"""The key number of a coverage result tells the most about it: how many elements are wrong out of how many
and the worst error against the tolerance (a failure), or how close the worst element came to the
tolerance (a pass). Outputs whose unwritten elements cannot be found are marked in both reports."""

from __future__ import annotations

import re
from html import escape

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.checks import coverage  # noqa: E402
from pytest_pipecheck.device import TierInfo  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.report import html  # noqa: E402
from pytest_pipecheck.report.terminal import format_summary  # noqa: E402
from pytest_pipecheck.results import PipecheckFailure, Verdict  # noqa: E402

SHAPE = "M127-N129"  # 16383 elements
CPU = TierInfo("cpu", None, "no GPU here", {})


def _third(arrays, dims):
    arrays["y"].copy_((arrays["x"].float() / 3).half())


def _spec(launch, name="third", **kw):
    return KernelSpec(name, launch, lambda a, d: {"y": a["x"].double() / 3},
                      [Tensor("x", ("M", "N")), Tensor("y", ("M", "N"), role="output", **kw)],
                      {"M": 16, "N": 64}, "N")


def _off_by_4e_3(arrays, dims):
    """17 elements, each near zero, off by 0.004: twice the float16 tolerance there."""
    _third(arrays, dims)
    y = arrays["y"]
    flat = torch.argsort(arrays["x"].float().abs().reshape(-1))[:17]
    rows, cols = flat // y.shape[1], flat % y.shape[1]
    y[rows, cols] = (y[rows, cols].float() + 0.004).half()


def _writes_two_rows(arrays, dims):
    """98% of the elements never written: only the first two of 127 rows."""
    arrays["y"][:2].copy_((arrays["x"][:2].float() / 3).half())


def _key(pipecheck, launch) -> str:
    with pytest.raises(PipecheckFailure):
        coverage.check_coverage(pipecheck, _spec(launch), SHAPE)
    result = pipecheck.results[-1]
    assert result.check == "coverage" and result.verdict is Verdict.FAIL
    return result.summary


@pytest.mark.pipecheck(expect_failures=True)
def test_a_few_elements_off_name_their_count_and_worst_error_against_the_tolerance(pipecheck):
    key = _key(pipecheck, _off_by_4e_3)
    # was "max rel err 1.0e+00 (tol rtol 2e-03, atol 2e-03), 1 defect(s) at M127-N129"
    assert re.fullmatch(r"y: 17 of 16383 wrong \(0\.104%\), worst err 0\.004\d* vs tol 0\.002\d* at M127-N129",
                        key), key
    table = "\n".join(text for text, _ in format_summary(pipecheck.results, CPU))
    assert f"third   coverage  1 caught  {key}" in table, table


@pytest.mark.pipecheck(expect_failures=True)
def test_most_elements_unwritten_says_how_many(pipecheck):
    key = _key(pipecheck, _writes_two_rows)
    # was "max rel err ... 1 defect(s) at M127-N129", whatever the share of the output left unwritten
    assert key == "y: 16125 of 16383 wrong (98.4%; never written) at M127-N129", key


def test_a_pass_says_how_close_it_came_to_the_tolerance(pipecheck):
    result = coverage.check_coverage(pipecheck, _spec(_third), SHAPE)
    match = re.fullmatch(r"worst err (\S+) of tol \(rtol 2e-03, atol 2e-03\)", result.summary)
    assert match and 0 < float(match.group(1)) <= 1, result.summary
    assert result.details["of_tol"] == pytest.approx(float(match.group(1)), rel=0.05)


def test_the_passing_group_shows_the_test_closest_to_its_tolerance():
    from pytest_pipecheck.results import CheckResult

    results = [CheckResult("coverage", Verdict.PASS, f"worst err {x} of tol", "k", {"of_tol": x}, f"t.py::t[{i}]")
               for i, x in enumerate((0.1, 0.7, 0.2))]
    table = "\n".join(text for text, _ in format_summary(results, CPU))
    assert "k       coverage  3 pass    worst err 0.7 of tol" in table, table


def _accumulate(arrays, dims):
    arrays["y"].add_((arrays["x"].float() / 3).half())


def _zeros_call(x):
    y = torch.zeros_like(x)  # initialized by the wrapper: an element the kernel skips stays 0
    y.add_(x / 3)
    return y


@pytest.mark.parametrize("form", ["init_zeros", "wrapper_zeros"])
def test_outputs_that_start_zeroed_are_marked_in_the_summary_and_the_html(pipecheck, form):
    if form == "init_zeros":
        spec = _spec(_accumulate, "zeroed", init="zeros")
        why = "init='zeros'"
    else:
        spec = KernelSpec("zeroed", call=_zeros_call, reference=lambda a, d: {"y": a["x"].double() / 3},
                          tensors=[Tensor("x", ("M", "N")), Tensor("y", ("M", "N"), role="output")],
                          tiles={"M": 16, "N": 64}, loop_dim="N")
        why = "torch.zeros_like in the call at"
    result = coverage.check_coverage(pipecheck, spec, "M9-N70")
    assert result.verdict is Verdict.PASS and result.summary.endswith("; not poisoned: y"), result.summary
    assert why in result.details["outputs"]["y"]["unwritten_not_checked"]
    lines = [text for text, _ in format_summary(pipecheck.results, CPU)]
    head = lines.index("coverage without the unwritten-element check (an element the kernel never wrote cannot be "
                       "told from a written one):")
    assert lines[head + 1].startswith("  zeroed 'y' x1: ") and why in lines[head + 1], lines
    page = html.render(pipecheck.results, CPU, 1, created="now")
    assert 'id="unpoisoned"' in page and "<code>y</code>" in page and escape(why) in page
