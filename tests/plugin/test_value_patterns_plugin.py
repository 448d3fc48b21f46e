"""The plugin parametrizes ``values`` from the marker's spec: paired with ``shape``, or alone."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

KERNELS = '''
import pytest
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor

def ref(arrays, dims):
    return {"m": arrays["x"].double().amax(dim=1)}

def good(arrays, dims):
    arrays["m"].copy_(arrays["x"].float().amax(dim=1))

def zero_padded(arrays, dims):
    # the masked-max bug in torch: the last partial tile is padded with 0, not -inf
    x = arrays["x"].float()
    pad = (-dims["N"]) % 16
    arrays["m"].copy_(torch.nn.functional.pad(x, (0, pad), value=0.0).amax(dim=1))

import torch
SPEC = KernelSpec("rowmax", good, ref, [Tensor("x", ("M", "N")), Tensor("m", ("M",), dtype="float32", role="output")],
                  {"N": 16}, "N")
BAD = KernelSpec("rowmax_pad0", zero_padded, ref,
                 [Tensor("x", ("M", "N")), Tensor("m", ("M",), dtype="float32", role="output")], {"N": 16}, "N")
'''


def test_shape_and_values_are_paired_with_readable_ids(pytester):
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_pairs='''
import pytest
from kernels import SPEC, BAD

@pytest.mark.pipecheck(spec=SPEC)
def test_good(pipecheck, shape, values):
    pipecheck.check_coverage(SPEC, shape, values=values)

@pytest.mark.pipecheck(spec=BAD)
def test_bad(pipecheck, shape, values):
    pipecheck.check_coverage(BAD, shape, values=values)

@pytest.mark.pipecheck(spec=SPEC)
def test_values_only(pipecheck, values):
    pipecheck.check_coverage(SPEC, "M2-N20", values=values)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-v", "--pipecheck-seed=3")
    # 7 shapes with normal + 5 patterns on ragged shapes, 3 layout variants at 2 shapes each and the extent
    # case (a test that takes a shape gets them too), twice; 6 patterns alone
    result.assert_outcomes(passed=(12 + 6 + 1) + (11 + 6 + 1) + 6, failed=1)
    result.stdout.fnmatch_lines(["*test_good?M1-N9-values=normal? PASSED*",
                                 "*test_good?M1-N79-values=negative? PASSED*",
                                 "*test_bad?M1-N79-values=negative? FAILED*",
                                 "*test_values_only?values=tiny? PASSED*",
                                 "*rowmax_pad0 at M1-N79 values=negative: coverage failed*"])
