"""A kernel library's suite in the README's form, with a strict xfail for a known upstream bug (mamba-ssm's
``selective_state_update(..., D=None)`` raises a TypeError although ``D`` defaults to None): the run is "merge OK",
in every output, with the xfailed cases counted as pytest counts them (docs/verdicts.md, "Expected failures").
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.cpu_only

SUITE = '''
import pytest
import torch
from pytest_pipecheck import KernelSpec, Tensor


def state_update(x, dt, D=None):  # the library's entry point, with its upstream bug
    if D is None:
        raise TypeError("unsupported operand type(s) for *: 'Tensor' and 'NoneType'")
    return x * dt[:, None] + D[None, :] * x


def _ref(a, d, with_d=True):
    x, dt = a["x"].double(), a["dt"].double()
    return {"y": x * dt[:, None] + (a["D"].double()[None, :] * x if with_d else 0)}


WITH_D = KernelSpec("state_update", call=lambda x, dt, D: state_update(x, dt, D), reference=_ref,
                    tensors=[Tensor("x", ("M", "N"), "float32"), Tensor("dt", ("M",), "float32"),
                             Tensor("D", ("N",), "float32"), Tensor("y", ("M", "N"), "float32", role="output")],
                    tiles={"M": 4, "N": 32}, loop_dim="N")
WITHOUT_D = KernelSpec("state_update_no_d", call=lambda x, dt: state_update(x, dt),
                       reference=lambda a, d: _ref(a, d, with_d=False),
                       tensors=[Tensor("x", ("M", "N"), "float32"), Tensor("dt", ("M",), "float32"),
                                Tensor("y", ("M", "N"), "float32", role="output")],
                       tiles={"M": 4, "N": 32}, loop_dim="N")


@pytest.mark.pipecheck(spec=WITH_D)
def test_state_update(pipecheck, shape):
    pipecheck.check_kernel(WITH_D, shape)


@pytest.mark.xfail(raises=TypeError, strict=True, reason="upstream: D=None raises TypeError (issue link)")
@pytest.mark.pipecheck(spec=WITHOUT_D)
def test_state_update_without_d(pipecheck, shape):
    pipecheck.check_kernel(WITHOUT_D, shape)
'''


def test_a_strict_xfail_for_an_upstream_bug_gets_merge_ok(pytester: pytest.Pytester) -> None:
    pytest.importorskip("torch")
    pytester.makepyfile(test_library=SUITE)
    result = pytester.runpytest("--pipecheck", "-p", "no:cacheprovider", "--pipecheck-json=r.json",
                                "--pipecheck-markdown=r.md", "--junitxml=j.xml")
    doc = json.loads((pytester.path / "r.json").read_text())
    md = (pytester.path / "r.md").read_text().splitlines()[0]
    totals = doc["test_totals"]
    assert totals["xfailed"] >= 3 and totals["passed"] >= 3 and not totals["failed"] and not totals["error"], totals
    assert result.ret == 0 and doc["ok"] is True, (md, result.stdout.str()[-3000:])
    assert md.startswith("✅ pipecheck: merge OK — "), md
    # the xfailed cases' checks, if any recorded a failure, read xfailed, never fail
    assert doc["totals"]["fail"] == 0 and doc["totals"]["error"] == 0, doc["totals"]
