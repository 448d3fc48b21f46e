"""A toy pure-torch GEMM spec for the coverage checks' CPU tests (imported by several test files)."""

from __future__ import annotations

from pytest_pipecheck.model.shape import Shape
from pytest_pipecheck.model.spec import KernelSpec
from pytest_pipecheck.model.tensor import Tensor

SHAPE = Shape(M=9, K=40, N=7)  # K: 3 tiles of 16, the last partial


def _ref(arrays, dims):
    return {"c": arrays["a"].double() @ arrays["b"].double()}


def _spec(launch, name="toy", reference=_ref, **kw):
    return KernelSpec(name, launch, reference,
                      [Tensor("a", ("M", "K")), Tensor("b", ("K", "N")), Tensor("c", ("M", "N"), role="output")],
                      {"M": 8, "N": 8, "K": 16}, "K", stages=2, **kw)


def good(arrays, dims):
    arrays["c"].copy_((arrays["a"].float() @ arrays["b"].float()).half())
