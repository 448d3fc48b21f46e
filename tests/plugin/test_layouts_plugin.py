"""A test taking ``layout`` under ``pipecheck(spec=...)`` is parametrized with the spec's layouts."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

# the head of each test module below: an elementwise add and its spec
ADD_SPEC = '''
import pytest
from pytest_pipecheck import KernelSpec, Tensor

def ref(arrays, dims):
    return {"c": arrays["a"].double() + arrays["b"].double()}

def add(arrays, dims):
    arrays["c"].copy_(arrays["a"] + arrays["b"])

SPEC = KernelSpec("add", add, ref, [Tensor("a", ("M", "N"), "float32"), Tensor("b", ("M", "N"), "float32"),
                                    Tensor("c", ("M", "N"), "float32", role="output")], {"M": 8, "N": 8}, "N")
'''


def test_layout_argument_is_parametrized_with_readable_ids(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_lay=ADD_SPEC + '''
@pytest.mark.pipecheck(spec=SPEC)
def test_add(pipecheck, shape, layout):
    pipecheck.check_kernel(SPEC, shape, layout=layout)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-v")
    result.stdout.fnmatch_lines(["*test_add?M5-N5-padded? PASSED*", "*test_add?M5-N5-a-transposed? PASSED*",
                                 "*-b-sliced? PASSED*", "*-c-offset? PASSED*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0
    # every shape in the base layout; each variant at PER_LAYOUT["small"] shapes, not at every shape
    ids = [line.split("[", 1)[1].split("]", 1)[0] for line in result.outlines
           if line.startswith("test_lay.py::test_add[") and " PASSED" in line]
    base = [i for i in ids if i.endswith("-padded")]
    for variant in ("a-transposed", "b-sliced", "c-offset"):
        assert sum(i.endswith(variant) for i in ids) == 2, (variant, ids)
    assert outcomes["passed"] == len(base) + 6


def test_shape_values_and_layout_together(pytester: pytest.Pytester) -> None:
    """All three arguments: (shape, pattern) cases in the base layout, variants under the normal pattern."""
    pytester.makepyfile(test_lay3=ADD_SPEC + '''
@pytest.mark.pipecheck(spec=SPEC)
def test_add(pipecheck, shape, values, layout):
    pipecheck.check_kernel(SPEC, shape, values=values, layout=layout)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q")
    ids = [line.split("[", 1)[1].rstrip("]") for line in result.outlines if line.startswith("test_lay3.py::test_add[")]
    assert ids, result.outlines
    variants = [i for i in ids if not i.endswith("-padded")]
    assert len(variants) == 6 and all("-values=normal-" in i for i in variants), variants
    based = [i for i in ids if i.endswith("-padded")]
    assert any("-values=negative-padded" in i for i in based)
    # no cross product: the (shape, pattern) cases once each, plus two shapes per variant
    assert len(ids) == len(based) + 6 and len(set(ids)) == len(ids)
