"""check_coverage in named steps, each on its own: the launch, the expected outputs, one output's verdict."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402
from pytest_pipecheck.checks import coverage, output_tolerance  # noqa: E402
from pytest_pipecheck.config import PipecheckConfig  # noqa: E402
from pytest_pipecheck.device import TierInfo  # noqa: E402
from pytest_pipecheck.fixture import Pipecheck  # noqa: E402
from pytest_pipecheck.model import layouts, values  # noqa: E402
from pytest_pipecheck.results import CheckResult  # noqa: E402


def _pc() -> Pipecheck:
    return Pipecheck("tests/unit/test_coverage_steps.py::t", PipecheckConfig(), TierInfo("cpu", None, "unit test"), 3)


def _spec(launch):  # type: ignore[no-untyped-def]
    return KernelSpec("half", launch, lambda a, d: {"y": a["x"].double() * 2},
                      [Tensor("x", ("M", "N"), "float32"), Tensor("y", ("M", "N"), "float32", role="output")],
                      tiles={"M": 4, "N": 8}, loop_dim="N")


def _halfway(arrays, dims):  # type: ignore[no-untyped-def]
    # writes the first half of each row, and one element of its input
    n = dims["N"] // 2
    arrays["y"][:, :n] = arrays["x"][:, :n] * 2
    arrays["x"][0, 0] = 0.0


def test_each_step_of_coverage() -> None:
    pc = _pc()
    spec = _spec(_halfway)
    shp = spec.check_shape("M3-N10")
    pattern = values.resolve(None, spec.name)
    lay = layouts.base(spec)
    run = coverage._coverage_run(pc, spec, shp, pattern, lay)
    assert run.second is None  # a float output runs once: NaN payloads are never written by arithmetic
    assert run.input_writes == {"x": 1}
    expected = coverage._expected(pc, spec, shp, run, pattern, "auto", None, None)
    assert not isinstance(expected, CheckResult)  # not a skip: normal values stay in the output's range
    ref, lowp = expected
    assert lowp is None and ref["y"].shape == (3, 10)
    tolerances = coverage._Tolerances(*output_tolerance._spec_tolerances(spec, shp))
    lines, info, check = coverage._output_verdict(pc, spec, shp, spec.tensor("y"), run, ref["y"], lowp, pattern,
                                                  tolerances)
    assert info["unwritten"] == 15 and check.unwritten == 15 and check.size == 30
    assert any(line.startswith("output 'y': 15 of 30 (50.00%) elements never written") for line in lines), lines
    assert pc.results == []  # the steps record nothing: check_coverage records the one result
