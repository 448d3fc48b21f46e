"""A test taking ``layout`` under ``pipecheck(spec=...)`` is parametrized with the spec's layouts."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


def test_layout_argument_is_parametrized_with_readable_ids(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_lay='''
import pytest
from pytest_pipecheck import KernelSpec, Tensor

def ref(arrays, dims):
    return {"c": arrays["a"].double() + arrays["b"].double()}

def add(arrays, dims):
    arrays["c"].copy_(arrays["a"] + arrays["b"])

SPEC = KernelSpec("add", add, ref, [Tensor("a", ("M", "N"), "float32"), Tensor("b", ("M", "N"), "float32"),
                                    Tensor("c", ("M", "N"), "float32", role="output")], {"M": 8, "N": 8}, "N")

@pytest.mark.pipecheck(spec=SPEC)
def test_add(pipecheck, shape, layout):
    pipecheck.check_kernel(SPEC, shape, layout=layout)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.stdout.fnmatch_lines(["*test_add?M5-N5-padded? PASSED*", "*test_add?M5-N5-a-transposed? PASSED*",
                                 "*test_add?M5-N5-b-sliced? PASSED*", "*test_add?M5-N5-c-offset? PASSED*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["passed"] % 4 == 0
