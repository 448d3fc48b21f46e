"""The README's simplest test, as the test module of a pytester run: one test per spec of the run's ``kernels``
module, marked with that spec and checking it at every shape the plugin generates."""

from __future__ import annotations

import pytest


def simplest_tests(tests: dict[str, str]) -> str:
    """A test module for pytester from ``{test name: spec name}``: it imports each spec from ``kernels`` and holds,
    in the order given, ``@pytest.mark.pipecheck(spec=SPEC)`` over ``def NAME(pipecheck, shape):
    pipecheck.check_kernel(SPEC, shape)``."""
    blocks = [f"@pytest.mark.pipecheck(spec={spec})\ndef {name}(pipecheck, shape):\n"
              f"    pipecheck.check_kernel({spec}, shape)\n" for name, spec in tests.items()]
    return f"\nimport pytest\nfrom kernels import {', '.join(sorted(set(tests.values())))}\n\n\n" + "\n\n".join(blocks)


def run_simplest_tests(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, kernels: str,
                       tests: dict[str, str], seed: int) -> pytest.RunResult:
    """One pytest subprocess on the CPU tier (no GPU) over ``kernels`` as kernels.py and :func:`simplest_tests` of
    ``tests`` as test_suite.py: pipecheck on, no sanitizer, ``-rA`` and the run seed ``seed``."""
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    pytester.makepyfile(kernels=kernels, test_suite=simplest_tests(tests))
    return pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=none", "-p", "no:cacheprovider",
                                         "-rA", f"--pipecheck-seed={seed}")
