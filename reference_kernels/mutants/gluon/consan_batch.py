"""The Gluon mutants as one ``pytest --pipecheck`` batch under ConSan, and the verdicts it must reach.

:func:`module_source` writes a test module with one test per Gluon mutant and one clean control per
mutant launch (the reference kernel at the same shape and program count). Each test launches its
kernel once through the ``pipecheck`` fixture, marked ``sanitizer="consan"``, so pipecheck's
sanitizer plugin runs it in a ConSan child; a mutant is launched only inside that child (a ConSan
violation aborts the process, and an uninstrumented mutant may hang). Run it with::

    python -m pytest --pipecheck --pipecheck-tier=gpu --pipecheck-sanitizer=consan \\
        -p no:cacheprovider -rA --pipecheck-json=REPORT.json GENERATED.py

and hand the JSON report and the output to :func:`evaluate`: [] when every mutant failed under ConSan
with its message fragment (``Mutant.expect``) and every control passed it clean.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..engine import batch_module_head, pytest_outcomes, short_result
from . import MUTANTS

__all__ = ["CHECK_NAMES", "HANG_TIMEOUT", "Case", "cases", "evaluate", "module_source", "run_case"]

#: the names a ConSan result may carry in pipecheck's report (the tool's own and its sanitizer-style one)
CHECK_NAMES = ("sanitizer:consan", "consan")
#: sanitizer_timeout (s) per test: a ConSan compile of the GEMM takes seconds, the launch well under one
HANG_TIMEOUT = 180.0


@dataclass(frozen=True)
class Case:
    """One generated test: a mutant, or the reference at a mutant's launch (``control``)."""

    test: str
    mutant: str          # the mutant whose launch (shape, programs) this case uses
    control: bool

    @property
    def shape(self) -> tuple[int, int, int]:
        shape: Sequence[int] = MUTANTS[self.mutant].extra["shape"]  # type: ignore[assignment]
        return int(shape[0]), int(shape[1]), int(shape[2])

    @property
    def num_programs(self) -> int:
        return int(MUTANTS[self.mutant].extra["num_programs"])  # type: ignore[call-overload]


def cases() -> list[Case]:
    """A control before each mutant: the reference at the same launch must be clean."""
    out: list[Case] = []
    for name in MUTANTS:
        out.append(Case(f"test_control_{name}", name, True))
        out.append(Case(f"test_mutant_{name}", name, False))
    return out


def module_source(*, dry_run: bool = False, hang_timeout: float = HANG_TIMEOUT) -> str:
    """The generated test module. ``dry_run`` launches nothing (for testing the batch without a GPU)."""
    lines = batch_module_head("reference_kernels.mutants.gluon.consan_batch",
                              "every Gluon mutant and the reference at the same launch, one launch each, checked "
                              "by pipecheck under ConSan", dry_run=dry_run)
    for c in cases():
        lines += ["", "", f'@pytest.mark.pipecheck(sanitizer="consan", sanitizer_timeout={hang_timeout!r})',
                  f"def {c.test}(pipecheck):",
                  f"    run_case({c.mutant!r}, pipecheck, control={c.control!r}, dry_run=DRY_RUN)"]
    return "\n".join(lines) + "\n"


def run_case(mutant: str, pipecheck: Any, *, control: bool, dry_run: bool = False) -> None:
    """Launch mutant ``mutant`` (or, with ``control``, the reference) once at the mutant's launch.

    A mutant runs only in a sanitizer child; a control runs everywhere and must be exact (inputs in
    {-1, 0, 1}: every fp32 sum is an integer of at most K, exact in fp16 for K <= 2048).
    """
    if dry_run or (not control and not pipecheck.role.sanitizer):
        return
    import torch
    import triton

    from reference_kernels.mutants import gluon
    from reference_kernels.triton.gluon_gemm import GPU_CONFIG

    reason = pipecheck_unavailable(pipecheck)
    if reason:
        import pytest

        pytest.skip(reason)
    if hasattr(triton, "set_allocator"):  # ConSan keeps its state in global scratch memory
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    module = gluon.base() if control else gluon.load(mutant)
    case = Case("", mutant, control)
    m, k, n = case.shape
    g = torch.Generator(device="cuda").manual_seed(pipecheck.seed)
    a = torch.randint(-1, 2, (m, k), device="cuda", generator=g).to(torch.float16)
    b = torch.randint(-1, 2, (k, n), device="cuda", generator=g).to(torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    module.launch_gluon_gemm(a, b, c, **{**GPU_CONFIG, "num_programs": case.num_programs})
    torch.cuda.synchronize()
    if control:
        want = (a.double() @ b.double()).to(torch.float16)
        bad = int((c != want).sum().item())
        assert bad == 0, f"reference Gluon GEMM at M={m} K={k} N={n}: {bad} of {m * n} elements differ"


def pipecheck_unavailable(pipecheck: Any) -> str | None:
    """Why the Gluon kernel cannot run here (None when it can)."""
    from reference_kernels.triton.gluon_gemm import unavailable_reason

    return unavailable_reason(getattr(pipecheck, "device", "cuda"))


# --------------------------------------------------------------------------- verdicts


def evaluate(report: Mapping[str, Any], output: str = "", *, case_list: Sequence[Case] | None = None) -> list[str]:
    """Every problem with a batch run (``--pipecheck-json`` document and ``-rA`` output); [] when each
    control passed ConSan clean and each mutant failed it, not as a hang, with its ``expect`` fragment
    in the result (summary, findings or the child's output)."""
    case_list = list(case_list if case_list is not None else cases())
    by: dict[str, dict[str, Any]] = {}
    for r in report.get("results", []):
        if r.get("check") in CHECK_NAMES:
            by[str(r.get("nodeid", "")).rsplit("::", 1)[-1]] = r
    outcomes = pytest_outcomes(output)
    problems: list[str] = []
    for c in case_list:
        want = "PASSED" if c.control else "FAILED"
        if output and outcomes.get(c.test) != want:
            problems.append(f"{c.test}: pytest outcome {outcomes.get(c.test, 'missing')}, expected {want}")
        r = by.get(c.test)
        if r is None:
            problems.append(f"{c.test}: no ConSan result (checks named {CHECK_NAMES})")
            continue
        summary = str(r.get("summary", ""))
        if c.control:
            if r.get("verdict") != "pass":
                problems.append(f"{c.test}: the reference is not clean under ConSan at {c.mutant}'s launch: "
                                f"{short_result(r)}")
            continue
        expect = MUTANTS[c.mutant].expect
        if r.get("verdict") != "fail":
            problems.append(f"{c.test}: mutant not caught by ConSan: {short_result(r)}")
        elif summary.startswith("hang"):
            problems.append(f"{c.test}: reported as a hang, expected a ConSan violation ({expect!r}): {short_result(r)}")
        elif not any(f.lower() in json.dumps(r).lower() for f in expect.split("|")):
            problems.append(f"{c.test}: ConSan failed it without naming the hazard ({expect!r} is nowhere in "
                            f"the result): {short_result(r)}")
    return problems


def environment_note() -> str:
    """The ConSan-related environment of this process, for a failure message."""
    keys = sorted(k for k in os.environ if k.startswith(("TRITON_", "PIPECHECK_")))
    return ", ".join(f"{k}={os.environ[k]}" for k in keys) or "no TRITON_* or PIPECHECK_* variables set"
