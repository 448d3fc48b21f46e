"""On a GPU, under ``pytest --pipecheck --pipecheck-tier=gpu`` with the default tools: a library's suite with a
strict xfail for an upstream bug is "merge OK", and a parametrized mutant whose bug shows at one case only is
caught there and passes (a third library's first day: tests/plugin/test_upstream_xfail.py and
tests/plugin/test_expect_across_cases.py run the same suites on the CPU tier). When PIPECHECK_EVIDENCE_DIR is set,
each inner run's output is written there. Needs a CUDA GPU and compute-sanitizer; skipped with the reason
otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _pipecheck_results import keep_output, needs_compute_sanitizer

HERE = Path(__file__).resolve().parent
PLUGIN = HERE.parent / "plugin"

MUTANT = '''
import pytest
import torch
from pytest_pipecheck import KernelSpec, Tensor

TILE = 16


def row_sums(drop_tail):
    def launch(a, d):
        x = a["x"].double()
        k = d["K"] - d["K"] % TILE if drop_tail else d["K"]  # the planted bug: the ragged K tail is lost
        a["s"].copy_(x[:, :k].sum(-1).float())
    return launch


def spec(drop_tail):
    return KernelSpec("row_sums_tail" if drop_tail else "row_sums", row_sums(drop_tail),
                      lambda a, d: {"s": a["x"].double().sum(-1)},
                      [Tensor("x", ("M", "K"), "float32"), Tensor("s", ("M",), "float32", role="output")],
                      tiles={"M": 4, "K": TILE}, loop_dim="K")


@pytest.mark.pipecheck(expect_failures=True)
@pytest.mark.parametrize("K", [32, 33, 64])
def test_k_tail_mutant(pipecheck, K):
    pipecheck.check_kernel(spec(True), f"M5-K{K}")


@pytest.mark.parametrize("K", [32, 33, 64])
def test_twin(pipecheck, K):
    pipecheck.check_kernel(spec(False), f"M5-K{K}")
'''


def _inner(pytester: pytest.Pytester, name: str, text: str) -> tuple[pytest.RunResult, dict, str]:
    needs_compute_sanitizer("torch")
    pytester.makepyfile(**{name: text})
    result = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-tier=gpu", "-p", "no:cacheprovider", "-rA",
                                           "--pipecheck-json=r.json", "--pipecheck-markdown=r.md", timeout=400)
    keep_output(result, f"first-day-{name}.txt")
    doc = json.loads((pytester.path / "r.json").read_text())
    return result, doc, (pytester.path / "r.md").read_text().splitlines()[0]


@pytest.mark.gpu
def test_a_strict_xfail_for_an_upstream_bug_is_merge_ok_on_the_gpu_tier(pytester: pytest.Pytester) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("upstream_xfail", PLUGIN / "test_upstream_xfail.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result, doc, md = _inner(pytester, "test_library", module.SUITE)
    assert doc["tier"]["tier"] == "gpu", doc["tier"]
    totals = doc["test_totals"]
    assert totals["xfailed"] >= 3 and totals["passed"] >= 3 and not totals["failed"] and not totals["error"], totals
    assert result.ret == 0 and doc["ok"] is True and md.startswith("✅ pipecheck: merge OK — "), md


@pytest.mark.gpu
def test_a_mutant_caught_at_one_case_passes_on_the_gpu_tier(pytester: pytest.Pytester) -> None:
    result, doc, md = _inner(pytester, "test_tail", MUTANT)
    assert doc["tier"]["tier"] == "gpu", doc["tier"]
    assert result.ret == 0 and doc["ok"] is True, (md, result.stdout.str()[-3000:])
    result.stdout.fnmatch_lines(["*test_k_tail_mutant: the planted bug was caught at 1 of 3 cases ([[]33[]])*"])
    assert not [r for r in doc["results"] if r["check"] == "expect_failures"]
