"""On an sm_90 GPU: each Gluon mutant (reference_kernels/mutants/gluon/) is caught by ConSan with a message
naming its hazard, and the reference kernel is clean under ConSan at the same launch.

Runs the module :func:`reference_kernels.mutants.gluon.consan_batch.module_source` generates in one
``pytest --pipecheck --pipecheck-sanitizer=consan`` subprocess and judges pipecheck's own verdicts
(``--pipecheck-json``) with ``consan_batch.evaluate``. pipecheck's watchdog (``sanitizer_timeout``) turns a
mutant that hangs into that mutant's failure, and the whole run has a hard limit here, so a hang reads
as a failure with a message and never blocks the suite. Skipped, with the reason, without an sm_90 GPU,
without a Gluon-capable Triton, or while pipecheck has no ``consan`` tool.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.gpu
#: seconds the whole batch (8 tests, each a ConSan compile and one launch) may take
BATCH_TIMEOUT = 540


def _require_consan_and_sm90() -> None:
    from pytest_pipecheck import config

    if config.CONSAN not in config.SANITIZER_CHOICES:
        pytest.skip("consan tool not available")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from pytest_pipecheck.sanitizer.consan import unavailable_reason as consan_unavailable

    major, minor = torch.cuda.get_device_capability()
    why = consan_unavailable(f"{major}.{minor}")
    if why:
        pytest.skip(why)
    from reference_kernels.triton.gluon_gemm import unavailable_reason

    reason = unavailable_reason("cuda")
    if reason:
        pytest.skip(reason)


@pytest.mark.gpu_evidence  # every mutant under ConSan: about 50 s (test_consan_gpu.py keeps ConSan in the tier)
def test_gluon_mutants_are_caught_by_consan(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _require_consan_and_sm90()
    from reference_kernels.mutants.gluon import consan_batch

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    for var in ("PIPECHECK_CHILD", "PIPECHECK_CANARY", "PYTEST_ADDOPTS", "TRITON_INSTRUMENTATION_MODE"):
        monkeypatch.delenv(var, raising=False)
    pytester.makepyfile(test_gluon_consan_batch=consan_batch.module_source())
    report_path = pytester.path / "pipecheck.json"
    args = ["--pipecheck", "--pipecheck-tier=gpu", "--pipecheck-sanitizer=consan", "-p", "no:cacheprovider", "-rA",
            f"--pipecheck-json={report_path}"]
    try:
        result = pytester.runpytest_subprocess(*args, timeout=BATCH_TIMEOUT)
    except pytester.TimeoutExpired:
        pytest.fail(f"the Gluon ConSan batch did not finish within {BATCH_TIMEOUT} s: a mutant hung past pipecheck's "
                    f"watchdog ({consan_batch.HANG_TIMEOUT} s per test); environment: {consan_batch.environment_note()}")
    out = result.stdout.str() + result.stderr.str()
    print(out[-30000:])
    tail = f"\n--- output tail ---\n{out[-8000:]}"
    assert result.ret == 1, f"exit status {result.ret}: expected 1 (the mutants' tests fail, nothing else){tail}"
    assert report_path.is_file(), f"no --pipecheck-json report written{tail}"
    problems = consan_batch.evaluate(json.loads(report_path.read_text()), out)
    assert not problems, "\n".join(["pipecheck's ConSan verdicts on the Gluon mutants fell short:",
                                     *(f"  - {p}" for p in problems)]) + tail
